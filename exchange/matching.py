"""The matching engine: continuous, price-time priority, all-or-none bids, one GPU model at a time.

One pass for one GPU model (`market_match`):

1. Take the market lock of the model (below). While the market is closed, stop there.
2. Read the open bids of the model that could trade, those at or above the best ask (the
   others cannot match: a pass only takes GPUs away), best first: highest maximum price, then
   oldest (`created_at`, then id). Bids among them whose `expires_at` has passed are marked
   EXPIRED and skipped (`bids_expire` marks the others every minute). Reading only these keeps
   a pass as cheap with thousands of bids resting below the asks as with none.
3. Read the offers that could fill any of them (active offers of active servers of that model,
   priced at or below the best bid, with enough free GPUs) cheapest first, then oldest, locking
   their servers' rows: a chunk at a time, and the next chunk only when a bid has found no
   offer among those read (`_Candidates`), so that a pass costs what it matches, not the depth
   of the book.
4. For each bid in turn: the first offer whose server has `bid.gpus` free GPUs (all on that one
   server: a bid fills entirely with one rental or not at all), at or below the bid's maximum
   price, in the bid's region if it names one, with at least the bid's minimum reliability if it
   sets one, at one of the isolation levels the bid accepts (and, at a server sold as
   "container", whose agent holds the bid's container template); a server sold as a "whole server"
   fills only a bid of all its GPUs (a match takes all its indices, so the host agent's one
   holder per index keeps a second rental out). A bid that no single server can fill is passed
   over: the next bid may still match (all-or-none orders never block the book).
5. The trade price is the resting order's price. The taker (`incoming_bid_id` or
   `incoming_offer_id`) is the order that has just arrived or changed: an incoming bid pays the
   offer's price; an incoming (new, grown or cheaper) offer gets the bid's price. When both
   orders were resting (the market opens, a rental ends and frees GPUs) the older order sets the
   price (the offer's price when both have the same `created_at`).
6. The buyer must be able to pay the first hour at that price (`payments.first_hour_payable`,
   which billing provides). If not, the bid is cancelled (INSUFFICIENT_BALANCE) and matching
   goes on with the next bid; the pass returns the cancelled bids, and the services email their
   buyers after commit (`exchange.services.market_match_notify`).
7. A match fills the bid, adds the GPUs to `server.gpus_rented` (a CHECK constraint keeps it
   within `gpu_count`, the backstop should anything else go wrong), creates a STARTING rental
   at the trade price and the server's isolation level, and gives it the lowest free GPU indices
   of the server (`RentalGpu`, whose partial unique index refuses two live holders of one
   index). The exchange never moves money:
   billing charges the rental; the server's host agent creates its login, and it runs once both
   are done (`exchange.services.agents`).

One pass reaches a fixed point: later matches only take GPUs away, so a bid passed over earlier
in the pass could not match later in it.

Concurrency
-----------
Matching for one GPU model runs one at a time. On PostgreSQL the market lock is a transaction
advisory lock, `pg_advisory_xact_lock(MARKET_LOCK_NAMESPACE, gpu_model_id)`; different models
take different locks and match in parallel. On SQLite (the embedded default) there is no such
lock and none is needed: writers are serialised for the whole transaction (BEGIN IMMEDIATE).
Every write to the book of a model (placing or cancelling a bid, posting, changing or withdrawing
an offer, ending a rental, a matching pass) takes the model's market lock first, so a pass sees a
book nobody else is changing; the conditional updates of bids (`state = open`) cover the one
writer that does not wait for it (`bids_expire`, which skips locked rows).

LOCK ORDER, everywhere, so that no two transactions ever wait for each other in a circle:

    rental row  ->  wallet rows (billing)  ->  market lock of the GPU model
                ->  server rows, by ascending id  ->  offer and bid rows

(A matching pass locks the servers of its candidate offers in price-time order instead: it
holds the market lock of their model, which every other writer that may wait while holding one
of those rows takes first. `exchange.services.server_edit`, the seller's change of a server, takes
the market locks of its old and new GPU models, by ascending id, before the server's row.)

Billing charges a rental holding its row, then the wallet, then calls `rental_end`, which takes
the market lock and then the server row. A buyer's own order (`billing.services.order_place`)
locks the buyer's wallet before `bid_place` takes the market lock, and charges the first hour
of the rental its pass made in the same transaction. The first-hour check that billing registers
for the other bids of a pass runs while the market lock is held, so it only reads wallets and
never locks them.
"""

import functools
import logging
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal

from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from marketplace.sql import ModelColumns, insert_parts, prepared_cursor, row_split
from sellers.isolation import IsolationLevel, levels_of_text
from sellers.models import Seller, Server, ServerStatus, ServerTemplate

from .models import Bid, BidCancelReason, BidState, Market, Offer, OfferState, Rental, RentalGpu, RentalState
from .payments import first_hour_payable
from .selectors import bids_crossing, offers_available

logger = logging.getLogger(__name__)

# First key of the two-int advisory lock: "EXM" (exchange market). The second is the GPU model id.
MARKET_LOCK_NAMESPACE = 0x45584D


@dataclass
class MatchResult:
    """What one pass did: the rentals it created (in the order it created them) and the bids it
    cancelled because the buyer could not pay the first hour, or found expired."""

    rentals: list[Rental] = field(default_factory=list)
    cancelled_bid_ids: list[int] = field(default_factory=list)
    expired_bid_ids: list[int] = field(default_factory=list)


# The version of the model's book goes up with the lock, in one statement: whoever takes the lock
# is about to change the book, and the new version becomes visible when (and only if) the change
# commits. The row is inserted from the lock's own result, so the lock is always taken first.
_LOCK_AND_BUMP_POSTGRESQL = """
    WITH locked AS (SELECT pg_advisory_xact_lock(%s::integer, %s::integer))
    INSERT INTO exchange_marketbook (gpu_model_id, version) SELECT %s, 1 FROM locked
    ON CONFLICT (gpu_model_id) DO UPDATE SET version = exchange_marketbook.version + 1
"""
_BUMP = """
    INSERT INTO exchange_marketbook (gpu_model_id, version) VALUES (%s, 1)
    ON CONFLICT (gpu_model_id) DO UPDATE SET version = exchange_marketbook.version + 1
"""


def market_lock(*, gpu_model_id: int) -> None:
    """Take the market lock of one GPU model until the end of the current transaction, and bump
    the version of its book (`MarketBook`): every writer of the book calls this first, so it is
    the one place that tells cached pages the book changed. Taking it again in the same
    transaction waits for nothing (PostgreSQL counts it) and bumps the version once more."""
    if not connection.in_atomic_block:
        raise RuntimeError("The market lock is held by a transaction: call it inside transaction.atomic().")
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                _LOCK_AND_BUMP_POSTGRESQL, [MARKET_LOCK_NAMESPACE, int(gpu_model_id), int(gpu_model_id)]
            )
        else:
            cursor.execute(_BUMP, [int(gpu_model_id)])


def _market_open() -> bool:
    return Market.objects.filter(pk=Market.SINGLETON_ID, is_open=True).exists()


def _trade_price(
    bid: Bid, offer: Offer, *, incoming_bid_id: int | None, incoming_offer_id: int | None
) -> Decimal:
    """The resting order's price (see the module's docstring)."""
    if bid.pk == incoming_bid_id:
        return offer.price_usd
    if offer.pk == incoming_offer_id:
        return bid.max_price_usd
    return offer.price_usd if offer.created_at <= bid.created_at else bid.max_price_usd


@functools.cache
def _candidates_query() -> tuple[str, list[ModelColumns]]:
    """The statement of `_candidates_read`, written once per process from the models' columns."""
    parts = [ModelColumns(Offer, "o"), ModelColumns(Server, "s"), ModelColumns(Seller, "se")]
    sql = (
        f"SELECT {', '.join(part.select() for part in parts)}, "  # noqa: S608 (the models' columns)
        "least(o.gpus_offered, s.gpu_count) - s.gpus_rented, "
        # The indices each server's live rentals hold (see `free_indices`).
        "ARRAY(SELECT g.index FROM exchange_rentalgpu g WHERE g.server_id = o.server_id "
        "AND g.released_at IS NULL), "
        # The container templates its agent holds (`_isolation_fits`).
        "ARRAY(SELECT h.template_id FROM sellers_servertemplate h WHERE h.server_id = o.server_id) "
        "FROM exchange_offer o JOIN sellers_server s ON s.id = o.server_id "
        "JOIN sellers_seller se ON se.id = s.seller_id "
        "WHERE o.state = %s AND s.status = %s AND s.agent_verified_at IS NOT NULL "
        "AND s.gpu_model_id = %s AND o.price_usd <= %s "
        "AND least(o.gpus_offered, s.gpu_count) - s.gpus_rented >= %s "
        "AND (o.price_usd, o.created_at, o.id) > (%s, %s, %s) "
        "ORDER BY o.price_usd, o.created_at, o.id LIMIT %s FOR UPDATE OF s"
    )
    return sql, parts


# Before every offer in price-time order: prices are positive.
_BEFORE_ALL = (Decimal(0), datetime(1970, 1, 1, tzinfo=UTC), 0)


def _candidates_read(*, gpu_model_id: int, max_price: Decimal, min_gpus: int,
                     after: tuple | None, limit: int) -> list[Offer]:
    """The next `limit` offers of the model after `after` (price, created_at, id) in price-time
    order, at or below `max_price` with at least `min_gpus` GPUs available, their servers' rows
    locked, each offer with its server and seller and the indices its server's rentals hold.
    One prepared statement, written out: a pass reads this once or more, and compiling it through
    the ORM cost more than running it."""
    sql, parts = _candidates_query()
    with prepared_cursor() as cursor:
        cursor.execute(sql, [OfferState.ACTIVE, ServerStatus.ACTIVE, gpu_model_id, max_price, min_gpus,
                             *(after or _BEFORE_ALL), limit])
        rows = cursor.fetchall()
    offers = []
    for row in rows:
        offer, server, seller = row_split(row, parts)
        server.seller = seller
        offer.server = server
        offer.available, offer.held, server.template_ids = row[-3], row[-2], set(row[-1])
        offers.append(offer)
    return offers


def _candidates_read_portable(*, gpu_model_id: int, max_price: Decimal, min_gpus: int,
                              after: tuple | None, limit: int) -> list[Offer]:
    """`_candidates_read` through the ORM, for the embedded default's SQLite (no arrays; its
    writers are serialised, so nothing is locked)."""
    query = (
        offers_available()
        .filter(server__gpu_model_id=gpu_model_id, price_usd__lte=max_price, available__gte=min_gpus)
        .select_related("server__seller")  # the seller, whose earnings billing credits
        .order_by("price_usd", "created_at", "id")
    )
    if after is not None:
        price, created_at, pk = after
        query = query.filter(
            Q(price_usd__gt=price) | Q(price_usd=price, created_at__gt=created_at)
            | Q(price_usd=price, created_at=created_at, id__gt=pk)
        )
    offers = list(query[:limit])
    held: dict[int, set[int]] = {}
    for server_id, template_id in ServerTemplate.objects.filter(
        server_id__in={offer.server_id for offer in offers}
    ).values_list("server_id", "template_id"):
        held.setdefault(server_id, set()).add(template_id)
    for offer in offers:
        offer.server.template_ids = held.get(offer.server_id, set())
    return offers


class _Candidates:
    """The offers that could fill some bid of a pass, in price-time order, read (and their servers'
    rows locked) a chunk at a time. `available` on each offer = GPUs it can sell right now; the
    pass lowers it as it matches and drops sold-out offers."""

    # Most bids fill from the first offers: a small first chunk locks few servers; the next are
    # larger, for the passes that walk a deeper book.
    FIRST_CHUNK = 4
    CHUNK = 25

    def __init__(self, *, gpu_model_id: int, max_price: Decimal, min_gpus: int):
        self.gpu_model_id, self.max_price, self.min_gpus = gpu_model_id, max_price, min_gpus
        self.offers: list[Offer] = []
        self.last: Offer | None = None  # the last offer read, where the next chunk starts
        self.exhausted = False
        self._free: dict[int, list[int]] = {}

    def _read_more(self) -> None:
        size = self.CHUNK if self.last is not None else self.FIRST_CHUNK
        after = (self.last.price_usd, self.last.created_at, self.last.pk) if self.last is not None else None
        read = _candidates_read if connection.vendor == "postgresql" else _candidates_read_portable
        chunk = read(gpu_model_id=self.gpu_model_id, max_price=self.max_price, min_gpus=self.min_gpus,
                     after=after, limit=size)
        self._held_keep(chunk)
        self.offers += chunk
        self.last = chunk[-1] if chunk else self.last
        self.exhausted = len(chunk) < size

    def first_for(self, bid: Bid) -> Offer | None:
        """The first offer, in price-time order, with `bid.gpus` free GPUs at or below the bid's
        price, in its region if it names one, with its reliability and isolation."""
        index = 0
        while True:
            for offer in self.offers[index:]:
                if offer.price_usd > bid.max_price_usd:
                    return None  # cheapest first: nothing further is cheap enough
                if (
                    offer.available >= bid.gpus
                    and (not bid.region or offer.server.region == bid.region)
                    and _reliable_enough(offer.server, bid.min_reliability)
                    and _isolation_fits(offer.server, bid)
                ):
                    return offer
            if self.exhausted:
                return None
            index = len(self.offers)
            self._read_more()

    def free_indices(self, server: Server) -> list[int]:
        """The indices of the server's GPUs no live rental holds, lowest first, read once per server
        and pass (the server's row is locked: nobody else assigns its GPUs meanwhile)."""
        if server.pk not in self._free:
            held = set(
                RentalGpu.objects.filter(server_id=server.pk, released_at__isnull=True).values_list(
                    "index", flat=True
                )
            )
            self._free[server.pk] = [index for index in range(server.gpu_count) if index not in held]
        return self._free[server.pk]

    def _held_keep(self, chunk: list[Offer]) -> None:
        """Keep the indices held on each server of a chunk read with them (PostgreSQL): all that
        `free_indices` would read, read by the time the server's row was locked."""
        for offer in chunk:
            if hasattr(offer, "held") and offer.server_id not in self._free:
                held = set(offer.held)
                self._free[offer.server_id] = [i for i in range(offer.server.gpu_count) if i not in held]

    def sold(self, offer: Offer, gpus: int) -> list[int]:
        """Take `gpus` GPUs of the offer's server: returns their indices."""
        free = self.free_indices(offer.server)
        taken, self._free[offer.server.pk] = free[:gpus], free[gpus:]
        offer.server.gpus_rented += gpus
        offer.available -= gpus
        if offer.available <= 0:
            self.offers.remove(offer)
        return taken


def _reliable_enough(server: Server, minimum: Decimal | None) -> bool:
    """A bid's minimum reliability: a server without a score yet ("new") does not meet one."""
    return minimum is None or (server.reliability is not None and server.reliability >= minimum)


def _isolation_fits(server: Server, bid: Bid) -> bool:
    """The server is sold at a level the bid accepts, and a "whole server" only to a bid of all its
    GPUs."""
    if server.isolation_level not in levels_of_text(bid.isolation_levels):
        return False
    if server.isolation_level == IsolationLevel.CONTAINER and bid.container_template_id is not None:
        return bid.container_template_id in server.template_ids
    return server.isolation_level != IsolationLevel.WHOLE or bid.gpus == server.gpu_count


# A match's writes on PostgreSQL, in one statement: the bid filled (conditional: `bids_expire` does
# not wait for the market lock), its GPUs added to the server, the rental and its GPU slots; nothing
# when the bid is no longer open.
_MATCH_WRITE_POSTGRESQL = """
    WITH filled AS (
        UPDATE exchange_bid SET state = %s, updated_at = %s WHERE id = %s AND state = %s RETURNING id
    ), rented AS (
        UPDATE sellers_server SET gpus_rented = gpus_rented + %s WHERE id = %s AND EXISTS (SELECT FROM filled)
    ), rental AS (
        INSERT INTO exchange_rental ({columns}) SELECT {values} FROM filled RETURNING id
    ), slots AS (
        INSERT INTO exchange_rentalgpu (rental_id, server_id, index, released_at)
        SELECT rental.id, %s, slot, NULL FROM rental, unnest(%s::smallint[]) AS slot
    )
    SELECT id FROM rental
"""


def _match_write(
    *, bid: Bid, offer: Offer, price: Decimal, now: datetime, indices: list[int], slots: list[RentalGpu]
) -> Rental | None:
    """Fill the bid with GPUs `indices` of the offer's server at `price`: the bid, the server's
    rented GPUs, a STARTING rental and its GPU slots (on PostgreSQL in one statement, elsewhere the
    slots are added to `slots`, which the pass writes at its end). None when the bid is no longer
    open (expired meanwhile by `bids_expire`)."""
    container = offer.server.isolation_level == IsolationLevel.CONTAINER
    rental = Rental(
        buyer_id=bid.buyer_id, bid=bid, offer=offer, server=offer.server, gpu_model_id=bid.gpu_model_id,
        gpus=bid.gpus, price_usd=price, hours=bid.hours, state=RentalState.STARTING, started_at=now,
        ssh_public_key=bid.ssh_public_key, isolation_level=offer.server.isolation_level,
        container_template_id=bid.container_template_id if container else None,
        # Every container rental has one: the agent's own default template may take it too.
        service_token=secrets.token_urlsafe(24) if container else "",
    )
    if connection.vendor != "postgresql":
        if not Bid.objects.filter(pk=bid.pk, state=BidState.OPEN).update(
            state=BidState.FILLED, updated_at=now
        ):
            return None
        Server.objects.filter(pk=offer.server_id).update(gpus_rented=F("gpus_rented") + bid.gpus)
        rental.save(force_insert=True)
        slots.extend(RentalGpu(rental=rental, server_id=offer.server_id, index=index) for index in indices)
        return rental
    columns, values, params = insert_parts(rental)
    with prepared_cursor() as cursor:
        cursor.execute(_MATCH_WRITE_POSTGRESQL.format(columns=columns, values=values), [
            BidState.FILLED, now, bid.pk, BidState.OPEN, bid.gpus, offer.server_id, *params,
            offer.server_id, indices,
        ])
        row = cursor.fetchone()
    if row is None:
        return None
    rental.pk, rental._state.adding, rental._state.db = row[0], False, connection.alias
    return rental


def market_match(
    *,
    gpu_model_id: int,
    incoming_bid_id: int | None = None,
    incoming_offer_id: int | None = None,
    now: datetime | None = None,
    locked_open: bool = False,
    taker_payable_usd: Decimal | None = None,
) -> MatchResult:
    """Run one matching pass for one GPU model; see the module's docstring for the rules.

    `incoming_bid_id` / `incoming_offer_id` name the taker, the order whose arrival (or change)
    triggered the pass: it trades at the resting order's price. Runs in the caller's transaction
    (or its own), takes the model's market lock, and does nothing while the market is closed.
    `locked_open`: the caller holds the lock already and found the market open under it (so
    neither is done twice). `taker_payable_usd`: the incoming bid's buyer was just found able to
    pay its first hour at this price per GPU-hour, so a trade at or below it is not checked again.
    """
    result = MatchResult()
    with transaction.atomic(savepoint=False):
        if not locked_open:
            market_lock(gpu_model_id=gpu_model_id)
            if not _market_open():
                return result
        now = now or timezone.now()

        bids = bids_crossing(gpu_model_id=gpu_model_id)
        expired = [bid.pk for bid in bids if bid.expires_at is not None and bid.expires_at <= now]
        if expired:
            Bid.objects.filter(pk__in=expired, state=BidState.OPEN).update(
                state=BidState.EXPIRED, updated_at=now
            )
            result.expired_bid_ids = expired
        bids = [bid for bid in bids if bid.expires_at is None or bid.expires_at > now]
        if not bids:
            return result

        offers = _Candidates(
            gpu_model_id=gpu_model_id,
            max_price=max(bid.max_price_usd for bid in bids),
            min_gpus=min(bid.gpus for bid in bids),
        )
        slots: list[RentalGpu] = []
        for bid in bids:
            offer = offers.first_for(bid)
            if offer is None:
                if offers.exhausted and not offers.offers:
                    break
                continue
            price = _trade_price(
                bid, offer, incoming_bid_id=incoming_bid_id, incoming_offer_id=incoming_offer_id
            )
            known = bid.pk == incoming_bid_id and taker_payable_usd is not None and price <= taker_payable_usd
            if not known and not first_hour_payable(buyer_id=bid.buyer_id, price_usd=price, gpus=bid.gpus):
                cancelled = Bid.objects.filter(pk=bid.pk, state=BidState.OPEN).update(
                    state=BidState.CANCELLED,
                    cancel_reason=BidCancelReason.INSUFFICIENT_BALANCE,
                    updated_at=now,
                )
                if cancelled:
                    result.cancelled_bid_ids.append(bid.pk)
                continue
            if len(offers.free_indices(offer.server)) < bid.gpus:
                # The GPU count says free, the slots say held: never sell an index twice.
                logger.error("Server %s: GPUs counted free without free indices.", offer.server_id)
                continue
            indices = offers.free_indices(offer.server)[: bid.gpus]
            rental = _match_write(bid=bid, offer=offer, price=price, now=now, indices=indices, slots=slots)
            if rental is None:
                continue
            offers.sold(offer, bid.gpus)
            bid.state = BidState.FILLED
            result.rentals.append(rental)
            logger.info(
                "Matched bid %s with offer %s: %s GPU(s) at %s USD (rental %s)",
                bid.pk, offer.pk, bid.gpus, price, rental.pk,
            )
        # One statement for the pass (none on PostgreSQL, where each match wrote its own); the
        # partial unique index refuses an index held twice.
        RentalGpu.objects.bulk_create(slots)
    return result
