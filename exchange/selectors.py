"""Reads of the order book, market data, a buyer's orders and a seller's offers and rentals. Each
runs a constant number of queries, whatever the number of offers, bids or rentals."""

import functools
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.db import connection
from django.db.models import (
    Case,
    Count,
    Exists,
    F,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Prefetch,
    Q,
    Subquery,
    Sum,
    Value,
    When,
    Window,
)
from django.db.models.functions import (
    Coalesce,
    DenseRank,
    FirstValue,
    Least,
    RowNumber,
    TruncDay,
    TruncHour,
)
from django.utils import timezone
from django.utils.crypto import salted_hmac

from accounts.tokens import token_secret_hash
from catalog.fit import Method, model_fits
from catalog.models import GpuModel
from catalog.selectors import gpu_models_list
from marketplace.sql import ModelColumns, prepared_cursor, row_split
from sellers.isolation import LEVELS_BY_STRENGTH, IsolationLevel, levels_of_text
from sellers.models import (
    SERVER_SHARE_FIELDS,
    AgentToken,
    ContainerTemplate,
    PerGpu,
    Server,
    ServerAgent,
    ServerAvailabilityDay,
    ServerStatus,
    ServerTemplate,
)
from sellers.selectors import agent_token_find

from .models import (
    BID_GPU_COUNTS,
    Bid,
    BidState,
    Market,
    MarketBook,
    Offer,
    OfferState,
    PriceAlert,
    Rental,
    RentalGpu,
    RentalState,
    SshKey,
)

PRICE_TICK = Decimal("0.01")


@dataclass(frozen=True)
class GpuPrice:
    """The best live ask of one GPU model and how many GPUs are on offer."""

    lowest_usd: Decimal
    gpus_on_offer: int


@dataclass(frozen=True)
class AskOffer:
    """One offer behind a price level of asks: the GPUs it can sell now, its server's reliability
    over the last days (shares from 0 to 1; None while the server is "new"), the isolation level it
    is sold at and what a rental gets with each GPU."""

    gpus: int
    reliability: Decimal | None
    uptime: Decimal | None
    delivery: Decimal | None
    isolation_level: str = IsolationLevel.WHOLE
    per_gpu: PerGpu | None = None  # what a rental gets with each GPU
    templates: tuple = ()  # the published container templates its server holds (ContainerTemplate)

    @property
    def isolation_label(self) -> str:
        return IsolationLevel(self.isolation_level).label


@dataclass(frozen=True)
class Level:
    """One price level of the book: the GPUs offered (asks) or wanted (bids) at that price. An ask
    level lists its offers in the order matching serves them (the oldest first), the first
    `OFFERS_PER_LEVEL` of them, and how many more it has."""

    price: Decimal
    gpus: int
    offers: tuple[AskOffer, ...] = ()
    more_offers: int = 0


# The offers an ask level lists: what a buyer reads at a glance, and a bound on the rows a page
# reads whatever the depth of one price.
OFFERS_PER_LEVEL = 10


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


def offers_available(
    *, min_reliability: Decimal | None = None, isolation_levels: str | None = None,
    template_id: int | None = None,
):
    """Active offers of active servers that their agent verified, annotated with `available`: the
    GPUs they can sell now. With `min_reliability`, only those of servers at least that reliable
    (a "new" server, without a score yet, never is: as matching reads a bid's minimum). With
    `isolation_levels` (as a bid stores them, `sellers.isolation.levels_text`), only those of
    servers sold at one of these levels. With `template_id`, a server sold as "container" only when
    its agent holds that container template (as matching reads an order's)."""
    offers = (
        Offer.objects.filter(
            state=OfferState.ACTIVE, server__status=ServerStatus.ACTIVE,
            server__agent_verified_at__isnull=False,
        )
        .annotate(available=Least("gpus_offered", "server__gpu_count") - F("server__gpus_rented"))
        .filter(available__gt=0)
    )
    if min_reliability is not None:
        offers = offers.filter(server__reliability__gte=min_reliability)
    if isolation_levels is not None:
        offers = offers.filter(server__isolation_level__in=levels_of_text(isolation_levels))
    if template_id is not None:
        held = ServerTemplate.objects.filter(server_id=OuterRef("server_id"), template_id=template_id)
        offers = offers.filter(~Q(server__isolation_level=IsolationLevel.CONTAINER) | Exists(held))
    return offers


def offer_fills(gpus: int) -> Q:
    """The offers (of `offers_available`) that can fill an order of `gpus` GPUs on one server, as
    matching decides: that many GPUs free, and a "whole server" only for all of its GPUs."""
    whole = Q(server__isolation_level=IsolationLevel.WHOLE)
    return Q(available__gte=gpus) & (~whole | Q(server__gpu_count=gpus))


def book_summaries_kept() -> bool:
    """Whether the database keeps each book's best ask and GPUs on offer (`MarketBook`, exchange
    migration 0009: PostgreSQL's triggers); the embedded default's SQLite aggregates instead."""
    return connection.vendor == "postgresql"


def gpu_prices() -> dict[int, GpuPrice]:
    """Lowest active ask with free GPUs per GPU model id, in one query for all models: the books'
    summaries, whatever the number of offers (aggregated from the offers on SQLite)."""
    if not book_summaries_kept():
        return gpu_prices_aggregated()
    rows = MarketBook.objects.filter(best_ask_usd__isnull=False, gpus_on_offer__gt=0).values_list(
        "gpu_model_id", "best_ask_usd", "gpus_on_offer"
    )
    return {model: GpuPrice(lowest_usd=lowest, gpus_on_offer=gpus) for model, lowest, gpus in rows}


def gpu_prices_aggregated() -> dict[int, GpuPrice]:
    """`gpu_prices` from the offers themselves: what the books' summaries always equal."""
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


@functools.cache
def _bids_crossing_query() -> tuple[str, ModelColumns]:
    columns = ModelColumns(Bid, "b")
    sql = (
        f"SELECT {columns.select()} FROM {Bid._meta.db_table} b "  # noqa: S608 (the model's columns)
        "WHERE b.gpu_model_id = %s AND b.state = %s AND b.max_price_usd >= "
        f"(SELECT best_ask_usd FROM {MarketBook._meta.db_table} WHERE gpu_model_id = %s) "
        "ORDER BY b.max_price_usd DESC, b.created_at, b.id"
    )
    return sql, columns


def bids_crossing(*, gpu_model_id: int) -> list[Bid]:
    """The open bids of one GPU model at or above its best ask (none without an ask), best first:
    highest maximum price, then oldest. Expired ones too (matching marks them). On PostgreSQL one
    prepared statement against the book's summary; elsewhere the cheapest available offer is found
    through the index of active offers."""
    if book_summaries_kept():
        sql, columns = _bids_crossing_query()
        with prepared_cursor() as cursor:
            cursor.execute(sql, [gpu_model_id, BidState.OPEN, gpu_model_id])
            return [columns.instance(row) for row in cursor.fetchall()]
    best_ask = (
        offers_available().filter(server__gpu_model_id=gpu_model_id).order_by("price_usd")
        .values("price_usd")[:1]
    )
    return list(
        Bid.objects.filter(
            gpu_model_id=gpu_model_id, state=BidState.OPEN, max_price_usd__gte=Subquery(best_ask)
        ).order_by("-max_price_usd", "created_at", "id")
    )


@dataclass(frozen=True)
class MarketVersions:
    """Whether the market is open, and a short text that changes with any committed change of the
    market's state or of the books it was read for: a cached page stored under `key` is as new
    as those books."""

    key: str
    is_open: bool


def market_versions(*, gpu_model_ids: list[int] | None = None, gpu_slug: str | None = None) -> MarketVersions:
    """The versions of the market's state and of the books of `gpu_model_ids` (or of the GPU model
    whose address is `gpu_slug`; every book when neither), and whether the market is open. One
    query, written out and prepared: every cached page asks it, and building it through the ORM,
    or planning it, cost more than the answer. By address, a GPU's page needs no other query
    when its copy is in the cache."""
    # The market's own row comes first as "model 0" (ids start at 1), its state in the third column.
    book = MarketBook._meta.db_table
    sql = (
        f"SELECT 0, version, CASE WHEN is_open THEN 1 ELSE 0 END FROM {Market._meta.db_table} WHERE id = %s "  # noqa: S608
        f"UNION ALL SELECT b.gpu_model_id, b.version, 0 FROM {book} b"
    )
    params: list = [Market.SINGLETON_ID]
    if gpu_slug is not None:
        sql += f" JOIN {GpuModel._meta.db_table} g ON g.id = b.gpu_model_id WHERE g.slug = %s"
        params.append(gpu_slug)
    elif gpu_model_ids is not None:
        ids = [int(model_id) for model_id in gpu_model_ids] or [0]
        sql += f" WHERE b.gpu_model_id IN ({', '.join(['%s'] * len(ids))})"
        params += ids
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        rows = sorted(cursor.fetchall())
    state = rows[0] if rows and rows[0][0] == 0 else (0, 0, False)
    books_text = ",".join(f"{model}.{version}" for model, version, _flag in rows if model)
    return MarketVersions(key=f"m{state[1]}:{books_text}", is_open=bool(state[2]))


def market_is_open() -> bool:
    """Whether the market is open: one prepared statement (every order asks it under its lock)."""
    with prepared_cursor() as cursor:
        cursor.execute(
            f"SELECT 1 FROM {Market._meta.db_table} WHERE id = %s AND is_open",  # noqa: S608
            [Market.SINGLETON_ID],
        )
        return cursor.fetchone() is not None


def bids_open(*, gpu_model_id: int | None = None, now: datetime | None = None):
    """Open bids that have not expired (of one GPU model, when given)."""
    now = now or timezone.now()
    bids = Bid.objects.filter(state=BidState.OPEN).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=now)
    )
    if gpu_model_id is not None:
        bids = bids.filter(gpu_model_id=gpu_model_id)
    return bids


def bids_next_expiry(*, gpu_model_id: int, now: datetime | None = None) -> datetime | None:
    """When the next open bid of a GPU model expires (after `now`), if any does: the book changes
    then by the clock alone. One query."""
    now = now or timezone.now()
    return (
        Bid.objects.filter(gpu_model_id=gpu_model_id, state=BidState.OPEN, expires_at__gt=now)
        .aggregate(first=Min("expires_at"))["first"]
    )


def _ask_levels(
    *, gpu_model_id: int, levels: int, min_reliability: Decimal | None, isolation_levels: str | None
) -> list[Level]:
    """The cheapest `levels` price levels of asks, each with the GPUs it can sell now and its first
    offers (`OFFERS_PER_LEVEL`) with their servers' reliability. One query: window functions rank
    the prices and the offers within each price, and count what a level holds beyond those; and
    one more for the templates of container servers among them."""
    by_price = [F("price_usd")]
    rows = list(
        offers_available(min_reliability=min_reliability, isolation_levels=isolation_levels)
        .filter(server__gpu_model_id=gpu_model_id)
        .annotate(
            level=Window(DenseRank(), order_by=F("price_usd").asc()),
            place=Window(RowNumber(), partition_by=by_price, order_by=[F("created_at").asc(), F("id").asc()]),
            level_gpus=Window(Sum("available"), partition_by=by_price),
            level_offers=Window(Count("id"), partition_by=by_price),
        )
        .filter(level__lte=levels, place__lte=OFFERS_PER_LEVEL)
        .order_by("price_usd", "place")
        .values_list(
            "price_usd", "level_gpus", "level_offers", "available",
            "server__reliability", "server__reliability_uptime", "server__reliability_delivery",
            "server__isolation_level", "server_id",
            *(f"server__{name}" for name in SERVER_SHARE_FIELDS),
        )
    )
    totals: dict[Decimal, tuple[int, int]] = {}  # price -> (GPUs, offers) of the whole level
    offers: dict[Decimal, list[AskOffer]] = defaultdict(list)
    templates = _templates_held(
        {row[8] for row in rows if row[7] == IsolationLevel.CONTAINER}
    )
    for row in rows:
        price, level_gpus, level_offers, available, reliability, uptime, delivery, level, server_id = row[:9]
        shares = row[9:]
        price = Decimal(price).quantize(PRICE_TICK)
        totals[price] = (int(level_gpus), int(level_offers))
        offers[price].append(AskOffer(
            gpus=int(available), reliability=reliability, uptime=uptime, delivery=delivery,
            isolation_level=level, per_gpu=PerGpu.of(**dict(zip(SERVER_SHARE_FIELDS, shares, strict=True))),
            templates=templates.get(server_id, ()),
        ))
    return [
        Level(price=price, gpus=gpus, offers=tuple(offers[price]), more_offers=count - len(offers[price]))
        for price, (gpus, count) in totals.items()
    ]


def _templates_held(server_ids: set[int]) -> dict[int, tuple]:
    """The published container templates each server holds. One query, none without servers."""
    if not server_ids:
        return {}
    held: dict[int, list] = defaultdict(list)
    rows = ServerTemplate.objects.filter(server_id__in=server_ids, template__published=True)
    for row in rows.select_related("template"):
        held[row.server_id].append(row.template)
    return {server_id: tuple(templates) for server_id, templates in held.items()}


def order_book(
    *, gpu_model_id: int, levels: int = 10, now: datetime | None = None,
    min_reliability: Decimal | None = None, isolation_levels: str | None = None,
) -> OrderBook:
    """The book of one GPU model, `levels` price levels a side, in two queries.

    Asks: the GPUs each price level can sell now (free GPUs of active offers, of servers at least
    `min_reliability` reliable and at one of `isolation_levels` when given), with its first offers
    and their reliability. Bids: the GPUs wanted by open, unexpired bids at each maximum price."""
    asks = _ask_levels(
        gpu_model_id=gpu_model_id, levels=levels, min_reliability=min_reliability,
        isolation_levels=isolation_levels,
    )
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


def best_asks_by_size(
    *, gpu_model_id: int, min_reliability: Decimal | None = None, isolation_levels: str | None = None
) -> dict[int, Decimal]:
    """For each bid size (1, 2, 4, 8 GPUs), the lowest price of an offer that can fill it on one
    server right now (a server at least `min_reliability` reliable and at one of `isolation_levels`
    when given); sizes nothing can fill are left out. One query."""
    row = (
        offers_available(min_reliability=min_reliability, isolation_levels=isolation_levels)
        .filter(server__gpu_model_id=gpu_model_id)
        .aggregate(**{
            f"gpus_{count}": Min("price_usd", filter=offer_fills(count)) for count in BID_GPU_COUNTS
        })
    )
    # SQLite's MIN() comes back as a float-born Decimal: put it back on the cent tick.
    return {
        count: Decimal(row[f"gpus_{count}"]).quantize(PRICE_TICK)
        for count in BID_GPU_COUNTS if row[f"gpus_{count}"] is not None
    }


def best_asks_by_size_all() -> dict[int, dict[int, Decimal]]:
    """`best_asks_by_size` of every GPU model at once: GPU model id -> {bid size: the lowest price
    of an offer that can fill it on one server right now}. Models and sizes nothing can fill are
    left out. One query, whatever the number of models and offers."""
    rows = (
        offers_available()
        .values("server__gpu_model_id")
        .order_by()
        .annotate(**{
            f"gpus_{count}": Min("price_usd", filter=offer_fills(count)) for count in BID_GPU_COUNTS
        })
    )
    prices: dict[int, dict[int, Decimal]] = {}
    for row in rows:
        sizes = {
            count: Decimal(row[f"gpus_{count}"]).quantize(PRICE_TICK)
            for count in BID_GPU_COUNTS if row[f"gpus_{count}"] is not None
        }
        if sizes:
            prices[row["server__gpu_model_id"]] = sizes
    return prices


@dataclass(frozen=True)
class FitConfiguration:
    """One GPU model on `gpus` GPUs of one server, for the fit calculator: whether the model fits
    (`catalog.fit.model_fits`), the best live price per GPU-hour that can fill it (None when no
    offer can), what an hour of all its GPUs costs and what the hours asked cost (None without
    hours or a price)."""

    gpu: GpuModel
    gpus: int
    fits: bool
    price_usd: Decimal | None
    hourly_usd: Decimal | None
    total_usd: Decimal | None

    @property
    def cost_usd(self) -> Decimal | None:
        return self.total_usd if self.total_usd is not None else self.hourly_usd


def fit_configurations(
    *, params_billions: Decimal, method: Method, hours: int | None = None
) -> list[FitConfiguration]:
    """Every GPU model on 1, 2, 4 and 8 GPUs of one server: the cheapest fitting first (by cost),
    then those that fit without an offer, then those that do not fit. Two queries, whatever the
    number of GPU models and offers."""
    prices = best_asks_by_size_all()
    rows = []
    for gpu in gpu_models_list():
        for count in BID_GPU_COUNTS:
            price = prices.get(gpu.pk, {}).get(count)
            hourly = price * count if price is not None else None
            rows.append(FitConfiguration(
                gpu=gpu, gpus=count,
                fits=model_fits(
                    params_billions=params_billions, memory_gb=gpu.memory_gb, gpus=count, method=method
                ),
                price_usd=price, hourly_usd=hourly,
                total_usd=order_total_usd(price_usd=price, gpus=count, hours=hours)
                if price is not None and hours else None,
            ))
    rows.sort(key=lambda row: (
        not row.fits, row.price_usd is None, row.cost_usd or Decimal(0), row.gpus, row.gpu.name,
    ))
    return rows


def order_quote(
    *, gpu_model_id: int, gpus: int, region: str = "", max_price_usd: Decimal | None = None,
    min_reliability: Decimal | None = None, isolation_levels: str | None = None,
    template_id: int | None = None,
) -> Decimal | None:
    """The price per GPU-hour an order for `gpus` GPUs on one server, in `region` when it names
    one, would buy at now: the cheapest offer with that many free GPUs (at or below
    `max_price_usd` when given, on a server at least `min_reliability` reliable and at one of
    `isolation_levels` when given), as matching picks it. None when no offer can fill it. One
    query."""
    offers = offers_available(
        min_reliability=min_reliability, isolation_levels=isolation_levels, template_id=template_id
    ).filter(offer_fills(gpus), server__gpu_model_id=gpu_model_id)
    if region:
        offers = offers.filter(server__region=region)
    if max_price_usd is not None:
        offers = offers.filter(price_usd__lte=max_price_usd)
    price = offers.order_by("price_usd").values_list("price_usd", flat=True).first()
    return None if price is None else Decimal(price).quantize(PRICE_TICK)


@dataclass(frozen=True)
class OfferQuote:
    """The offer an order would buy from now: its price per GPU-hour, its server's region and
    reliability (None while the server is "new")."""

    price: Decimal
    region: str
    reliability: Decimal | None


def order_offer_best(
    *, gpu_model_id: int, gpus: int, region: str = "", max_price_usd: Decimal | None = None,
    min_reliability: Decimal | None = None, isolation_levels: str | None = None,
    template_id: int | None = None,
) -> OfferQuote | None:
    """The offer `order_quote` prices, with its server's region and reliability, as the
    confirmation of an order names them. None when no offer can fill it. One query."""
    offers = offers_available(
        min_reliability=min_reliability, isolation_levels=isolation_levels, template_id=template_id
    ).filter(offer_fills(gpus), server__gpu_model_id=gpu_model_id)
    if region:
        offers = offers.filter(server__region=region)
    if max_price_usd is not None:
        offers = offers.filter(price_usd__lte=max_price_usd)
    row = (
        offers.order_by("price_usd", "created_at", "pk")
        .values_list("price_usd", "server__region", "server__reliability")
        .first()
    )
    if row is None:
        return None
    price, server_region, reliability = row
    return OfferQuote(
        price=Decimal(price).quantize(PRICE_TICK), region=server_region, reliability=reliability
    )


@dataclass(frozen=True)
class BidPlace:
    """What a bid with given terms would do if it were placed now."""

    fill_price: Decimal | None  # it buys at once at this price (the market is open, an offer fills it)
    best_bid: Decimal | None
    bids_ahead: int  # open bids at or above its price, which matching serves before it


def order_total_usd(*, price_usd: Decimal, gpus: int, hours: int | None) -> Decimal:
    """What an order costs in US dollars at `price_usd` per GPU-hour: for the hours asked, or for
    one hour when it runs until stopped (as the trade page and its confirmation state it)."""
    return price_usd * gpus * (hours or 1)


def bid_book_place(
    *, gpu_model_id: int, gpus: int, region: str, max_price_usd: Decimal, now: datetime | None = None,
    min_reliability: Decimal | None = None, isolation_levels: str | None = None,
    template_id: int | None = None,
) -> BidPlace:
    """Whether a bid would buy at once, and at what price, else where it would rest in the book of
    its GPU model. Three queries."""
    fill_price = (
        order_quote(
            gpu_model_id=gpu_model_id, gpus=gpus, region=region, max_price_usd=max_price_usd,
            min_reliability=min_reliability, isolation_levels=isolation_levels, template_id=template_id,
        )
        if market_is_open() else None
    )
    book = bids_open(gpu_model_id=gpu_model_id, now=now).aggregate(
        best=Max("max_price_usd"), ahead=Count("pk", filter=Q(max_price_usd__gte=max_price_usd))
    )
    return BidPlace(fill_price=fill_price, best_bid=book["best"], bids_ahead=book["ahead"])


def trades_recent(*, gpu_model_id: int, limit: int = 20) -> list[Trade]:
    """The latest trades (rentals as they matched) of one GPU model, newest first."""
    rows = (
        Rental.objects.filter(gpu_model_id=gpu_model_id)
        .order_by("-started_at", "-id")
        .values_list("started_at", "price_usd", "gpus")[:limit]
    )
    return [Trade(time=time, price=price, gpus=gpus) for time, price, gpus in rows]


def trades_of_market(*, gpu_model_id: int):
    """Every trade (rental as it matched) of one GPU model, newest first, with only what a trade
    shows loaded (`started_at`, `price_usd`, `gpus`): a queryset for pages of trades."""
    return (
        Rental.objects.filter(gpu_model_id=gpu_model_id)
        .order_by("-started_at", "-id")
        .only("started_at", "price_usd", "gpus")
    )


@dataclass(frozen=True)
class MarketSummary:
    """One GPU model's market at a glance: the best prices, the last trade, the GPUs on offer."""

    best_bid: Decimal | None
    best_ask: Decimal | None
    last_trade: Trade | None
    gpus_on_offer: int


def markets_summary(*, now: datetime | None = None) -> dict[int, MarketSummary]:
    """The market of every GPU model that has one, by GPU model id: two queries (the books' asks;
    each model's best open bid and last trade, found through their indexes), whatever the number
    of models, offers, bids or trades. Models with nothing on offer, no open bid and no trade are
    left out. The best bid is read, not kept: bids expire by the clock."""
    asks = gpu_prices()
    model = OuterRef("pk")
    last_trade = Rental.objects.filter(gpu_model_id=model).order_by("-started_at", "-id")
    rows = GpuModel.objects.annotate(
        best_bid=Subquery(
            bids_open(now=now).filter(gpu_model_id=model).order_by("-max_price_usd").values("max_price_usd")[:1]
        ),
        trade_time=Subquery(last_trade.values("started_at")[:1]),
        trade_price=Subquery(last_trade.values("price_usd")[:1]),
        trade_gpus=Subquery(last_trade.values("gpus")[:1]),
    ).filter(Q(best_bid__isnull=False) | Q(trade_time__isnull=False) | Q(pk__in=list(asks)))
    summaries = {}
    for gpu_model_id, best_bid, time, price, gpus in rows.values_list(
        "pk", "best_bid", "trade_time", "trade_price", "trade_gpus"
    ):
        ask = asks.get(gpu_model_id)
        summaries[gpu_model_id] = MarketSummary(
            best_bid=best_bid,
            best_ask=Decimal(ask.lowest_usd).quantize(PRICE_TICK) if ask else None,
            last_trade=Trade(time=time, price=price, gpus=gpus) if time is not None else None,
            gpus_on_offer=int(ask.gpus_on_offer) if ask else 0,
        )
    return summaries


class CandleInterval:
    HOUR = "hour"
    DAY = "day"


@dataclass(frozen=True)
class Candle:
    """The trades of one hour or one day (UTC) of one GPU model: the price of the first and of the
    last trade, the lowest and the highest, and the volume in GPUs traded (the sum of the trades'
    GPUs: a rental that runs until stopped has no known number of hours when it trades)."""

    start: datetime
    open: Decimal
    high: Decimal
    low: Decimal
    close: Decimal
    volume: int
    trades: int


def price_candles(
    *, gpu_model_id: int, interval: str, limit: int, now: datetime | None = None
) -> list[Candle]:
    """The latest `limit` candles (`interval`: "hour" or "day", UTC) of one GPU model's trades up to
    `now`, oldest first; intervals without a trade are left out. One query: the trades are the
    rentals, each at its price when it started."""
    now = now or timezone.now()
    trunc = TruncHour if interval == CandleInterval.HOUR else TruncDay
    bucket = trunc("started_at", tzinfo=UTC)
    oldest_first = [F("started_at").asc(), F("id").asc()]
    rows = (
        Rental.objects.filter(gpu_model_id=gpu_model_id, started_at__lte=now)
        .annotate(
            bucket=bucket,
            open=Window(FirstValue("price_usd"), partition_by=[bucket], order_by=oldest_first),
            close=Window(FirstValue("price_usd"), partition_by=[bucket],
                         order_by=[F("started_at").desc(), F("id").desc()]),
            low=Window(Min("price_usd"), partition_by=[bucket]),
            high=Window(Max("price_usd"), partition_by=[bucket]),
            volume=Window(Sum("gpus"), partition_by=[bucket]),
            trades=Window(Count("id"), partition_by=[bucket]),
            rank=Window(RowNumber(), partition_by=[bucket], order_by=oldest_first),
        )
        .filter(rank=1)
        .order_by("-bucket")
        .values_list("bucket", "open", "high", "low", "close", "volume", "trades")[:limit]
    )
    candles = [
        Candle(start=start, open=Decimal(first).quantize(PRICE_TICK), high=Decimal(high).quantize(PRICE_TICK),
               low=Decimal(low).quantize(PRICE_TICK), close=Decimal(last).quantize(PRICE_TICK),
               volume=int(volume), trades=int(trades))
        for start, first, high, low, last, volume, trades in rows
    ]
    return candles[::-1]


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


def bids_for_buyer(*, buyer, state: str | None = None):
    """The buyer's bids (in `state` when given), newest first, with their GPU model and rental (if
    any) loaded."""
    bids = Bid.objects.filter(buyer=buyer)
    if state is not None:
        bids = bids.filter(state=state)
    return bids.select_related("gpu_model", "rental", "container_template").order_by("-created_at", "-id")


def rentals_for_buyer(*, buyer, live: bool | None = None):
    """The buyer's rentals, newest first, with their server and GPU model loaded. `live`: True for
    those starting or running, False for those that ended, None for all."""
    rentals = Rental.objects.filter(buyer=buyer)
    if live is True:
        rentals = rentals.exclude(state=RentalState.ENDED)
    elif live is False:
        rentals = rentals.filter(state=RentalState.ENDED)
    # The host key of the server's agent, for the connection's known_hosts line: in the same query.
    return (
        rentals.select_related("server", "gpu_model", "container_template")
        .annotate(server_host_key=F("server__agent__ssh_host_key")).order_by("-started_at", "-id")
    )


def rental_service_ports(rental: Rental) -> list[tuple[str, str]]:
    """A container rental's other ports as (its port, the server's), as text (never grouped like
    a number: 8888, not 8 888), by the container's port."""
    ports = rental.service_ports or {}
    return [(inside, str(ports[inside])) for inside in sorted(ports, key=int)]


def rental_takes_service_token(rental: Rental) -> bool:
    """Whether the rental's container gets a token to show its buyer: its template names a
    variable for it (Jupyter's JUPYTER_TOKEN)."""
    template = rental.container_template
    return bool(rental.service_token and template is not None and template.token_env
                and rental.state != RentalState.ENDED)


def rental_ssh_port(rental: Rental) -> int:
    """The port a buyer connects to: the rental's own sshd's, else (an older agent's login through
    the host's sshd) the server's."""
    return rental.ssh_port or rental.server.ssh_port


def bid_get_for_buyer(*, buyer, bid_id: int) -> Bid | None:
    """The bid if it is the buyer's, else None."""
    return bids_for_buyer(buyer=buyer).filter(pk=bid_id).first()


def rental_get_for_buyer(*, buyer, rental_id: int) -> Rental | None:
    """The rental if it is the buyer's, else None."""
    return rentals_for_buyer(buyer=buyer).filter(pk=rental_id).first()


def ssh_keys_for_buyer(*, buyer):
    return SshKey.objects.filter(buyer=buyer).order_by("name", "pk")


def ssh_key_get_for_buyer(*, buyer, key_id: int) -> SshKey | None:
    return SshKey.objects.filter(buyer=buyer, pk=key_id).first()


def price_alerts_for_buyer(*, buyer):
    """The buyer's price alerts, with their GPU model loaded, by model, size and threshold."""
    return (
        PriceAlert.objects.filter(buyer=buyer).select_related("gpu_model")
        .order_by("gpu_model__position", "gpu_model__name", "gpus", "threshold_usd", "id")
    )


def price_alert_get_for_buyer(*, buyer, alert_id: int) -> PriceAlert | None:
    """The alert if it is the buyer's, else None."""
    return price_alerts_for_buyer(buyer=buyer).filter(pk=alert_id).first()


def gpus_offered_below(*, gpu_model_id: int, price_usd: Decimal) -> int:
    """How many GPUs of one model active offers can sell now below `price_usd`. One query."""
    total = (
        offers_available()
        .filter(server__gpu_model_id=gpu_model_id, price_usd__lt=price_usd)
        .aggregate(gpus=Sum("available"))["gpus"]
    )
    return int(total or 0)


# --- a seller's servers, offers and rentals (the seller portal) ----------------------------------
# Each takes the seller's id and reaches that seller's servers only: another seller's id finds
# nothing.


@dataclass(frozen=True)
class ServerTotals:
    servers: int
    gpus: int
    gpus_rented: int


def server_totals(*, seller_id: int) -> ServerTotals:
    """The seller's servers that are not retired, their GPUs and the GPUs rented now. One query."""
    row = Server.objects.filter(seller_id=seller_id).exclude(status=ServerStatus.RETIRED).aggregate(
        servers=Count("pk"), gpus=Coalesce(Sum("gpu_count"), 0), rented=Coalesce(Sum("gpus_rented"), 0)
    )
    return ServerTotals(servers=row["servers"], gpus=row["gpus"], gpus_rented=row["rented"])


def servers_with_offers_for_seller(*, seller_id: int):
    """The seller's servers by name, with their GPU model and `active_offers` (a list, one at
    most). Two queries."""
    return (
        Server.objects.filter(seller_id=seller_id)
        .select_related("gpu_model")
        .prefetch_related(
            Prefetch(
                "offers", queryset=Offer.objects.filter(state=OfferState.ACTIVE), to_attr="active_offers"
            )
        )
        .order_by("name")
    )


def offer_get_for_seller(*, seller_id: int, offer_id: int) -> Offer | None:
    """The offer, with its server, if it is on one of the seller's servers, else None."""
    return Offer.objects.filter(server__seller_id=seller_id, pk=offer_id).select_related("server").first()


def offer_active_for_server(*, seller_id: int, server_id: int) -> Offer | None:
    """The active offer of the seller's server, with the server, or None (none, or not the
    seller's server)."""
    return (
        Offer.objects.filter(server__seller_id=seller_id, server_id=server_id, state=OfferState.ACTIVE)
        .select_related("server")
        .first()
    )


@dataclass(frozen=True)
class BookPlace:
    """Where an offer stands in the book of its GPU model."""

    best_ask: Decimal | None
    gpus_cheaper: int
    sells_now: bool  # a resting bid at or above its price exists


def offer_book_places(*, seller_id: int, offer_ids: Iterable[int]) -> dict[int, BookPlace]:
    """Where each of the seller's offers stands in the book of its GPU model, by offer id; other
    sellers' offers are left out. Three queries, whatever the number of offers: the offers, the
    price levels of their GPU models and their best bids."""
    offers = list(
        Offer.objects.filter(server__seller_id=seller_id, pk__in=list(offer_ids))
        .values_list("pk", "server__gpu_model_id", "price_usd")
    )
    if not offers:
        return {}
    model_ids = {gpu_model_id for _pk, gpu_model_id, _price in offers}
    levels: dict[int, list[tuple[Decimal, int]]] = defaultdict(list)
    for row in (
        offers_available().filter(server__gpu_model_id__in=model_ids)
        .values("server__gpu_model_id", "price_usd").annotate(gpus=Sum("available")).order_by()
    ):
        levels[row["server__gpu_model_id"]].append((row["price_usd"], row["gpus"]))
    best_bids = {
        row["gpu_model_id"]: Decimal(row["best"]).quantize(PRICE_TICK)
        for row in bids_open().filter(gpu_model_id__in=model_ids)
        .values("gpu_model_id").annotate(best=Max("max_price_usd")).order_by()
    }
    places = {}
    for pk, gpu_model_id, price_usd in offers:
        book = levels[gpu_model_id]
        best_bid = best_bids.get(gpu_model_id)
        places[pk] = BookPlace(
            best_ask=min((price for price, _gpus in book), default=None),
            gpus_cheaper=sum(gpus for price, gpus in book if price < price_usd),
            sells_now=best_bid is not None and best_bid >= price_usd,
        )
    return places


def offer_book_place(*, seller_id: int, offer_id: int) -> BookPlace | None:
    """Where the seller's offer stands in the book of its GPU model, or None when it is not the
    seller's. Three queries (`offer_book_places`)."""
    return offer_book_places(seller_id=seller_id, offer_ids=[offer_id]).get(offer_id)


@dataclass(frozen=True)
class AskPlace:
    """Where an ask at a given price would stand among the asks of its GPU model."""

    price: Decimal
    position: int  # 1 for the cheapest; asks at its price posted before it come first
    asks: int  # every ask of the book, this one included
    crossing_bid: Decimal | None  # the best resting bid it would trade with, at that bid's price


@dataclass(frozen=True)
class PricingHelp:
    """What a seller reads to price an offer of one GPU model: the best prices, the last trades,
    the median price of the last 24 hours (`trades_24h` trades, each counted once), and where the
    price typed would stand (None without a price)."""

    best_bid: Decimal | None
    best_ask: Decimal | None
    trades: list[Trade]
    median_24h: Decimal | None
    trades_24h: int
    market_open: bool
    listed: bool  # the server can sell now: active, its GPUs verified by its agent
    place: AskPlace | None


PRICING_HELP_TRADES = 5


def _cents(value) -> Decimal | None:
    return None if value is None else Decimal(value).quantize(PRICE_TICK, rounding=ROUND_HALF_UP)


def trades_median_price(*, gpu_model_id: int, since: datetime, until: datetime) -> tuple[Decimal | None, int]:
    """The median price of one GPU model's trades that started after `since` and up to `until`,
    each trade counted once, and how many there were: the middle price, or the mean of the two
    middle ones rounded half-up to the cent. (None, 0) without a trade. One query, whatever the
    number of trades: window functions number the prices and only the middle one or two rows
    come back."""
    rows = list(
        Rental.objects.filter(gpu_model_id=gpu_model_id, started_at__gt=since, started_at__lte=until)
        .annotate(
            rank=Window(RowNumber(), order_by=[F("price_usd").asc(), F("id").asc()]),
            total=Window(Count("id")),
        )
        .annotate(twice=F("rank") * 2)
        # The middle of n rows: the one (n odd) or two (n even) with n <= 2 * rank <= n + 2.
        .filter(twice__gte=F("total"), twice__lte=F("total") + 2)
        .values_list("price_usd", "total")
    )
    if not rows:
        return None, 0
    middle = sum((Decimal(price) for price, _total in rows), Decimal(0)) / len(rows)
    return _cents(middle), int(rows[0][1])


def offer_pricing_help(
    *, server: Server, price_usd: Decimal | None, gpus: int | None = None, offer: Offer | None = None,
    now: datetime | None = None,
) -> PricingHelp:
    """Pricing help for an offer of `server` (its GPU model's book) at `price_usd` for `gpus` GPUs
    (all the server's when None): the best bid and ask, the last trades, the median price of the
    last 24 hours, and where the price would stand among the asks. `offer` is the server's offer
    being changed: it is left out of the asks it is compared with and keeps its place in time.

    The bid it would trade with is the highest open bid at or above the price that the offer
    could fill (its GPUs on this one server, the bid's region and minimum reliability met), as
    matching picks it; the trade would be at that bid's price. Five queries."""
    now = now or timezone.now()
    gpu_model_id = server.gpu_model_id
    asks = offers_available().filter(server__gpu_model_id=gpu_model_id)
    if offer is not None:
        asks = asks.exclude(pk=offer.pk)
    figures = {"best": Min("price_usd"), "count": Count("pk")}
    if price_usd is not None:
        ahead = Q(price_usd__lt=price_usd) | Q(price_usd=price_usd)
        if offer is not None:  # a changed offer keeps its time: equal prices posted after it come after
            ahead = Q(price_usd__lt=price_usd) | Q(price_usd=price_usd, created_at__lt=offer.created_at)
        figures["ahead"] = Count("pk", filter=ahead)
    book = asks.aggregate(**figures)
    bid_figures = {"best": Max("max_price_usd")}
    if price_usd is not None:
        free = min(gpus or server.gpu_count, server.gpu_count) - server.gpus_rented
        reliable = Q(min_reliability__isnull=True)
        if server.reliability is not None:
            reliable |= Q(min_reliability__lte=server.reliability)
        bid_figures["crossing"] = Max("max_price_usd", filter=Q(
            Q(max_price_usd__gte=price_usd, gpus__lte=free) & Q(region__in=["", server.region]) & reliable
        ))
    bids = bids_open(gpu_model_id=gpu_model_id, now=now).aggregate(**bid_figures)
    median, count = trades_median_price(gpu_model_id=gpu_model_id, since=now - timedelta(hours=24), until=now)
    place = None
    if price_usd is not None:
        place = AskPlace(
            price=price_usd, position=int(book["ahead"]) + 1, asks=int(book["count"]) + 1,
            crossing_bid=_cents(bids["crossing"]),
        )
    return PricingHelp(
        best_bid=_cents(bids["best"]), best_ask=_cents(book["best"]),
        trades=trades_recent(gpu_model_id=gpu_model_id, limit=PRICING_HELP_TRADES),
        median_24h=median, trades_24h=count, market_open=market_is_open(),
        listed=server.status == ServerStatus.ACTIVE and server.agent_verified_at is not None,
        place=place,
    )


def offers_for_seller(*, seller_id: int):
    """Every offer on the seller's servers (active and withdrawn), newest first, with its server
    and GPU model loaded."""
    return (
        Offer.objects.filter(server__seller_id=seller_id)
        .select_related("server__gpu_model")
        .order_by("-created_at", "-id")
    )


def buyer_alias(*, buyer_id: int, seller_id: int) -> str:
    """An anonymous, stable id of a buyer as one seller sees them: the same buyer gets another id
    at another seller."""
    # The salt names the module this lived in first: changing it would change every alias.
    digest = salted_hmac("sellers.buyer_alias", f"{buyer_id}:{seller_id}").hexdigest()
    return digest[:8].upper()


def rentals_on_seller_servers(*, seller_id: int):
    """Every rental on the seller's servers, newest first, with its server and GPU model loaded.
    Who the buyer is stays out of what a seller sees: show `buyer_alias` instead."""
    return (
        Rental.objects.filter(server__seller_id=seller_id)
        .select_related("server", "gpu_model")
        .order_by("-started_at", "-id")
    )


def rentals_for_seller(*, seller_id: int, limit: int = 200) -> tuple[list[Rental], list[Rental]]:
    """(running, past) rentals on the seller's servers, newest first (the latest `limit` past
    ones), each with `buyer_alias` in place of who the buyer is. Two queries."""
    rentals = rentals_on_seller_servers(seller_id=seller_id)
    running = list(rentals.exclude(state=RentalState.ENDED).order_by("-started_at", "-id"))
    past = list(rentals.filter(state=RentalState.ENDED).order_by("-started_at", "-id")[:limit])
    for rental in running + past:
        rental.buyer_alias = buyer_alias(buyer_id=rental.buyer_id, seller_id=seller_id)
    return running, past


@dataclass(frozen=True)
class Utilisation:
    start: datetime  # midnight, in the current time zone, six days before today
    end: datetime  # the end of the current hour: today's partial day is included
    days_end: datetime  # midnight after today: the chart's right edge
    gpus: int  # the seller's GPUs now (not retired servers)
    shares: list[float]  # per hour from `start` to `end`: the share (0..1) of the GPUs rented
    average: float
    peak: float


UTILISATION_DAYS = 7


def _local_midnight(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, datetime.min.time()))


def _seconds_rented_per_hour(
    rows, *, start: datetime, hours: int, end: datetime, now: datetime
) -> list[float]:
    """GPU-seconds rented in each of the `hours` hours from `start` to `end`, from (started_at,
    ended_at, gpus)."""
    rented = [0.0] * hours
    for started_at, ended_at, count in rows:
        begin, finish = max(started_at, start), min(ended_at or now, end, now)
        while begin < finish:
            index = int((begin - start).total_seconds() // 3600)
            step_end = min(finish, start + timedelta(hours=index + 1))
            rented[index] += (step_end - begin).total_seconds() * count
            begin = step_end
    return rented


def seller_utilisation(
    *, seller_id: int, now: datetime | None = None, gpus: int | None = None
) -> Utilisation:
    """The hourly share of the seller's GPUs rented over the past 7 days, today included (from
    midnight six days ago, in the current time zone, to the end of the current hour): GPU-seconds
    rented in each hour over GPU-seconds available (`gpus`, else the seller's GPUs now); the current
    hour over the part of it gone by. Two queries (one for the rentals, one for the GPU total when
    `gpus` is not given)."""
    now = now or timezone.now()
    today = timezone.localtime(now).date()
    start = _local_midnight(today - timedelta(days=UTILISATION_DAYS - 1))
    days_end = _local_midnight(today + timedelta(days=1))
    hours = int((now - start).total_seconds() // 3600) + 1
    end = start + timedelta(hours=hours)
    if gpus is None:
        gpus = server_totals(seller_id=seller_id).gpus
    rows = Rental.objects.filter(server__seller_id=seller_id, started_at__lt=end).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=start)
    ).values_list("started_at", "ended_at", "gpus")
    rented = _seconds_rented_per_hour(rows, start=start, hours=hours, end=end, now=now)
    current_hour = (now - (end - timedelta(hours=1))).total_seconds() or 1.0
    capacities = [gpus * 3600.0] * (hours - 1) + [gpus * current_hour]
    shares = [
        min(1.0, seconds / capacity) if capacity else 0.0
        for seconds, capacity in zip(rented, capacities, strict=True)
    ]
    return Utilisation(
        start=start, end=end, days_end=days_end, gpus=gpus, shares=shares,
        average=sum(shares) / len(shares), peak=max(shares),
    )


# --- the watch over the host agents (billing.services.agents_check reads these) ------------------

LIVE_RENTAL_STATES = (RentalState.STARTING, RentalState.RUNNING)


@dataclass(frozen=True)
class SilentServer:
    """A server whose agent has gone quiet: `last_heard_at` is its agent's last heartbeat (None for
    a server never heard, whose silence counts from `first_rental_at`, its oldest live rental's start)."""

    server_id: int
    last_heard_at: datetime | None
    first_rental_at: datetime | None

    @property
    def silent_since(self) -> datetime:
        return self.last_heard_at or self.first_rental_at


def servers_gone_silent(*, heard_before: datetime) -> list[SilentServer]:
    """Servers to judge unreachable, in id order: not judged yet (`unreachable_since` empty), whose
    agent was last heard before `heard_before` and which hold a live rental or are verified (listed,
    or listable); and servers never heard whose oldest live rental started before `heard_before`.
    Retired servers only for their rentals. One query, whatever the number of servers."""
    live = Rental.objects.filter(server=OuterRef("pk"), state__in=LIVE_RENTAL_STATES)
    first_rental = live.order_by("started_at").values("started_at")[:1]
    heard_and_quiet = Q(
        agent__isnull=False, agent__unreachable_since__isnull=True, agent__last_heartbeat_at__lt=heard_before
    ) & (Q(Exists(live)) | (Q(agent_verified_at__isnull=False) & ~Q(status=ServerStatus.RETIRED)))
    never_heard = Q(agent__isnull=True) & Q(Exists(live.filter(started_at__lt=heard_before)))
    rows = (
        Server.objects.filter(heard_and_quiet | never_heard)
        .annotate(first_rental_at=Subquery(first_rental))
        .order_by("pk")
        .values_list("pk", "agent__last_heartbeat_at", "first_rental_at")
    )
    return [
        SilentServer(server_id=pk, last_heard_at=heard, first_rental_at=first) for pk, heard, first in rows
    ]


@dataclass(frozen=True)
class GpuFailure:
    """A live rental holding GPUs that its server's last report shows missing or with uncorrected
    ECC errors; `reported_at` is that report's time."""

    rental_id: int
    server_id: int
    indices: list[int]
    reasons: dict[int, str]  # index -> "missing" or "ecc"
    reported_at: datetime


def _gpu_fault(gpus_seen: dict[int, dict], index: int) -> str:
    """Why the GPU `index` is not fit for a rental ("" when it is): absent from the report, or with
    uncorrected ECC errors. An ECC count the GPU does not report (null) is no error."""
    seen = gpus_seen.get(index)
    if seen is None:
        return "missing"
    ecc = seen.get("ecc_uncorrected")
    if isinstance(ecc, int) and not isinstance(ecc, bool) and ecc > 0:
        return "ecc"
    return ""


def rental_gpus_failed(*, heard_since: datetime) -> list[GpuFailure]:
    """Live rentals whose GPUs the last report of their server's agent shows failed (missing from
    it, or with uncorrected ECC errors), judged only on a fresh report: heard at `heard_since` or
    later, server not judged unreachable. In rental id order; two queries, whatever the number of
    servers or rentals. A report whose `nvidia-smi` failed or printed lines the agent could not read
    (`gpu_error`) judges nothing: a GPU missing from it may only be unread, and a buyer's rental is
    not ended on a reading error (the server's offer is withdrawn meanwhile, as for any mismatch)."""
    slots = RentalGpu.objects.filter(
        released_at__isnull=True, rental__state__in=LIVE_RENTAL_STATES,
        server__agent__last_heartbeat_at__gte=heard_since, server__agent__unreachable_since__isnull=True,
        server__agent__gpu_error="",
    )
    held: dict[int, list[tuple[int, int]]] = defaultdict(list)  # server -> [(rental, index)]
    for rental_id, server_id, index in slots.order_by("rental_id", "index").values_list(
        "rental_id", "server_id", "index"
    ):
        held[server_id].append((rental_id, index))
    if not held:
        return []
    failures: dict[int, GpuFailure] = {}
    for server_id, gpus, reported_at in ServerAgent.objects.filter(server_id__in=held).values_list(
        "server_id", "gpus", "last_heartbeat_at"
    ):
        seen = {gpu.get("index"): gpu for gpu in gpus or [] if isinstance(gpu, dict)}
        for rental_id, index in held[server_id]:
            fault = _gpu_fault(seen, index)
            if not fault:
                continue
            failure = failures.setdefault(rental_id, GpuFailure(
                rental_id=rental_id, server_id=server_id, indices=[], reasons={}, reported_at=reported_at
            ))
            failure.indices.append(index)
            failure.reasons[index] = fault
    return [failures[rental_id] for rental_id in sorted(failures)]


def _strength(name: str) -> Case:
    """A level column as its rank in LEVELS_BY_STRENGTH: 0 for the strongest."""
    ranks = (When(**{name: level}, then=Value(rank)) for rank, level in enumerate(LEVELS_BY_STRENGTH))
    return Case(*ranks, output_field=IntegerField())


def rentals_isolation_lost() -> list[int]:
    """Ids of the live rentals sold with a stronger isolation level than their server now has,
    while another live rental shares the server (alone on it, a rental keeps running: there is no
    one to be isolated from), in id order. A container rental on a server whose runtime only
    stopped answering (`containers_paused`) keeps running: its container holds. One query."""
    others = Rental.objects.filter(server_id=OuterRef("server_id"), state__in=LIVE_RENTAL_STATES).exclude(
        pk=OuterRef("pk")
    )
    return list(
        Rental.objects.filter(state__in=LIVE_RENTAL_STATES)
        .alias(sold=_strength("isolation_level"), now=_strength("server__isolation_level"),
               shared=Exists(others))
        .filter(now__gt=F("sold"), shared=True)
        .exclude(isolation_level=IsolationLevel.CONTAINER, server__containers_paused=True)
        .order_by("pk").values_list("pk", flat=True)
    )


def rentals_delivery_refused() -> list[int]:
    """Ids of the starting rentals whose agent reported it cannot deliver them, in id order."""
    return list(
        Rental.objects.filter(
            state=RentalState.STARTING, delivered_at__isnull=True, delivery_refused_at__isnull=False
        ).order_by("pk").values_list("pk", flat=True)
    )


def rentals_undelivered(*, started_before: datetime) -> list[int]:
    """Ids of the starting rentals whose login is still not ready and that started before
    `started_before`, in id order. One query."""
    return list(
        Rental.objects.filter(
            state=RentalState.STARTING, delivered_at__isnull=True, started_at__lt=started_before
        ).order_by("pk").values_list("pk", flat=True)
    )


@dataclass(frozen=True)
class ReliabilityDay:
    """One day of a server's availability: minutes listed, minutes of those with heartbeats, and
    their share (None for a day with no listed minute)."""

    day: date
    listed_minutes: int
    heard_minutes: int
    share: Decimal | None


def server_reliability_history(
    *, server: Server, days: int = 30, today: date | None = None
) -> list[ReliabilityDay]:
    """The server's last `days` days up to `today` (UTC), newest first, each with its listed and
    heard minutes (zero on a day with no record). One query."""
    today = today or timezone.now().astimezone(UTC).date()
    first = today - timedelta(days=days - 1)
    rows = ServerAvailabilityDay.objects.filter(server=server, day__gte=first, day__lte=today)
    recorded = {row.day: row for row in rows}
    history = []
    for offset in range(days):
        day = today - timedelta(days=offset)
        row = recorded.get(day)
        listed, heard = (row.listed_minutes, row.heard_minutes) if row else (0, 0)
        history.append(ReliabilityDay(day=day, listed_minutes=listed, heard_minutes=heard,
                                      share=share_of(heard, listed)))
    return history


SHARE_PLACES = Decimal("0.001")


def share_of(part: int, whole: int) -> Decimal | None:
    """`part / whole` rounded half-up to three places (the precision of a reliability), None when
    `whole` is zero."""
    if not whole:
        return None
    return (Decimal(part) / Decimal(whole)).quantize(SHARE_PLACES, rounding=ROUND_HALF_UP)


# --- the host agent's heartbeat ------------------------------------------------------------------


@dataclass(frozen=True)
class DesiredRental:
    """A rental that must have a login on its server now, with the GPU indices it holds."""

    rental_id: int
    ssh_public_key: str
    delivered: bool
    gpu_indices: list[int]
    isolation_level: str = IsolationLevel.WHOLE  # what the rental was sold with
    ssh_port: int | None = None  # its own sshd's port, as last reported
    template_id: int | None = None  # the container template it runs
    service_ports: dict = field(default_factory=dict)  # its container's other ports on the server
    service_token: str = ""  # a container rental's secret, for a template that takes one


@dataclass(frozen=True)
class DesiredTemplate:
    """A container template the server's agent may need: a published one (pulled while idle) or
    one a live rental of the server runs."""

    id: int
    image: str
    ports: list[int]
    key_path: str
    command: list[str]
    min_driver: str
    token_env: str = ""

    @property
    def digest(self) -> str:
        return self.image.rsplit("@", 1)[1]


@dataclass(frozen=True)
class HeartbeatCaller:
    """Who sends a heartbeat: the live agent token, with its server, the server's GPU model and
    agent row (None before the first heartbeat), the rentals the server must host now and the
    container templates its agent may need."""

    token: AgentToken
    desired: list[DesiredRental]
    templates: list[DesiredTemplate] = field(default_factory=list)


@functools.cache
def _heartbeat_caller_query() -> tuple[str, list[ModelColumns]]:
    """The SQL of `heartbeat_caller` and the models of its columns, written once per process."""
    parts = [ModelColumns(AgentToken, "t"), ModelColumns(Server, "s"), ModelColumns(GpuModel, "m"),
             ModelColumns(ServerAgent, "a")]
    token, server, gpu_model, agent = (part.model._meta.db_table for part in parts)
    slot, rental = RentalGpu._meta.db_table, Rental._meta.db_table
    # Table and column names come from the models; the secret's hash and the states are parameters.
    desired = (
        "SELECT coalesce(json_agg(json_build_array(w.id, w.ssh_public_key, w.delivered, w.indices, "  # noqa: S608
        "w.isolation_level, w.ssh_port, w.container_template_id, w.service_ports, w.service_token) "
        "ORDER BY w.id), '[]') "
        "FROM (SELECT r.id, r.ssh_public_key, r.isolation_level, r.ssh_port, r.container_template_id, "
        "r.service_ports, r.service_token, "
        "r.delivered_at IS NOT NULL AS delivered, array_agg(g.index ORDER BY g.index) AS indices "
        f"FROM {slot} g JOIN {rental} r ON r.id = g.rental_id "
        "WHERE g.server_id = s.id AND g.released_at IS NULL AND r.state IN (%s, %s) "
        "AND r.paid_through IS NOT NULL GROUP BY r.id) w"
    )
    template = ContainerTemplate._meta.db_table
    templates = (
        "SELECT coalesce(json_agg(json_build_array(c.id, c.image, c.ports, c.key_path, c.command, "  # noqa: S608
        "c.min_driver, c.token_env) ORDER BY c.position, c.slug), '[]') "
        f"FROM {template} c WHERE c.published OR EXISTS ("
        f"SELECT FROM {rental} u WHERE u.container_template_id = c.id AND u.server_id = s.id "
        "AND u.state IN (%s, %s))"
    )
    sql = (
        f"SELECT {', '.join(part.select() for part in parts)}, ({desired}), ({templates}) "  # noqa: S608
        f"FROM {token} t "
        f"JOIN {server} s ON s.id = t.server_id JOIN {gpu_model} m ON m.id = s.gpu_model_id "
        f"LEFT JOIN {agent} a ON a.server_id = s.id WHERE t.key_hash = %s AND t.revoked_at IS NULL"
    )
    return sql, parts


def heartbeat_caller(*, secret: str) -> HeartbeatCaller | None:
    """The live agent token of `secret` with everything its heartbeat needs, or None (unknown,
    revoked, not an agent token). One query, whatever the number of rentals, written by hand once:
    every server's agent calls every 30 s, and the ORM's compiling would cost more than running it
    (marketplace.sql)."""
    if not secret.startswith("evxa_") or len(secret) > 100:
        return None
    if connection.vendor != "postgresql":
        return _heartbeat_caller_portable(secret=secret)
    sql, parts = _heartbeat_caller_query()
    with prepared_cursor() as cursor:
        live = [RentalState.STARTING, RentalState.RUNNING]
        cursor.execute(sql, [*live, *live, token_secret_hash(secret)])
        row = cursor.fetchone()
    if row is None:
        return None
    token, server, gpu_model, agent = row_split(row, parts)
    server.gpu_model = gpu_model
    Server.agent.related.set_cached_value(server, agent)  # None too: no agent yet, no query to say so
    token.server = server
    desired, templates = (json.loads(value) if isinstance(value, str) else value for value in row[-2:])
    return HeartbeatCaller(token=token, desired=[
        DesiredRental(rental_id=rental_id, ssh_public_key=key, delivered=delivered, gpu_indices=indices,
                      isolation_level=level, ssh_port=port, template_id=template_id, service_ports=ports,
                      service_token=service_token)
        for rental_id, key, delivered, indices, level, port, template_id, ports, service_token in desired
    ], templates=[DesiredTemplate(*fields) for fields in templates])


def _heartbeat_caller_portable(*, secret: str) -> HeartbeatCaller | None:
    """`heartbeat_caller` through the ORM, in two queries: for the embedded default's SQLite,
    which has neither json_agg nor array_agg."""
    token = agent_token_find(secret=secret)
    if token is None:
        return None
    slots = (
        RentalGpu.objects.filter(
            server_id=token.server_id, released_at__isnull=True,
            rental__state__in=(RentalState.STARTING, RentalState.RUNNING), rental__paid_through__isnull=False,
        )
        .order_by("rental_id", "index")
        .values_list("rental_id", "rental__ssh_public_key", "rental__delivered_at", "index",
                     "rental__isolation_level", "rental__ssh_port", "rental__container_template_id",
                     "rental__service_ports", "rental__service_token")
    )
    desired: dict[int, DesiredRental] = {}
    for rental_id, key, delivered_at, index, level, port, template_id, ports, service_token in slots:
        rental = desired.setdefault(rental_id, DesiredRental(
            rental_id=rental_id, ssh_public_key=key, delivered=delivered_at is not None, gpu_indices=[],
            isolation_level=level, ssh_port=port, template_id=template_id, service_ports=ports,
            service_token=service_token))
        rental.gpu_indices.append(index)
    used = {rental.template_id for rental in desired.values() if rental.template_id is not None}
    templates = [
        DesiredTemplate(id=template.pk, image=template.image, ports=template.ports,
                        key_path=template.key_path, command=template.command, min_driver=template.min_driver,
                        token_env=template.token_env)
        for template in ContainerTemplate.objects.filter(Q(published=True) | Q(pk__in=used))
    ]
    return HeartbeatCaller(token=token, desired=list(desired.values()), templates=templates)
