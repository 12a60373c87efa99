"""The exchange's operations of the API: public market data (docs/api.md). Entry points only."""

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Literal

from django.core.exceptions import ObjectDoesNotExist
from django.http import HttpResponse
from django.utils.translation import gettext_lazy as _
from ninja import Field, Query, Router, Schema, Status
from pydantic import StrictInt

from billing.selectors import order_cost_preview, rental_costs
from billing.services import order_place
from catalog.selectors import gpu_model_get, gpu_models_all
from marketplace.api_support import (
    READ,
    TRADE,
    ApiProblem,
    DecimalText,
    InputSchema,
    Money,
    Page,
    UtcTime,
    money,
    page_of,
    problems,
    token_of,
    usd,
)
from sellers.models import Region

from . import selectors
from .models import RentalState
from .services import bid_cancel, bid_terms_check, order_terms_check, rental_stop
from .ssh_keys import ssh_connect_command

router = Router(tags=["market"])


def _decimal_text(value) -> str | None:
    return None if value is None else f"{value:.2f}"


def _public(response: HttpResponse) -> None:
    """Public market data: any site may read it, caches may keep it a few seconds."""
    response["Access-Control-Allow-Origin"] = "*"
    response["Cache-Control"] = "public, max-age=5"


def _gpu_or_404(slug: str):
    gpu = gpu_model_get(slug=slug)
    if gpu is None:
        raise ApiProblem(404, "gpu_model_not_found", _("We do not list this GPU."))
    return gpu


class LevelOut(Schema):
    price: str
    gpus: int


class TradeOut(Schema):
    time: UtcTime
    price: str
    gpus: int


class MarketDataOut(Schema):
    gpu_model: str
    currency: str
    unit: str
    market_open: bool
    best_bid: str | None
    best_ask: str | None
    spread: str | None
    asks: list[LevelOut]
    bids: list[LevelOut]
    last_trades: list[TradeOut]


@router.get(
    "/markets/{slug}", response={200: MarketDataOut, **problems(404, 429)}, auth=None,
    operation_id="market_get",
    summary="One GPU model's market: best prices, the book's top levels and the last trades",
)
def market_get(request, slug: str, response: HttpResponse):
    gpu = _gpu_or_404(slug)
    book = selectors.order_book(gpu_model_id=gpu.pk)
    trades = selectors.trades_recent(gpu_model_id=gpu.pk, limit=20)
    _public(response)
    return {
        "gpu_model": gpu.slug, "currency": "USD", "unit": "GPU-hour",
        "market_open": selectors.market_is_open(),
        "best_bid": _decimal_text(book.best_bid), "best_ask": _decimal_text(book.best_ask),
        "spread": _decimal_text(book.spread),
        "asks": [{"price": _decimal_text(level.price), "gpus": level.gpus} for level in book.asks],
        "bids": [{"price": _decimal_text(level.price), "gpus": level.gpus} for level in book.bids],
        "last_trades": [{"time": trade.time, "price": _decimal_text(trade.price), "gpus": trade.gpus}
                        for trade in trades],
    }


# --- every market, the book, trades and candles (public) -----------------------------------------


class LastTradeOut(Schema):
    price: Money
    gpus: int = Field(examples=[2])
    time: UtcTime


class MarketOut(Schema):
    gpu_model: str = Field(examples=["h100-sxm"])
    market_open: bool
    best_bid: Money | None = Field(description="The highest open bid per GPU-hour, null without one.")
    best_ask: Money | None = Field(
        description="The lowest offer with free GPUs per GPU-hour, null without one."
    )
    last_trade: LastTradeOut | None
    gpus_on_offer: int = Field(examples=[12], description="GPUs of this model that offers can sell now.")


@router.get(
    "/markets", response={200: Page[MarketOut], **problems(400, 422, 429)},
    auth=None, operation_id="markets_list",
    summary="Every GPU model's market: best bid, best ask, last trade and GPUs on offer",
)
def markets_list(request, response: HttpResponse, cursor: str | None = None, limit: int | None = None):
    gpus, next_cursor = page_of(gpu_models_all(), cursor=cursor, limit=limit)
    summaries = selectors.markets_summary()
    is_open = selectors.market_is_open()
    _public(response)
    items = []
    for gpu in gpus:
        summary = summaries.get(gpu.pk)
        last = summary.last_trade if summary else None
        items.append({
            "gpu_model": gpu.slug, "market_open": is_open,
            "best_bid": usd(summary.best_bid) if summary else None,
            "best_ask": usd(summary.best_ask) if summary else None,
            "last_trade": {"price": usd(last.price), "gpus": last.gpus, "time": last.time} if last else None,
            "gpus_on_offer": summary.gpus_on_offer if summary else 0,
        })
    return {"items": items, "next_cursor": next_cursor}


class BookLevelOut(Schema):
    price: Money
    gpus: int = Field(examples=[8])


class BookOut(Schema):
    gpu_model: str = Field(examples=["h100-sxm"])
    asks: list[BookLevelOut] = Field(
        description="Cheapest first: the GPUs offers can sell now at each price."
    )
    bids: list[BookLevelOut] = Field(description="Highest first: the GPUs open bids want at each price.")


@router.get(
    "/markets/{slug}/book", response={200: BookOut, **problems(404, 422, 429)},
    auth=None, operation_id="market_book",
    summary="The order book of one GPU model: price levels of asks and bids with their GPUs",
)
def market_book(request, slug: str, response: HttpResponse, depth: Annotated[int, Query(ge=1, le=50)] = 10):
    gpu = _gpu_or_404(slug)
    book = selectors.order_book(gpu_model_id=gpu.pk, levels=depth)
    _public(response)
    return {
        "gpu_model": gpu.slug,
        "asks": [{"price": usd(level.price), "gpus": level.gpus} for level in book.asks],
        "bids": [{"price": usd(level.price), "gpus": level.gpus} for level in book.bids],
    }


class MarketTradeOut(Schema):
    time: UtcTime
    price: Money
    gpus: int = Field(examples=[1])


@router.get(
    "/markets/{slug}/trades", response={200: Page[MarketTradeOut], **problems(400, 404, 422, 429)}, auth=None,
    operation_id="market_trades", summary="The trades of one GPU model, newest first",
)
def market_trades(
    request, slug: str, response: HttpResponse, cursor: str | None = None, limit: int | None = None
):
    gpu = _gpu_or_404(slug)
    trades, next_cursor = page_of(selectors.trades_of_market(gpu_model_id=gpu.pk), cursor=cursor, limit=limit)
    _public(response)
    return {
        "items": [
            {"time": trade.started_at, "price": usd(trade.price_usd), "gpus": trade.gpus} for trade in trades
        ],
        "next_cursor": next_cursor,
    }


class CandleOut(Schema):
    start: UtcTime = Field(description="The first instant of the hour or day (UTC).")
    open: Money
    high: Money
    low: Money
    close: Money
    volume: int = Field(examples=[6], description="GPUs traded: the sum of the trades' GPUs.")
    trades: int = Field(examples=[3])


class CandlesOut(Schema):
    gpu_model: str = Field(examples=["h100-sxm"])
    interval: str = Field(examples=["hour"])
    candles: list[CandleOut] = Field(description="Oldest first; intervals without a trade are left out.")


@router.get(
    "/markets/{slug}/candles", response={200: CandlesOut, **problems(404, 422, 429)}, auth=None,
    operation_id="market_candles",
    summary="Price candles of one GPU model per hour or per day (UTC): open, high, low, close, volume",
)
def market_candles(
    request, slug: str, response: HttpResponse,
    interval: Literal["hour", "day"] = "hour", limit: Annotated[int, Query(ge=1, le=500)] = 48,
):
    gpu = _gpu_or_404(slug)
    candles = selectors.price_candles(gpu_model_id=gpu.pk, interval=interval, limit=limit)
    _public(response)
    return {
        "gpu_model": gpu.slug, "interval": interval,
        "candles": [
            {"start": candle.start, "open": usd(candle.open), "high": usd(candle.high),
             "low": usd(candle.low), "close": usd(candle.close), "volume": candle.volume,
             "trades": candle.trades}
            for candle in candles
        ],
    }


# --- the buyer's quotes, bids and rentals (a token) ----------------------------------------------

# Idempotency keys name bids through this namespace: the same token and key give the same form token.
IDEMPOTENT_BIDS = uuid.UUID("6f1f3a52-8d0e-4b59-9a57-2f0c7f1e4b11")
GpuCount = Annotated[StrictInt, Field(examples=[1], description="GPUs on one server: 1, 2, 4 or 8.")]
Hours = Annotated[
    StrictInt | None, Field(None, examples=[24], description="Whole hours; null to run until stopped.")
]
RegionText = Annotated[
    str, Field("", max_length=20, examples=["europe"], description="Empty for any region.")
]


def _gpu_for_order(slug: str):
    gpu = gpu_model_get(slug=slug)
    if gpu is None:
        raise ApiProblem(422, "gpu_model_unknown", _("We do not list this GPU."))
    return gpu


def _no_offer(*, gpus: int, region: str) -> ApiProblem:
    if region:
        detail = _(
            "No single server in the region %(region)s offers %(count)d GPUs of this model right now."
        ) % {"region": Region(region).label, "count": gpus}
    else:
        detail = _("No single server offers %(count)d GPUs of this model right now.") % {"count": gpus}
    return ApiProblem(404, "no_offer", detail)


class QuoteIn(InputSchema):
    gpu_model: str = Field(max_length=80, examples=["h100-sxm"])
    gpus: GpuCount
    hours: Hours
    region: RegionText


class QuoteOut(Schema):
    gpu_model: str = Field(examples=["h100-sxm"])
    gpus: int = Field(examples=[2])
    hours: int | None = Field(examples=[24])
    price: Money = Field(description="Per GPU-hour: the best offer that fills the order on one server.")
    per_hour_usd: Money = Field(description="What one hour of all the GPUs costs in US dollars.")
    total_usd: Money | None = Field(
        description="For all the hours asked; null when the order runs until stopped."
    )
    per_hour: Money | None = Field(
        description="One hour in the wallet's currency at the current rate (US dollars before the first "
                    "top-up); null when the currency has no rate."
    )
    total: Money | None = Field(description="All the hours in the wallet's currency; null when open-ended.")
    covers_first_hour: bool | None = Field(description="Whether the balance pays the first hour.")


@router.post(
    "/quote", response={200: QuoteOut, **problems(400, 401, 403, 404, 422, 429)},
    auth=READ, tags=["orders"], operation_id="quote",
    summary="What an order would cost now at the best offer, in US dollars and in the wallet's currency",
)
def quote(request, payload: QuoteIn):
    order_terms_check(gpus=payload.gpus, hours=payload.hours, region=payload.region)
    gpu = _gpu_for_order(payload.gpu_model)
    price = selectors.order_quote(gpu_model_id=gpu.pk, gpus=payload.gpus, region=payload.region)
    if price is None:
        raise _no_offer(gpus=payload.gpus, region=payload.region)
    bid_terms_check(gpus=payload.gpus, max_price_usd=price, hours=payload.hours)
    cost = order_cost_preview(
        user=token_of(request).user, price_usd=price, gpus=payload.gpus, hours=payload.hours
    )
    total_usd = selectors.order_total_usd(price_usd=price, gpus=payload.gpus, hours=payload.hours)
    return {
        "gpu_model": gpu.slug, "gpus": payload.gpus, "hours": payload.hours, "price": usd(price),
        "per_hour_usd": usd(price * payload.gpus),
        "total_usd": usd(total_usd) if payload.hours else None,
        "per_hour": money(cost.per_hour, cost.currency) if cost else None,
        "total": money(cost.total, cost.currency) if cost else None,
        "covers_first_hour": cost.covers_first_hour if cost else None,
    }


class BidIn(InputSchema):
    gpu_model: str = Field(max_length=80, examples=["h100-sxm"])
    gpus: GpuCount
    max_price: DecimalText = Field(
        description="US dollars per GPU-hour, tick 0.01: the most this order pays."
    )
    hours: Hours
    region: RegionText
    time_in_force: Literal["buy_now", "bid"] = Field(
        examples=["bid"], description="buy_now: fill at the best offer or cancel; bid: rest in the book."
    )
    expires_at: datetime | None = Field(None, description="A resting bid only: when it leaves the book.")
    ssh_public_key: str | None = Field(
        None, max_length=16384, examples=["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI... me@laptop"],
        description="The one line of your public key file: the rental's server lets this key in.",
    )


class BidOut(Schema):
    id: int = Field(examples=[42])
    gpu_model: str = Field(examples=["h100-sxm"])
    gpus: int = Field(examples=[2])
    max_price: Money
    hours: int | None = Field(examples=[24])
    region: str = Field(examples=[""])
    time_in_force: str = Field(examples=["bid"])
    expires_at: UtcTime | None
    state: str = Field(examples=["open"], description="open, filled, cancelled or expired.")
    cancel_reason: str = Field(
        examples=[""], description="buyer, not_filled, insufficient_balance or operator; empty otherwise."
    )
    created_at: UtcTime
    rental_id: int | None = Field(examples=[None], description="The rental it made, once filled.")


class ConnectionOut(Schema):
    host: str = Field(examples=["gpu1.example.com"])
    port: int = Field(examples=[22])
    username: str = Field(examples=["evx42"])
    ssh_command: str = Field(examples=["ssh -p 22 evx42@gpu1.example.com"])


class RentalOut(Schema):
    id: int = Field(examples=[7])
    gpu_model: str = Field(examples=["h100-sxm"])
    gpus: int = Field(examples=[2])
    price: Money = Field(description="Per GPU-hour, locked when the bid matched.")
    hours: int | None = Field(examples=[None], description="Hours booked; null to run until stopped.")
    state: str = Field(examples=["running"], description="starting, running or ended.")
    started_at: UtcTime
    paid_through: UtcTime | None
    ended_at: UtcTime | None
    end_reason: str = Field(examples=[""])
    cost_so_far: Money | None = Field(description="What its hours have cost, in the wallet's currency.")
    connection: ConnectionOut | None = Field(description="Only while it runs.")


class OrderPlacedOut(Schema):
    bid: BidOut
    rental: RentalOut | None = Field(description="The rental, when the bid matched at once.")


def _rental_id(bid) -> int | None:
    try:
        return bid.rental.pk
    except ObjectDoesNotExist:
        return None


def _bid_out(bid) -> dict:
    return {
        "id": bid.pk, "gpu_model": bid.gpu_model.slug, "gpus": bid.gpus, "max_price": usd(bid.max_price_usd),
        "hours": bid.hours, "region": bid.region, "time_in_force": bid.time_in_force,
        "expires_at": bid.expires_at, "state": bid.state, "cancel_reason": bid.cancel_reason,
        "created_at": bid.created_at, "rental_id": _rental_id(bid),
    }


def _rentals_out(rentals) -> list[dict]:
    """Rentals with their cost so far (one query for all) and, while running, how to connect."""
    costs = rental_costs(rental_ids=[rental.pk for rental in rentals])
    shaped = []
    for rental in rentals:
        cost = costs.get(rental.pk)
        connection = None
        if rental.state == RentalState.RUNNING:
            server = rental.server
            connection = {
                "host": server.host, "port": server.ssh_port, "username": rental.username,
                "ssh_command": ssh_connect_command(
                    host=server.host, port=server.ssh_port, username=rental.username
                ),
            }
        shaped.append({
            "id": rental.pk, "gpu_model": rental.gpu_model.slug, "gpus": rental.gpus,
            "price": usd(rental.price_usd), "hours": rental.hours, "state": rental.state,
            "started_at": rental.started_at, "paid_through": rental.paid_through, "ended_at": rental.ended_at,
            "end_reason": rental.end_reason, "cost_so_far": money(*cost) if cost else None,
            "connection": connection,
        })
    return shaped


def _form_token(request) -> uuid.UUID:
    """One bid per Idempotency-Key of a token: the key names the order as a form's token does."""
    key = request.headers.get("Idempotency-Key")
    if not key:
        return uuid.uuid4()
    return uuid.uuid5(IDEMPOTENT_BIDS, f"{token_of(request).pk}:{key}")


@router.post(
    "/bids", response={201: OrderPlacedOut, **problems(400, 401, 403, 422, 429)}, auth=TRADE, tags=["orders"],
    operation_id="bid_place",
    summary="Place an order: buy now at the best offer up to max_price, or bid and rest in the book",
)
def bid_place(request, payload: BidIn):
    gpu = _gpu_for_order(payload.gpu_model)
    placed = order_place(
        buyer=token_of(request).user, gpu_model_id=gpu.pk, gpus=payload.gpus,
        max_price_usd=Decimal(payload.max_price), region=payload.region, hours=payload.hours,
        time_in_force=payload.time_in_force, expires_at=payload.expires_at,
        ssh_public_key=payload.ssh_public_key or "", form_token=_form_token(request),
    )
    bid = selectors.bid_get_for_buyer(buyer=token_of(request).user, bid_id=placed.bid.pk)
    rental = _rentals_out([placed.rental])[0] if placed.rental else None
    return Status(201, {"bid": _bid_out(bid), "rental": rental})


@router.get(
    "/bids", response={200: Page[BidOut], **problems(400, 401, 403, 422, 429)}, auth=READ, tags=["orders"],
    operation_id="bids_list", summary="Your bids, newest first",
)
def bids_list(
    request, state: Literal["open", "filled", "cancelled", "expired"] | None = None,
    cursor: str | None = None, limit: int | None = None,
):
    bids, next_cursor = page_of(
        selectors.bids_for_buyer(buyer=token_of(request).user, state=state), cursor=cursor, limit=limit
    )
    return {"items": [_bid_out(bid) for bid in bids], "next_cursor": next_cursor}


def _bid_or_404(request, bid_id: int):
    bid = selectors.bid_get_for_buyer(buyer=token_of(request).user, bid_id=bid_id)
    if bid is None:
        raise ApiProblem(404, "bid_not_found", _("We could not find this order."))
    return bid


@router.get(
    "/bids/{bid_id}", response={200: BidOut, **problems(401, 403, 404, 422, 429)}, auth=READ, tags=["orders"],
    operation_id="bid_get", summary="One of your bids",
)
def bid_get(request, bid_id: int):
    return _bid_out(_bid_or_404(request, bid_id))


@router.post(
    "/bids/{bid_id}/cancel", response={200: BidOut, **problems(401, 403, 404, 409, 422, 429)}, auth=TRADE,
    tags=["orders"], operation_id="bid_cancel", summary="Cancel one of your open bids",
)
def bid_cancel_op(request, bid_id: int):
    bid_cancel(buyer=token_of(request).user, bid_id=bid_id)
    return _bid_out(_bid_or_404(request, bid_id))


@router.get(
    "/rentals", response={200: Page[RentalOut], **problems(400, 401, 403, 422, 429)},
    auth=READ, tags=["rentals"],
    operation_id="rentals_list", summary="Your rentals, newest first: live (starting or running) or ended",
)
def rentals_list(
    request, state: Literal["live", "ended"] | None = None, cursor: str | None = None,
    limit: int | None = None,
):
    live = None if state is None else state == "live"
    rentals, next_cursor = page_of(
        selectors.rentals_for_buyer(buyer=token_of(request).user, live=live), cursor=cursor, limit=limit
    )
    return {"items": _rentals_out(rentals), "next_cursor": next_cursor}


def _rental_or_404(request, rental_id: int):
    rental = selectors.rental_get_for_buyer(buyer=token_of(request).user, rental_id=rental_id)
    if rental is None:
        raise ApiProblem(404, "rental_not_found", _("We could not find this rental."))
    return rental


@router.get(
    "/rentals/{rental_id}", response={200: RentalOut, **problems(401, 403, 404, 422, 429)},
    auth=READ, tags=["rentals"],
    operation_id="rental_get",
    summary="One of your rentals, with how to connect while it runs and its cost so far",
)
def rental_get(request, rental_id: int):
    return _rentals_out([_rental_or_404(request, rental_id)])[0]


@router.post(
    "/rentals/{rental_id}/stop", response={200: RentalOut, **problems(401, 403, 404, 422, 429)},
    auth=TRADE, tags=["rentals"],
    operation_id="rental_stop",
    summary="Stop one of your rentals now: its GPUs are released, the hour already paid is not refunded",
)
def rental_stop_op(request, rental_id: int):
    rental_stop(buyer=token_of(request).user, rental_id=rental_id)
    return _rentals_out([_rental_or_404(request, rental_id)])[0]
