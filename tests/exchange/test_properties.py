"""Property-based: random sequences of operations run through the real services and through a tiny
in-memory model of the market rules, written here from DESIGN.md. After every step both agree on
the trades (who, which server, how many GPUs, at what price, in what order) and on every bid's
state, and the database invariants hold."""

from dataclasses import dataclass
from decimal import Decimal

import pytest
from django.db import transaction
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from exchange.exceptions import BidNotOpen, BidRejected, OfferRejected, RentalNotFound
from exchange.models import Bid, BidState, Rental, RentalState, TimeInForce
from exchange.services import (
    bid_cancel,
    market_close,
    market_open,
    offer_post,
    offer_update,
    offer_withdraw,
    rental_stop,
)
from sellers.models import Server
from tests.factories import GpuModelFactory, ServerFactory, UserFactory

from .support import market_set, place

pytestmark = pytest.mark.django_db

# (GPU model, GPUs, region) of the servers every example starts with.
SERVERS = [
    (0, 2, "europe"), (0, 4, "europe"), (0, 8, "north-america"), (1, 2, "europe"), (1, 4, "north-america"),
]
BUYERS = 3
PRICES = [100, 150, 200, 300]  # cents
BALANCES = [0, 3, 10, 100]  # US dollars


def usd(cents: int) -> Decimal:
    return Decimal(f"{cents // 100}.{cents % 100:02d}")


# --- the reference model ---------------------------------------------------------------------------


@dataclass
class ROffer:
    server: int
    gpus: int
    price: Decimal
    seq: int
    active: bool = True
    real_id: int | None = None


@dataclass
class RBid:
    buyer: int
    model: int
    gpus: int
    price: Decimal
    region: str
    tif: str
    seq: int
    state: str = "open"
    real_id: int | None = None


@dataclass
class RRental:
    buyer: int
    server: int
    gpus: int
    price: Decimal
    active: bool = True


class Reference:
    def __init__(self):
        self.rented = [0] * len(SERVERS)
        self.offers: list[ROffer] = []
        self.bids: list[RBid] = []
        self.rentals: list[RRental] = []
        self.balances = [Decimal(100)] * BUYERS
        self.is_open = False
        self.seq = 0

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def active_offer(self, server: int) -> ROffer | None:
        return next((o for o in self.offers if o.server == server and o.active), None)

    def available(self, offer: ROffer) -> int:
        return min(offer.gpus, SERVERS[offer.server][1]) - self.rented[offer.server]

    def payable(self, buyer: int, price: Decimal, gpus: int) -> bool:
        return self.balances[buyer] >= price * gpus

    def match(self, model: int, *, taker_bid: RBid | None = None, taker_offer: ROffer | None = None):
        if not self.is_open:
            return
        bids = sorted(
            (b for b in self.bids if b.model == model and b.state == "open"), key=lambda b: (-b.price, b.seq)
        )
        for bid in bids:
            fits = [
                o for o in self.offers
                if o.active and SERVERS[o.server][0] == model and self.available(o) >= bid.gpus
                and o.price <= bid.price and (not bid.region or SERVERS[o.server][2] == bid.region)
            ]
            if not fits:
                continue
            offer = min(fits, key=lambda o: (o.price, o.seq))
            if bid is taker_bid:
                price = offer.price
            elif offer is taker_offer:
                price = bid.price
            else:
                price = offer.price if offer.seq < bid.seq else bid.price
            if not self.payable(bid.buyer, price, bid.gpus):
                bid.state = "cancelled"
                continue
            bid.state = "filled"
            self.rented[offer.server] += bid.gpus
            self.rentals.append(RRental(bid.buyer, offer.server, bid.gpus, price))

    # Each operation returns the error code the real service must raise, or None.

    def offer(self, server: int, gpus: int, price: Decimal) -> tuple[str | None, ROffer | None]:
        if not 1 <= gpus <= SERVERS[server][1]:
            return "gpus_out_of_range", None
        if self.active_offer(server):
            return "offer_exists", None
        offer = ROffer(server, gpus, price, self._next())
        self.offers.append(offer)
        self.match(SERVERS[server][0], taker_offer=offer)
        return None, offer

    def update(self, offer: ROffer, gpus: int, price: Decimal) -> str | None:
        if not 1 <= gpus <= SERVERS[offer.server][1]:
            return "gpus_out_of_range"
        better = gpus > offer.gpus or price < offer.price
        offer.gpus, offer.price = gpus, price
        if better:
            self.match(SERVERS[offer.server][0], taker_offer=offer)
        return None

    def bid(self, buyer, model, gpus, price, region, tif) -> tuple[str | None, RBid | None]:
        if gpus > max(count for m, count, _r in SERVERS if m == model):
            return "gpus_unavailable", None
        if not self.payable(buyer, price, gpus):
            return "insufficient_balance", None
        if tif == TimeInForce.BUY_NOW and not self.is_open:
            return "market_closed", None
        bid = RBid(buyer, model, gpus, price, region, tif, self._next())
        self.bids.append(bid)
        self.match(model, taker_bid=bid)
        if bid.state == "open" and tif == TimeInForce.BUY_NOW:
            bid.state = "cancelled"
        return None, bid

    def cancel(self, bid: RBid) -> str | None:
        if bid.state != "open":
            return "bid_not_open"
        bid.state = "cancelled"
        return None

    def stop(self, rental: RRental) -> str | None:
        if not rental.active:
            return "rental_not_found"
        rental.active = False
        self.rented[rental.server] -= rental.gpus
        self.match(SERVERS[rental.server][0])
        return None

    def open(self):
        self.is_open = True
        for model in sorted({m for m, _c, _r in SERVERS}):
            self.match(model)


# --- operations ------------------------------------------------------------------------------------

# Hypothesis leans to the first choices: asks cheap, bids dear, so that simple examples trade.
prices = st.sampled_from(PRICES)
bid_prices = st.sampled_from(PRICES[::-1])
servers = st.integers(0, len(SERVERS) - 1)
OPERATIONS = {
    "offer": st.tuples(st.just("offer"), servers, st.integers(1, 4), prices),
    "bid": st.tuples(
        st.just("bid"), st.integers(0, BUYERS - 1), st.integers(0, 1), st.sampled_from([1, 1, 2, 4, 8]),
        bid_prices, st.sampled_from(["", "", "", "europe", "north-america"]),
        st.sampled_from([TimeInForce.BID, TimeInForce.BID, TimeInForce.BUY_NOW]),
    ),
    "update": st.tuples(st.just("update"), servers, st.integers(1, 8), prices),
    "withdraw": st.tuples(st.just("withdraw"), servers),
    "cancel": st.tuples(st.just("cancel"), st.integers(0, 50)),
    "stop": st.tuples(st.just("stop"), st.integers(0, 50)),
    "open": st.just(("open",)),
    "close": st.just(("close",)),
    "balance": st.tuples(st.just("balance"), st.integers(0, BUYERS - 1), st.sampled_from(BALANCES)),
}
# Offers and bids more often than the rest, so that most examples trade.
KINDS = ["bid"] * 6 + ["offer"] * 4 + ["update", "withdraw", "cancel", "stop", "stop", "open", "close"]
KINDS += ["balance"]
operations = st.sampled_from(KINDS).flatmap(OPERATIONS.__getitem__)
# Half of the examples open the market first and post a few offers, so that most examples trade;
# the others place their orders while the market is closed, post the offers and open it last.
sequences = st.builds(
    lambda start_open, seed, ops: [("open",)] + seed + ops if start_open else ops + seed + [("open",)],
    st.booleans(),
    st.lists(OPERATIONS["offer"], min_size=2, max_size=5),
    st.lists(operations, min_size=4, max_size=20),
)


def _call(service, **arguments) -> tuple[str | None, object]:
    """(None, what the service returned), or (the error code, None) when it refused."""
    try:
        return None, service(**arguments)
    except (OfferRejected, BidRejected, BidNotOpen, RentalNotFound) as refused:
        return refused.code, None


def run(ops, balances, ssh_key) -> list[tuple]:
    """Run `ops` through the services and the reference, checking after each step; returns the
    real trades as (buyer, server, GPUs, price), buyers and servers by index."""
    market_set(False)
    balances.usd.clear()
    ref = Reference()
    gpus = [GpuModelFactory(), GpuModelFactory()]
    servers = [ServerFactory(gpu_model=gpus[m], gpu_count=c, region=r) for m, c, r in SERVERS]
    buyers = [UserFactory() for _ in range(BUYERS)]
    for buyer, amount in zip(buyers, ref.balances, strict=True):
        balances.set(buyer, amount)
    server_index = {server.pk: i for i, server in enumerate(servers)}
    real: list[tuple] = []
    buyer_index = {buyer.pk: i for i, buyer in enumerate(buyers)}

    for op in ops:
        kind = op[0]
        if kind == "offer":
            _k, s, count, cents = op
            expected, roffer = ref.offer(s, count, usd(cents))
            got, offer = _call(offer_post, server=servers[s], gpus=count, price_usd=usd(cents))
            assert got == expected, op
            if roffer:
                roffer.real_id = offer.pk
        elif kind in ("update", "withdraw"):
            roffer = ref.active_offer(op[1])
            if roffer is None:
                continue
            if kind == "withdraw":
                roffer.active = False
                offer_withdraw(offer_id=roffer.real_id)
            else:
                expected = ref.update(roffer, op[2], usd(op[3]))
                got, _offer = _call(offer_update, offer_id=roffer.real_id, gpus=op[2], price_usd=usd(op[3]))
                assert got == expected, op
        elif kind == "bid":
            _k, b, m, count, cents, region, tif = op
            expected, rbid = ref.bid(b, m, count, usd(cents), region, tif)
            got, placed = _call(
                place, buyer=buyers[b], gpu=gpus[m], key=ssh_key, gpus=count, price=usd(cents), region=region,
                tif=tif,
            )
            assert got == expected, op
            if rbid:
                rbid.real_id = placed.bid.pk
        elif kind == "cancel":
            if not ref.bids:
                continue
            rbid = ref.bids[op[1] % len(ref.bids)]
            expected = ref.cancel(rbid)
            assert _call(bid_cancel, buyer=buyers[rbid.buyer], bid_id=rbid.real_id)[0] == expected, op
        elif kind == "stop":
            if not ref.rentals:
                continue
            index = op[1] % len(ref.rentals)
            rrental = ref.rentals[index]
            rental_id = list(Rental.objects.order_by("id").values_list("id", flat=True))[index]
            expected = ref.stop(rrental)
            assert _call(rental_stop, buyer=buyers[rrental.buyer], rental_id=rental_id)[0] == expected, op
        elif kind == "open":
            ref.open()
            market_open()
        elif kind == "close":
            ref.is_open = False
            market_close()
        elif kind == "balance":
            ref.balances[op[1]] = Decimal(op[2])
            balances.set(buyers[op[1]], op[2])

        # The same trades, in the same order.
        real = [
            (buyer_index[buyer], server_index[server], count, price)
            for buyer, server, count, price in Rental.objects.order_by("id").values_list(
                "buyer_id", "server_id", "gpus", "price_usd"
            )
        ]
        assert real == [(r.buyer, r.server, r.gpus, r.price) for r in ref.rentals], op
        # The same bid states.
        states = dict(Bid.objects.values_list("id", "state"))
        assert [states[b.real_id] for b in ref.bids] == [b.state for b in ref.bids], op
        # Rented GPUs are the running rentals' GPUs, within the server's GPUs.
        for server in Server.objects.filter(pk__in=server_index):
            running = Rental.objects.filter(server=server).exclude(state=RentalState.ENDED)
            held = sum(running.values_list("gpus", flat=True))
            assert server.gpus_rented == held <= server.gpu_count
            assert server.gpus_rented == ref.rented[server_index[server.pk]]
        # No bid both filled and open: filled bids are exactly those with a rental.
        assert not Bid.objects.filter(state=BidState.OPEN, rental__isnull=False).exists()
        assert Bid.objects.filter(state=BidState.FILLED).count() == Rental.objects.count()
    event(f"trades: {min(len(real), 5)}")
    return real


def _in_rolled_back_transaction(function, *args):
    """Each example starts from the same empty database: its writes are rolled back after it."""
    with transaction.atomic():
        result = function(*args)
        transaction.set_rollback(True)
    return result


# No example database: examples are not saved under the checkout.
COMMON = {"deadline": None, "database": None, "suppress_health_check": [HealthCheck.function_scoped_fixture]}


@settings(max_examples=30, **COMMON)
@given(ops=sequences)
def test_services_follow_the_reference_model(ops, balances, ssh_key):
    _in_rolled_back_transaction(run, ops, balances, ssh_key)


@settings(max_examples=10, **COMMON)
@given(ops=sequences)
def test_replaying_a_sequence_gives_the_same_trades(ops, balances, ssh_key):
    first = _in_rolled_back_transaction(run, ops, balances, ssh_key)
    second = _in_rolled_back_transaction(run, ops, balances, ssh_key)
    assert first == second
