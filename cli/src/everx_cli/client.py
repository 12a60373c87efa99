"""A small typed client of the EverXCloud API (/api/v1/), usable as an SDK:

    from everx_cli.client import EverxClient

    with EverxClient("https://exchange.example", token="evx_...", language="fr") as everx:
        quote = everx.quote(gpu_model="h100-sxm", gpus=1, hours=3)

Answers are the API's JSON as dicts and lists, with every money object turned into `Money`
(a `Decimal` amount and its currency) and the market's decimal strings into `Decimal`. A refusal
raises `ApiError` (the problem details: status, code, translated detail); no answer at all raises
`NetworkError`. Every write carries an `Idempotency-Key`, so the one retry after a lost connection
can never do the thing twice. Standard library, httpx and nothing else: no Django here.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import httpx

from . import __version__

API_PATH = "/api/v1"
DEFAULT_TIMEOUT = 30.0
WRITE_METHODS = frozenset({"POST", "PATCH", "DELETE"})
# The plain decimal strings the API writes (never an exponent, NaN or a sign).
DECIMAL_TEXT = re.compile(r"^[0-9]+(\.[0-9]+)?$")
# Outside money objects, the market data writes prices as bare decimal strings under these keys.
DECIMAL_KEYS = frozenset({
    "price", "best_bid", "best_ask", "spread", "max_price", "open", "high", "low", "close",
})


@dataclass(frozen=True)
class Money:
    """An amount of money as the API writes it: `{"amount": "2.49", "currency": "USD"}`."""

    amount: Decimal
    currency: str

    def __str__(self) -> str:
        return f"{format(self.amount, 'f')} {self.currency}"

    def to_json(self) -> dict[str, str]:
        return {"amount": format(self.amount, "f"), "currency": self.currency}


class EverxError(Exception):
    """The base of the client's errors."""


class ApiError(EverxError):
    """The exchange answered with an error (RFC 9457 problem details). `detail` is in the
    language the client asked for; `code` is stable, for programs."""

    def __init__(self, *, status: int, code: str, detail: str, title: str = "",
                 errors: list[dict[str, Any]] | None = None, body: dict[str, Any] | None = None):
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.title = title or detail
        self.errors = errors or []
        self.body = body if body is not None else self.to_json()

    def to_json(self) -> dict[str, Any]:
        problem: dict[str, Any] = {"status": self.status, "code": self.code, "title": self.title,
                                   "detail": self.detail}
        if self.errors:
            problem["errors"] = self.errors
        return problem


class NetworkError(EverxError):
    """The exchange could not be reached, or its answer was lost on the way."""

    def __init__(self, url: str, reason: str):
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason


def api_base(url: str) -> str:
    """The site's address, whether or not it was given with the API's path."""
    url = url.strip().rstrip("/")
    if url.endswith(API_PATH):
        url = url[: -len(API_PATH)]
    return url


def parse_answer(value: Any, key: str | None = None) -> Any:
    """The API's JSON with money objects as `Money` and the market's decimal strings as `Decimal`."""
    if isinstance(value, dict):
        if set(value) == {"amount", "currency"} and isinstance(value["amount"], str):
            return Money(amount=Decimal(value["amount"]), currency=value["currency"])
        return {name: parse_answer(item, name) for name, item in value.items()}
    if isinstance(value, list):
        return [parse_answer(item, key) for item in value]
    if key in DECIMAL_KEYS and isinstance(value, str) and DECIMAL_TEXT.match(value):
        return Decimal(value)
    return value


def to_json(value: Any) -> Any:
    """The other way round: what `parse_answer` made, as JSON again (exact decimal strings)."""
    if isinstance(value, Money):
        return value.to_json()
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dict):
        return {name: to_json(item) for name, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    return value


def _problem(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        # Not the exchange's problem details (a proxy's page, a wrong address): the status says it.
        detail = f"HTTP {response.status_code} {response.reason_phrase}".strip()
        return ApiError(status=response.status_code, code=f"http_{response.status_code}", detail=detail)
    detail = str(body.get("detail") or body.get("title") or response.reason_phrase)
    return ApiError(
        status=response.status_code, code=str(body.get("code") or f"http_{response.status_code}"),
        detail=detail, title=str(body.get("title") or detail), errors=body.get("errors") or [], body=body,
    )


def _without_none(values: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}


class EverxClient:
    """One connection to the exchange, for one token and one language."""

    def __init__(self, url: str, token: str | None = None, language: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT, *, transport: httpx.BaseTransport | None = None):
        headers = {"Accept": "application/json", "User-Agent": f"everx-cli/{__version__}"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if language:
            headers["Accept-Language"] = language
        self.url = api_base(url)
        self._http = httpx.Client(base_url=self.url + API_PATH, headers=headers, timeout=timeout,
                                  transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> EverxClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # --- the HTTP part --------------------------------------------------------------------------

    def request(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                body: dict[str, Any] | None = None, idempotency_key: str | None = None) -> Any:
        """One operation. Writes carry an idempotency key (a new one unless given), and every
        request is tried a second time after a lost connection: with the same key the exchange
        answers a repeated write with the first answer instead of doing it again."""
        headers = {}
        if method in WRITE_METHODS:
            headers["Idempotency-Key"] = idempotency_key or str(uuid.uuid4())
        params = _without_none(params or {})
        response = None
        for attempt in (1, 2):
            try:
                response = self._http.request(method, path, params=params, json=body, headers=headers)
                break
            except httpx.TransportError as lost:
                if attempt == 2:
                    raise NetworkError(self.url, str(lost) or lost.__class__.__name__) from lost
        assert response is not None
        if response.status_code >= 400:
            raise _problem(response)
        if response.status_code == 204 or not response.content:
            return None
        try:
            return parse_answer(response.json())
        except ValueError as garbled:
            raise NetworkError(self.url, "the answer is not JSON") from garbled

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: dict[str, Any] | None = None, *,
             idempotency_key: str | None = None) -> Any:
        return self.request("POST", path, body=body, idempotency_key=idempotency_key)

    def pages(self, path: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Every item of a paginated list, following `next_cursor` to the last page."""
        cursor = params.pop("cursor", None)
        while True:
            page = self.get(path, cursor=cursor, **params)
            yield from page["items"]
            cursor = page.get("next_cursor")
            if not cursor:
                return

    @staticmethod
    def _page(limit: int | None, cursor: str | None) -> dict[str, Any]:
        return {"limit": limit, "cursor": cursor}

    # --- public market data ---------------------------------------------------------------------

    def listing(self, path: str, **params: Any) -> list[dict[str, Any]]:
        """A whole list, whether the API answers it at once or page by page."""
        answer = self.get(path, **params)
        if not isinstance(answer, dict) or "items" not in answer:
            return answer
        items = list(answer["items"])
        if answer.get("next_cursor"):
            items += self.pages(path, cursor=answer["next_cursor"], **params)
        return items

    def gpus(self) -> list[dict[str, Any]]:
        return self.listing("/gpus")

    def gpu(self, slug: str) -> dict[str, Any]:
        return self.get(f"/gpus/{slug}")

    def markets(self) -> list[dict[str, Any]]:
        return self.listing("/markets")

    def market(self, slug: str) -> dict[str, Any]:
        return self.get(f"/markets/{slug}")

    def book(self, slug: str, *, depth: int | None = None, min_reliability: str | None = None,
             isolation: list[str] | None = None) -> dict[str, Any]:
        """The price levels of both sides; each ask level lists its offers with their servers'
        reliability. With `min_reliability` ("0.95"), only asks of servers at least that reliable;
        with `isolation` (["container", "whole"]), only asks of servers sold at those levels."""
        return self.get(f"/markets/{slug}/book", depth=depth, min_reliability=min_reliability,
                        isolation=",".join(isolation) if isolation is not None else None)

    def trades(self, slug: str, *, limit: int | None = None, cursor: str | None = None) -> dict[str, Any]:
        return self.get(f"/markets/{slug}/trades", **self._page(limit, cursor))

    def candles(self, slug: str, *, interval: str = "hour", limit: int | None = None) -> Any:
        return self.get(f"/markets/{slug}/candles", interval=interval, limit=limit)

    # --- the buyer ------------------------------------------------------------------------------

    def me(self) -> dict[str, Any]:
        return self.get("/me")

    def wallet(self) -> dict[str, Any]:
        return self.get("/wallet")

    def wallet_history(self, *, limit: int | None = None, cursor: str | None = None) -> dict[str, Any]:
        return self.get("/wallet/history", **self._page(limit, cursor))

    def invoices(self, *, limit: int | None = None, cursor: str | None = None) -> dict[str, Any]:
        return self.get("/invoices", **self._page(limit, cursor))

    def invoice(self, number: str) -> dict[str, Any]:
        return self.get(f"/invoices/{number}")

    def ssh_keys(self) -> Any:
        return self.get("/ssh-keys")

    def ssh_key_add(self, *, name: str, public_key: str) -> dict[str, Any]:
        return self.post("/ssh-keys", {"name": name, "public_key": public_key})

    def ssh_key_delete(self, key_id: int) -> None:
        self.request("DELETE", f"/ssh-keys/{key_id}")

    def quote(self, *, gpu_model: str, gpus: int, hours: int | None = None,
              region: str | None = None, min_reliability: str | None = None,
              template: str | None = None, isolation: list[str] | None = None) -> dict[str, Any]:
        """The best price per GPU-hour (among servers at least `min_reliability` reliable, when
        given) and what the order would cost; `ApiError` with the code `no_offer` (404) when
        nothing is on offer."""
        return self.post("/quote", _without_none({
            "gpu_model": gpu_model, "gpus": gpus, "hours": hours, "region": region,
            "min_reliability": min_reliability, "template": template, "isolation": isolation,
        }))

    def bid_place(self, *, gpu_model: str, gpus: int, max_price: Decimal | str, time_in_force: str,
                  hours: int | None = None, region: str | None = None, expires_at: str | None = None,
                  ssh_public_key: str | None = None, ssh_key_id: int | None = None,
                  idempotency_key: str | None = None, min_reliability: str | None = None,
                  template: str | None = None, isolation: list[str] | None = None) -> dict[str, Any]:
        """Place an order: `time_in_force` "buy_now" (fill at the best offer or cancel) or "bid"
        (rest in the book), on servers at least `min_reliability` reliable when given ("0.95").
        Answers `{"bid": ..., "rental": ... or None}`."""
        body = _without_none({
            "gpu_model": gpu_model, "gpus": gpus, "max_price": _decimal_text(max_price), "hours": hours,
            "region": region, "min_reliability": min_reliability, "time_in_force": time_in_force,
            "expires_at": expires_at, "ssh_public_key": ssh_public_key, "ssh_key_id": ssh_key_id,
            "template": template, "isolation": isolation,
        })
        return self.post("/bids", body, idempotency_key=idempotency_key)

    def templates(self) -> list[dict[str, Any]]:
        """The published container templates (`template` of an order names one by its slug)."""
        return self.get("/templates")

    def buy(self, **order: Any) -> dict[str, Any]:
        return self.bid_place(time_in_force="buy_now", **order)

    def bid(self, **order: Any) -> dict[str, Any]:
        return self.bid_place(time_in_force="bid", **order)

    def bids(self, *, state: str | None = None, limit: int | None = None,
             cursor: str | None = None) -> dict[str, Any]:
        return self.get("/bids", state=state, **self._page(limit, cursor))

    def bid_get(self, bid_id: int) -> dict[str, Any]:
        return self.get(f"/bids/{bid_id}")

    def bid_cancel(self, bid_id: int) -> dict[str, Any]:
        return self.post(f"/bids/{bid_id}/cancel")

    def rentals(self, *, state: str | None = None, limit: int | None = None,
                cursor: str | None = None) -> dict[str, Any]:
        return self.get("/rentals", state=state, **self._page(limit, cursor))

    def rental(self, rental_id: int) -> dict[str, Any]:
        return self.get(f"/rentals/{rental_id}")

    def rental_stop(self, rental_id: int) -> dict[str, Any]:
        return self.post(f"/rentals/{rental_id}/stop")

    def rental_service_token(self, rental_id: int) -> dict[str, Any]:
        return self.post(f"/rentals/{rental_id}/service-token")

    # --- the seller (a `sell` token) --------------------------------------------------------------

    def seller(self) -> dict[str, Any]:
        return self.get("/seller")

    def servers(self, *, limit: int | None = None, cursor: str | None = None) -> dict[str, Any]:
        return self.get("/seller/servers", **self._page(limit, cursor))

    def server(self, server_id: int) -> dict[str, Any]:
        return self.get(f"/seller/servers/{server_id}")

    def offers(self, *, limit: int | None = None, cursor: str | None = None) -> dict[str, Any]:
        return self.get("/seller/offers", **self._page(limit, cursor))

    def offer(self, offer_id: int) -> dict[str, Any]:
        return self.get(f"/seller/offers/{offer_id}")

    def offer_post(self, *, server_id: int, gpus: int, price: Decimal | str) -> dict[str, Any]:
        body = {"server_id": server_id, "gpus": gpus, "price": _decimal_text(price)}
        return self.post("/seller/offers", body)

    def offer_update(self, offer_id: int, *, gpus: int | None = None,
                     price: Decimal | str | None = None) -> dict[str, Any]:
        body = _without_none({"gpus": gpus, "price": None if price is None else _decimal_text(price)})
        return self.request("PATCH", f"/seller/offers/{offer_id}", body=body)

    def offer_withdraw(self, offer_id: int) -> dict[str, Any]:
        return self.post(f"/seller/offers/{offer_id}/withdraw")

    def seller_rentals(self, *, limit: int | None = None, cursor: str | None = None) -> dict[str, Any]:
        return self.get("/seller/rentals", **self._page(limit, cursor))

    def earnings(self) -> dict[str, Any]:
        return self.get("/seller/earnings")

    def payouts(self, *, limit: int | None = None, cursor: str | None = None) -> dict[str, Any]:
        return self.get("/seller/payouts", **self._page(limit, cursor))


def _decimal_text(value: Decimal | str) -> str:
    """A price as the API takes it: a plain decimal string."""
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)
