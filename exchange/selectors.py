"""Reads of the order book, market data and a buyer's orders. Each runs a constant number of
queries, whatever the number of offers, bids or rentals."""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db.models import F, Max, Min, Q, Sum, Window
from django.db.models.functions import Least, RowNumber, TruncHour
from django.utils import timezone

from sellers.models import ServerStatus

from .models import BID_GPU_COUNTS, Bid, BidState, Market, Offer, OfferState, Rental

PRICE_TICK = Decimal("0.01")


@dataclass(frozen=True)
class GpuPrice:
    """The best live ask of one GPU model and how many GPUs are on offer."""

    lowest_usd: Decimal
    gpus_on_offer: int


@dataclass(frozen=True)
class Level:
    """One price level of the book: the GPUs offered (asks) or wanted (bids) at that price."""

    price: Decimal
    gpus: int


@dataclass(frozen=True)
class OrderBook:
    asks: list[Level]  # cheapest first
    bids: list[Level]  # highest first
    best_bid: Decimal | None
    best_ask: Decimal | None
    spread: Decimal | None  # best ask - best bid, when both exist


@dataclass(frozen=True)
class Trade:
    time: datetime
    price: Decimal
    gpus: int


@dataclass(frozen=True)
class HourPoint:
    """Trades of one hour (UTC): the price of its latest trade, its lowest and its highest."""

    hour: datetime
    last: Decimal
    low: Decimal
    high: Decimal


def offers_available():
    """Active offers of active servers, annotated with `available`: the GPUs they can sell now."""
    return (
        Offer.objects.filter(state=OfferState.ACTIVE, server__status=ServerStatus.ACTIVE)
        .annotate(available=Least("gpus_offered", "server__gpu_count") - F("server__gpus_rented"))
        .filter(available__gt=0)
    )


def gpu_prices() -> dict[int, GpuPrice]:
    """Lowest active ask with free GPUs per GPU model id, in one query for all models."""
    rows = (
        offers_available()
        .values("server__gpu_model_id")
        .annotate(lowest=Min("price_usd"), gpus=Sum("available"))
        .order_by()
    )
    return {
        row["server__gpu_model_id"]: GpuPrice(lowest_usd=row["lowest"], gpus_on_offer=row["gpus"])
        for row in rows
    }


def market_is_open() -> bool:
    return Market.objects.filter(pk=Market.SINGLETON_ID, is_open=True).exists()


def bids_open(*, gpu_model_id: int | None = None, now: datetime | None = None):
    """Open bids that have not expired (of one GPU model, when given)."""
    now = now or timezone.now()
    bids = Bid.objects.filter(state=BidState.OPEN).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=now)
    )
    if gpu_model_id is not None:
        bids = bids.filter(gpu_model_id=gpu_model_id)
    return bids


def order_book(*, gpu_model_id: int, levels: int = 10, now: datetime | None = None) -> OrderBook:
    """The book of one GPU model, `levels` price levels a side, in two queries.

    Asks: the GPUs each price level can sell now (free GPUs of active offers). Bids: the GPUs
    wanted by open, unexpired bids at each maximum price."""
    asks = [
        Level(price=row["price_usd"], gpus=row["gpus"])
        for row in offers_available()
        .filter(server__gpu_model_id=gpu_model_id)
        .values("price_usd")
        .annotate(gpus=Sum("available"))
        .order_by("price_usd")[:levels]
    ]
    bids = [
        Level(price=row["max_price_usd"], gpus=row["gpus"])
        for row in bids_open(gpu_model_id=gpu_model_id, now=now)
        .values("max_price_usd")
        .annotate(gpus=Sum("gpus"))
        .order_by("-max_price_usd")[:levels]
    ]
    best_ask = asks[0].price if asks else None
    best_bid = bids[0].price if bids else None
    spread = best_ask - best_bid if best_ask is not None and best_bid is not None else None
    return OrderBook(asks=asks, bids=bids, best_bid=best_bid, best_ask=best_ask, spread=spread)


def best_asks_by_size(*, gpu_model_id: int) -> dict[int, Decimal]:
    """For each bid size (1, 2, 4, 8 GPUs), the lowest price of an offer that can fill it on one
    server right now; sizes nothing can fill are left out. One query."""
    row = (
        offers_available()
        .filter(server__gpu_model_id=gpu_model_id)
        .aggregate(**{
            f"gpus_{count}": Min("price_usd", filter=Q(available__gte=count)) for count in BID_GPU_COUNTS
        })
    )
    # SQLite's MIN() comes back as a float-born Decimal: put it back on the cent tick.
    return {
        count: Decimal(row[f"gpus_{count}"]).quantize(PRICE_TICK)
        for count in BID_GPU_COUNTS if row[f"gpus_{count}"] is not None
    }


def trades_recent(*, gpu_model_id: int, limit: int = 20) -> list[Trade]:
    """The latest trades (rentals as they matched) of one GPU model, newest first."""
    rows = (
        Rental.objects.filter(gpu_model_id=gpu_model_id)
        .order_by("-started_at", "-id")
        .values_list("started_at", "price_usd", "gpus")[:limit]
    )
    return [Trade(time=time, price=price, gpus=gpus) for time, price, gpus in rows]


def price_history(
    *, gpu_model_id: int, days: int = 30, now: datetime | None = None
) -> list[HourPoint]:
    """Trade prices of one GPU model over the last `days` days, in hourly buckets (UTC), oldest
    first; hours without trades are left out. One query."""
    now = now or timezone.now()
    hour = TruncHour("started_at", tzinfo=UTC)
    rows = (
        Rental.objects.filter(
            gpu_model_id=gpu_model_id, started_at__gt=now - timedelta(days=days), started_at__lte=now
        )
        .annotate(
            hour=hour,
            low=Window(Min("price_usd"), partition_by=[hour]),
            high=Window(Max("price_usd"), partition_by=[hour]),
            rank=Window(RowNumber(), partition_by=[hour], order_by=[F("started_at").desc(), F("id").desc()]),
        )
        .filter(rank=1)
        .order_by("hour")
        .values_list("hour", "price_usd", "low", "high")
    )
    return [HourPoint(hour=hour, last=last, low=low, high=high) for hour, last, low, high in rows]


def bids_for_buyer(*, buyer):
    """The buyer's bids, newest first, with their GPU model and rental (if any) loaded."""
    return (
        Bid.objects.filter(buyer=buyer).select_related("gpu_model", "rental").order_by("-created_at", "-id")
    )


def rentals_for_buyer(*, buyer):
    """The buyer's rentals, newest first, with their server and GPU model loaded."""
    return (
        Rental.objects.filter(buyer=buyer)
        .select_related("server", "gpu_model")
        .order_by("-started_at", "-id")
    )


def bid_get_for_buyer(*, buyer, bid_id: int) -> Bid | None:
    """The bid if it is the buyer's, else None."""
    return bids_for_buyer(buyer=buyer).filter(pk=bid_id).first()


def rental_get_for_buyer(*, buyer, rental_id: int) -> Rental | None:
    """The rental if it is the buyer's, else None."""
    return rentals_for_buyer(buyer=buyer).filter(pk=rental_id).first()


def gpus_offered_below(*, gpu_model_id: int, price_usd: Decimal) -> int:
    """How many GPUs of one model active offers can sell now below `price_usd`. One query."""
    total = (
        offers_available()
        .filter(server__gpu_model_id=gpu_model_id, price_usd__lt=price_usd)
        .aggregate(gpus=Sum("available"))["gpus"]
    )
    return int(total or 0)
