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
from ninja import Field, Schema
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


class FieldError(Schema):
    field: str | None = Field(examples=["gpus"])
    code: str = Field(examples=["missing"])
    detail: str = Field(examples=["This field is required."])


class Problem(Schema):
    """Problem details (RFC 9457), the answer of every error: for the OpenAPI document
    (`response={200: ..., 404: Problem}`)."""

    type: str = Field(examples=["https://everxcloud.example/api/problems/not_found"])
    title: str = Field(examples=["Not found"])
    status: int = Field(examples=[404])
    code: str = Field(examples=["not_found"], description="Stable: programs may rely on it.")
    detail: str = Field(examples=["There is nothing at this address."],
                        description="In the language of Accept-Language (en, pt, fr).")
    errors: list[FieldError] | None = Field(None, description="On validation failures only.")


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
    response = JsonResponse(body, status=status, content_type=PROBLEM_TYPE,
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
    the sign-in rate limits count it."""
    try:
        return get_adapter(request).get_client_ip(request)
    except PermissionDenied:
        return "unknown"


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


def idempotency_key_of(request) -> str | None:
    """The request's `Idempotency-Key` header (already checked by the middleware), or None: a
    service that derives its own once-only token from it (bids) reads it here."""
    return request.headers.get("Idempotency-Key") or None


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
