"""What every router of the API shares (docs/api.md): token authentication with scopes, problem
details, money and time fields, and cursor pagination. Entry-point wiring: no business rule here."""

import base64
import binascii
import ipaddress
from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated, Generic, TypeVar

from allauth.account.adapter import get_adapter
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpResponse, JsonResponse
from django.utils.translation import gettext_lazy as _
from ninja import Field, P, Path, Query, Schema
from ninja.security import HttpBearer
from pydantic import ConfigDict, PlainSerializer

from accounts.models import ApiToken
from accounts.selectors import api_token_for_secret
from accounts.services import api_token_use_record
from sellers.selectors import seller_api_token_allowed

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100

# An amount sent to the API: a plain decimal string (no exponent, NaN or sign), validated again
# by the service that uses it.
DecimalText = Annotated[
    str,
    Field(pattern=r"^[0-9]{1,8}(\.[0-9]{1,8})?$", max_length=20, examples=["2.49"]),
]

# A share from 0 to 1 (a reliability) answers as a decimal string with its three places; null while
# there is none (a "new" server).
ShareText = Annotated[str | None, Field(examples=["0.995"])]


def share(value: Decimal | None) -> str | None:
    return None if value is None else format(Decimal(value).quantize(Decimal("0.001")), "f")


# An id in a path or a body: what PostgreSQL's bigint holds, so that a huge number answers 404 or
# 422, never an error of the database.
Id = Annotated[int, Field(ge=1, le=2**63 - 1, examples=[42])]

# Times answer in RFC 3339, UTC, with a Z.
UtcTime = Annotated[
    datetime,
    PlainSerializer(
        lambda moment: moment.astimezone(UTC).isoformat().replace("+00:00", "Z"), return_type=str
    ),
]


class ApiProblem(Exception):
    """Answer with problem details (RFC 9457): an HTTP status, a stable code and a translated detail."""

    def __init__(self, status: int, code: str, detail, *, errors: list[dict] | None = None, headers=None):
        super().__init__(str(detail))
        self.status, self.code, self.detail = status, code, detail
        self.errors = errors
        self.headers = headers or {}


PROBLEM_TYPE = "application/problem+json"

# The short title of a problem, per status (RFC 9457 `title`); `detail` says what went wrong.
PROBLEM_TITLES = {
    400: _("Invalid request"),
    401: _("Authentication required"),
    403: _("Not allowed"),
    404: _("Not found"),
    405: _("Method not allowed"),
    409: _("Conflict"),
    413: _("Request too large"),
    415: _("Unsupported media type"),
    422: _("Request not valid"),
    429: _("Too many requests"),
    500: _("Server error"),
    503: _("Service unavailable"),
}


def problem_title(status: int):
    if status in PROBLEM_TITLES:
        return PROBLEM_TITLES[status]
    return _("Server error") if status >= 500 else _("Request refused")


def problem_response(
    *, status: int, code: str, detail, errors: list[dict] | None = None, headers: dict | None = None,
) -> HttpResponse:
    """Problem details (RFC 9457) in the active language, `application/problem+json`. Also for
    the middleware, which answers before any router."""
    body = {
        "type": f"{settings.SITE_URL.rstrip('/')}/api/problems/{code}",
        "title": str(problem_title(status)),
        "status": status,
        "code": code,
        "detail": str(detail),
    }
    if errors:
        body["errors"] = errors
    response = JsonResponse(body, status=status, content_type=f"{PROBLEM_TYPE}; charset=utf-8",
                            json_dumps_params={"ensure_ascii": False})
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def public_read(response: HttpResponse, *, max_age: int = 5) -> None:
    """A public read operation (no token): any site may read it (CORS) and caches may keep it a
    few seconds. Authenticated operations never call this: they send no CORS header at all."""
    response["Access-Control-Allow-Origin"] = "*"
    response["Cache-Control"] = f"public, max-age={max_age}"


def client_address(request) -> str:
    """The client's address, through the proxies that settings trust (TRUSTED_PROXY_COUNT), as
    the sign-in rate limits count it; worked out once per request."""
    found = getattr(request, "_everx_client_address", None)
    if found is None:
        try:
            found = get_adapter(request).get_client_ip(request)
        except PermissionDenied:
            found = "unknown"
        request._everx_client_address = found
    return found


def _bearer_secret(request) -> str | None:
    """The token of `Authorization: Bearer <token>`, read as ninja's HttpBearer reads it."""
    parts = request.headers.get("Authorization", "").split(" ")
    if parts[0].lower() != "bearer":
        return None
    return " ".join(parts[1:]) or None


def request_token(request) -> ApiToken | None:
    """The usable token the request presents, or None; looked up once per request (the
    middleware's rate limits and idempotency keys and the operation's authentication share it)."""
    secret = _bearer_secret(request)
    cached = getattr(request, "_everx_api_token", None)
    if cached is None or cached[0] != secret:
        cached = (secret, api_token_for_secret(secret=secret) if secret else None)
        request._everx_api_token = cached
    return cached[1]


AGENT_TOKEN_START = "evxa_"  # noqa: S105 - the visible start of every agent token, not a secret


def request_agent_secret(request) -> str | None:
    """The host-agent token the request presents (`Bearer evxa_...`), live or not, or None. No
    query: the rate limit counts agents by their secret's hash, and only the heartbeat's own
    read (exchange.selectors.heartbeat_caller) says whether the token is live."""
    secret = _bearer_secret(request)
    return secret if secret and secret.startswith(AGENT_TOKEN_START) else None


def client_ip_address(request) -> str | None:
    """The client's IP address (`client_address`), or None when it is not one."""
    return _address_or_none(client_address(request))


def idempotency_key_of(request) -> str | None:
    """The request's `Idempotency-Key` header (already checked by the middleware), or None: a
    service that derives its own once-only token from it (bids) reads it here."""
    return request.headers.get("Idempotency-Key") or None


class ProblemField(Schema):
    field: str | None = Field(None, examples=["gpus"])
    code: str = Field(examples=["gpus_not_allowed"])
    detail: str = Field(examples=["A bid asks for 1, 2, 4 or 8 GPUs on one server."])


class Problem(Schema):
    """An error as RFC 9457 problem details (`application/problem+json`)."""

    type: str = Field(examples=["https://everxcloud.example/api/problems/bid_not_found"])
    title: str = Field(examples=["We could not find this order."])
    status: int = Field(examples=[404])
    code: str = Field(examples=["bid_not_found"], description="Stable: programs may rely on it.")
    detail: str = Field(examples=["We could not find this order."], description="In the request's language.")
    errors: list[ProblemField] | None = Field(None, description="On validation failures only.")


def problems(*statuses: int) -> dict[int, type[Problem]]:
    """The error answers an operation can give, for its `response=`: each as problem details."""
    return dict.fromkeys(statuses, Problem)


# What every operation with a token may answer besides its own errors: no usable token (401), a
# missing scope or a `sell` token whose user lost its seller or two-factor authentication (403).
TOKEN_ERRORS = {401: Problem, 403: Problem}

# An id in a path: a positive number a database id can be, else 422 before any query.
ObjectId = Path[int, P(ge=1, le=2**63 - 1)]


def whole_number(*, low: int, high: int, example: int):
    """A whole number from `low` to `high`: JSON true, 2.0 or "2" are refused, not converted."""
    return Annotated[int, Field(strict=True, ge=low, le=high, examples=[example])]


# The query parameters of a list (`page_of` checks them).
PageLimit = Query[int | None, P(description="Items per page: 1 to 100, 50 by default.")]
PageCursor = Query[str | None, P(description="The `next_cursor` of the previous page.")]


class InputSchema(Schema):
    """Request bodies refuse fields they do not know."""

    model_config = ConfigDict(extra="forbid")


class Money(Schema):
    amount: str = Field(examples=["2.49"], description="A decimal string, never a float.")
    currency: str = Field(examples=["USD"], description="ISO 4217 code: USD, EUR or GBP.")


def money(amount: Decimal | None, currency: str) -> Money | None:
    if amount is None:
        return None
    return Money(amount=format(Decimal(amount), "f"), currency=currency)


def usd(amount: Decimal | None) -> Money | None:
    return money(amount, "USD")


ItemT = TypeVar("ItemT")


class Page(Schema, Generic[ItemT]):
    items: list[ItemT]
    next_cursor: str | None = Field(
        None, description="Pass as `cursor` for the next page; null on the last page."
    )


def _cursor_decode(cursor: str) -> int:
    try:
        text = base64.urlsafe_b64decode(cursor.encode("ascii") + b"==").decode("ascii")
        value = int(text)
    except (ValueError, UnicodeError, binascii.Error):
        value = 0
    if value <= 0 or value > 2**62:
        raise ApiProblem(400, "cursor_invalid", _("This cursor does not come from a previous page."))
    return value


def _cursor_encode(pk: int) -> str:
    return base64.urlsafe_b64encode(str(pk).encode("ascii")).decode("ascii").rstrip("=")


def page_of(queryset: QuerySet, *, cursor: str | None, limit: int | None) -> tuple[list, str | None]:
    """One page of a selector's queryset, newest (highest id) first, and the cursor of the next."""
    limit = DEFAULT_PAGE_SIZE if limit is None else limit
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise ApiProblem(
            422, "limit_invalid", _("The limit is a whole number from 1 to %(max)d.") % {"max": MAX_PAGE_SIZE}
        )
    queryset = queryset.order_by("-pk")
    if cursor:
        queryset = queryset.filter(pk__lt=_cursor_decode(cursor))
    rows = list(queryset[: limit + 1])
    if len(rows) > limit:
        return rows[:limit], _cursor_encode(rows[limit - 1].pk)
    return rows, None


class TokenAuth(HttpBearer):
    """`Authorization: Bearer <token>` with one scope. No usable token: 401; a token without the
    scope: 403; a `sell` token whose user left its seller or lost two-factor authentication: 403."""

    def __init__(self, scope: str | None = None):
        super().__init__()
        self.scope = scope

    def authenticate(self, request, token: str) -> ApiToken | None:
        api_token = request_token(request)  # the secret ninja passes is the header's
        if api_token is None:
            return None
        if self.scope is not None and self.scope not in api_token.scopes:
            raise ApiProblem(
                403, "scope_missing",
                _("This token does not have the “%(scope)s” scope.") % {"scope": self.scope},
            )
        if self.scope == "sell" and not seller_api_token_allowed(token=api_token):
            raise ApiProblem(
                403, "seller_access_lost",
                _("This token acts for a seller whose member you no longer are, or your account lost "
                  "two-factor authentication."),
            )
        api_token_use_record(token=api_token, address=_address_or_none(client_address(request)))
        return api_token


def _address_or_none(address: str) -> str | None:
    # The token's last address is an IP address column: anything else (a forwarded header's
    # garbage, "unknown") is no address.
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return None


ANY_TOKEN = TokenAuth()
READ = TokenAuth("read")
TRADE = TokenAuth("trade")
SELL = TokenAuth("sell")


def token_of(request) -> ApiToken:
    return request.auth


# --- the OpenAPI document: problem responses, the token scheme, examples -------------------------

PROBLEM_MEDIA_TYPE = PROBLEM_TYPE
JSON_MEDIA_TYPE = "application/json"
TOKEN_SCHEME = "token"  # noqa: S105 - the name of a security scheme, not a secret
AGENT_TOKEN_SCHEME = "agent_token"  # noqa: S105 - the same
# ninja names a scheme after its class: the document's names.
SCHEME_NAMES = {"TokenAuth": TOKEN_SCHEME, "AgentTokenAuth": AGENT_TOKEN_SCHEME}
EXAMPLE_SITE = "https://everxcloud.example"
EXAMPLE_TIME = "2026-12-01T21:00:00Z"

# The common error answers: (description, code, detail) of the example.
PROBLEMS = {
    400: ("The request cannot be read: a body that is not UTF-8 JSON, or a cursor from elsewhere.",
          "body_not_json", "The body is not valid JSON."),
    401: ("No token, or an unknown, revoked or expired one.",
          "token_invalid", "Send a valid API token: Authorization: Bearer <token>."),
    403: ("The token lacks the operation's scope (or a sell token lost its seller access).",
          "scope_missing", "This token does not have the “trade” scope."),
    404: ("Nothing at this address, or it belongs to someone else.",
          "not_found", "There is nothing at this address."),
    413: ("The body is larger than 64 KiB.", "body_too_large", "The body of the request is too large."),
    422: ("A field is missing or not valid.", "validation_failed", "Some fields are missing or not valid."),
    429: ("Too many requests: wait the seconds of Retry-After.",
          "rate_limited", "Too many requests: try again in a few seconds."),
}
PROBLEM_HEADERS = {
    401: {"WWW-Authenticate": {"description": "Always `Bearer`.", "schema": {"type": "string"}}},
    429: {"Retry-After": {"description": "Seconds to wait.", "schema": {"type": "integer"}}},
}


def _problem_example(status: int, code: str, detail: str) -> dict:
    example = {"type": f"{EXAMPLE_SITE}/api/problems/{code}", "title": detail, "status": status,
               "code": code, "detail": detail}
    if status == 422:
        example["errors"] = [{"field": "gpus", "code": "missing", "detail": "Field required"}]
    return example


def _statuses_for(operation: dict, method: str, scope: str | None) -> set[int]:
    """The error answers an operation can give, from what it takes and who may call it."""
    places = {parameter.get("in") for parameter in operation.get("parameters", [])}
    has_body = "requestBody" in operation or method in {"post", "put", "patch"}
    statuses = {429}
    if places or has_body:
        statuses |= {400, 422}
    if "path" in places:
        statuses.add(404)
    if has_body:
        statuses.add(413)
    if operation.get("security"):
        statuses.add(401)
        if scope:
            statuses.add(403)
    return statuses


def _schemas_add(components: dict, model) -> None:
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, definition in schema.pop("$defs", {}).items():
        components.setdefault(name, definition)
    components.setdefault(model.__name__, schema)


# Examples by field name, for fields whose router gave none: what the values look like.
NAMED_EXAMPLES = {
    "price": "2.49", "amount": "2.49", "best_bid": "2.41", "best_ask": "2.49", "spread": "0.08",
    "max_price": "2.90", "currency": "USD", "unit": "GPU-hour", "gpu_model": "h100-sxm", "slug": "h100-sxm",
    "time": EXAMPLE_TIME, "email": "ada@example.com", "language": "en", "region": "europe",
    "name": "laptop", "fingerprint": "SHA256:Jm2bWcS3Y3pLx0m5Zb8QmJ5a6m1v0bE3pDq0t4lYk9s",
    "ssh_public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI... ada@laptop",
    "public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI... ada@laptop",
    "host": "gpu-7.lisbon.example", "username": "evx1042",
    "ssh_command": "ssh -p 22 evx1042@gpu-7.lisbon.example",
    "state": "running", "next_cursor": None,
}


class _NoExample(Exception):
    """A value that only the router could give (a pattern, a format): no made-up example."""


def _example_of(schema: dict, components: dict, *, depth: int = 0, strict: bool = False):
    """An example value for a JSON schema, from the `examples` of its fields where they have
    some. `strict`: refuse to make up a string a pattern or a format constrains."""
    if depth > 16:
        raise _NoExample
    if "$ref" in schema:
        return _example_of(components[schema["$ref"].rsplit("/", 1)[-1]], components,
                           depth=depth + 1, strict=strict)
    for key in ("examples", "default", "const", "enum"):
        if schema.get(key) not in (None, []):
            value = schema[key]
            return value[0] if key in {"examples", "enum"} else value
    if "example" in schema:
        return schema["example"]
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            options = [option for option in schema[key] if option.get("type") != "null"] or schema[key]
            return _example_of(options[0], components, depth=depth + 1, strict=strict)
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        return {name: _property_example(name, value, components, depth=depth + 1, strict=strict)
                for name, value in schema.get("properties", {}).items()}
    if kind == "array":
        return [_example_of(schema.get("items", {}), components, depth=depth + 1, strict=strict)]
    if kind == "integer":
        return max(1, schema.get("minimum", 1))
    if kind == "number":
        return schema.get("minimum", 1)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    if schema.get("format") == "date-time":
        return EXAMPLE_TIME
    if strict and (schema.get("pattern") or schema.get("format")):
        raise _NoExample
    return "string"


def _property_example(name: str, schema: dict, components: dict, *, depth: int, strict: bool):
    keys = ("examples", "example", "default", "const", "enum", "$ref")
    own = {key for key in keys if schema.get(key) is not None}
    if not own and (name in NAMED_EXAMPLES or name.endswith("_at")):
        return NAMED_EXAMPLES.get(name, EXAMPLE_TIME)
    return _example_of(schema, components, depth=depth, strict=strict)


def _media_examples_add(content: dict, components: dict, *, strict: bool) -> None:
    for media in content.values():
        if "example" in media or "examples" in media or "schema" not in media:
            continue
        try:
            media["example"] = _example_of(media["schema"], components, strict=strict)
        except _NoExample:
            continue


def _operation_complete(operation: dict, *, method: str, scope: str | None, components: dict) -> None:
    # ninja keys responses by int; JSON has string keys (and sorting mixed keys fails).
    responses = {str(key): value for key, value in operation.get("responses", {}).items()}
    operation["responses"] = responses
    for status, response in list(responses.items()):
        content = response.get("content")
        if content and int(status) >= 400:
            # ninja names the renderer's type; an error answer is problem details.
            response["content"] = {PROBLEM_MEDIA_TYPE: next(iter(content.values()))}
        elif content and JSON_MEDIA_TYPE not in content and len(content) == 1 \
                and next(iter(content)).endswith("json"):
            response["content"] = {JSON_MEDIA_TYPE: next(iter(content.values()))}
    for status in sorted(_statuses_for(operation, method, scope)):
        if str(status) in responses:
            continue
        description, code, detail = PROBLEMS[status]
        responses[str(status)] = {
            "description": description,
            "content": {PROBLEM_MEDIA_TYPE: {
                "schema": {"$ref": "#/components/schemas/Problem"},
                "example": _problem_example(status, code, detail),
            }},
            **({"headers": PROBLEM_HEADERS[status]} if status in PROBLEM_HEADERS else {}),
        }
    for response in responses.values():
        _media_examples_add(response.get("content", {}), components, strict=False)
    if "requestBody" in operation:
        _media_examples_add(operation["requestBody"].get("content", {}), components, strict=True)
    if operation.get("security"):
        operation["security"] = [
            {SCHEME_NAMES.get(name, name): [scope] if scope else []}
            for requirement in operation["security"] for name in requirement
        ]


def openapi_document_complete(schema: dict, *, scopes: dict[str, str | None]) -> dict:
    """Complete ninja's document for the routers of every app alike: each operation gets the
    error answers it can give (problem details, with examples), the scope its token needs, and
    examples of its bodies. `scopes`: operationId -> the scope of its token (None: any token or
    none). The routers' own declarations win."""
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    _schemas_add(schemas, Problem)
    security = components.setdefault("securitySchemes", {})
    if security.pop("TokenAuth", None) is not None or scopes:
        security[TOKEN_SCHEME] = {
            "type": "http", "scheme": "bearer", "bearerFormat": "evx_ followed by 40 characters",
            "description": "An API token of the tokens page. Its scopes (read, trade, sell) are "
                           "listed on each operation's security requirement.",
        }
    if security.pop("AgentTokenAuth", None) is not None:
        security[AGENT_TOKEN_SCHEME] = {
            "type": "http", "scheme": "bearer", "bearerFormat": "evxa_ followed by 40 characters",
            "description": "A server's host-agent token (seller portal, one per server): the heartbeat only.",
        }
    for item in schema.get("paths", {}).values():
        for method, operation in item.items():
            if isinstance(operation, dict) and "responses" in operation:
                _operation_complete(operation, method=method, scope=scopes.get(operation.get("operationId")),
                                    components=schemas)
    return schema
