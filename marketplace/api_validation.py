"""Our own sentence, in the request's language, for each kind of error pydantic finds in an API
request (its `msg` is English and names Python types): `[{field, code, detail}]` of docs/api.md."""

from django.utils.translation import gettext as _

# The pattern of marketplace.api_support.DecimalText: its mismatch gets a sentence of its own.
DECIMAL_PATTERN = r"^[0-9]{1,8}(\.[0-9]{1,8})?$"

TYPE_ERRORS = {"string_type", "int_type", "float_type", "bool_type", "list_type", "dict_type",
               "model_type", "model_attributes_type", "decimal_type", "none_required", "is_instance_of"}
WHOLE_NUMBER_ERRORS = {"int_parsing", "int_from_float", "int_parsing_size"}
NUMBER_ERRORS = {"float_parsing", "decimal_parsing", "finite_number", "decimal_max_digits",
                 "decimal_max_places", "decimal_whole_digits"}
TIME_ERRORS = {"datetime_parsing", "datetime_type", "datetime_from_date_parsing", "datetime_object_invalid",
               "timezone_aware", "timezone_naive", "date_parsing", "date_type", "date_from_datetime_parsing",
               "date_from_datetime_inexact"}


def _bound(context: dict, name: str):
    return context.get(name, "")


def _detail(kind: str, context: dict) -> str:  # noqa: C901, PLR0911, PLR0912 - one sentence per kind
    if kind == "missing":
        return _("This field is required.")
    if kind == "extra_forbidden":
        return _("This field is not part of this request.")
    if kind in TYPE_ERRORS:
        return _("This value has the wrong type.")
    if kind in WHOLE_NUMBER_ERRORS:
        return _("Send a whole number here.")
    if kind in NUMBER_ERRORS:
        return _("Send a number here.")
    if kind in TIME_ERRORS:
        return _("Send a time in RFC 3339 with its time zone, such as 2026-12-01T21:00:00Z.")
    if kind == "bool_parsing":
        return _("Send true or false here.")
    if kind == "string_pattern_mismatch":
        if context.get("pattern") == DECIMAL_PATTERN:
            return _("Send a decimal number as a string, with a dot and without exponent, such as \"2.49\".")
        return _("This value does not have the expected form.")
    if kind == "string_too_short":
        return _("This value is too short.")
    if kind == "string_too_long":
        return _("Use at most %(count)s characters.") % {"count": _bound(context, "max_length")}
    if kind in {"too_short", "too_long"}:
        return _("This list does not have an allowed number of items.")
    if kind in {"greater_than", "greater_than_equal"}:
        return _("Send a value of at least %(limit)s.") % {
            "limit": _bound(context, "ge") if kind == "greater_than_equal" else _bound(context, "gt")
        }
    if kind in {"less_than", "less_than_equal"}:
        return _("Send a value of at most %(limit)s.") % {
            "limit": _bound(context, "le") if kind == "less_than_equal" else _bound(context, "lt")
        }
    if kind in {"literal_error", "enum"}:
        return _("Choose one of: %(choices)s.") % {"choices": _bound(context, "expected")}
    if kind in {"json_invalid", "json_type"}:
        return _("The body is not valid JSON.")
    if kind in {"string_unicode", "string_sub_type"}:
        return _("This value has the wrong type.")
    return _("This value is not valid.")


def _field(location) -> str | None:
    """`gpus`, `items.0.name` or `limit`: the place in the body, the query or the path, without
    ninja's own parts (where the value came from, and the name of the operation's body argument)."""
    parts = [str(part) for part in location]
    if parts and parts[0] in {"body", "query", "path", "header", "cookie", "form"}:
        parts = parts[1:]
    if parts and parts[0] in {"payload", "data", "body"} and len(parts) > 1:
        parts = parts[1:]
    return ".".join(parts) or None


def validation_errors(errors: list[dict]) -> list[dict]:
    """One `{field, code, detail}` per error, `code` pydantic's stable type name."""
    return [
        {"field": _field(error.get("loc", ())), "code": error.get("type", "invalid"),
         "detail": _detail(error.get("type", ""), error.get("ctx") or {})}
        for error in errors
    ]
