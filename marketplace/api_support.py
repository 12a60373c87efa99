"""What every router of the API shares (docs/api.md): token authentication with scopes, problem
details, money and time fields, and cursor pagination. Entry-point wiring: no business rule here."""

import base64
import binascii
from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated, Generic, TypeVar

from django.db.models import QuerySet
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
        api_token = api_token_for_secret(secret=token)
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
        api_token_use_record(token=api_token, address=request.META.get("REMOTE_ADDR"))
        return api_token


ANY_TOKEN = TokenAuth()
READ = TokenAuth("read")
TRADE = TokenAuth("trade")
SELL = TokenAuth("sell")


def token_of(request) -> ApiToken:
    return request.auth
