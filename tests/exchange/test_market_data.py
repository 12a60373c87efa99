"""Order book, trades, price history and the buyer's own lists: right numbers, fixed query counts."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from exchange.models import Bid
from exchange.selectors import (
    HourPoint,
    Level,
    best_asks_by_size,
    bid_get_for_buyer,
    bids_for_buyer,
    order_book,
    price_history,
    rental_get_for_buyer,
    rentals_for_buyer,
    trades_recent,
)
from exchange.services import offer_post
from tests.factories import GpuModelFactory, OfferFactory, RentalFactory, ServerFactory, UserFactory

from .support import market_set, place

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("balances")]

D = Decimal


@pytest.fixture
def gpu():
    return GpuModelFactory()


def _offer(gpu, price, *, count=8, offered=8, rented=0, **extra):
    server = ServerFactory(gpu_model=gpu, gpu_count=count, gpus_rented=rented)
    return OfferFactory(server=server, gpus_offered=offered, price_usd=D(price), **extra)


def _book(gpu, ssh_key, size):
    for i in range(size):
        _offer(gpu, f"{3 + i % 5}.00", offered=1 + i % 8, rented=i % 2)
    buyer = UserFactory()
    for i in range(size):
        place(buyer, gpu, ssh_key, gpus=(1, 2, 4, 8)[i % 4], price=f"{1 + i % 3}.00")


def test_order_book_levels(gpu, ssh_key, django_assert_num_queries):
    market_set(False)
    _offer(gpu, "2.00", offered=4)
    _offer(gpu, "2.00", count=8, offered=8, rented=5)  # 3 free
    _offer(gpu, "2.50", offered=2)
    _offer(gpu, "1.00", state="withdrawn")
    _offer(gpu, "1.10", count=4, rented=4)  # full
    pending = ServerFactory(gpu_model=gpu, status="pending")
    OfferFactory(server=pending, price_usd=D("1.30"))
    _offer(GpuModelFactory(), "0.50")  # another market
    buyer = UserFactory()
    place(buyer, gpu, ssh_key, gpus=2, price="1.50")
    place(buyer, gpu, ssh_key, gpus=4, price="1.50")
    place(buyer, gpu, ssh_key, gpus=1, price="1.70")
    gone = place(buyer, gpu, ssh_key, gpus=8, price="1.90", expires_at=timezone.now() + timedelta(hours=1))
    Bid.objects.filter(pk=gone.bid.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    cancelled = place(buyer, gpu, ssh_key, gpus=8, price="1.95").bid
    Bid.objects.filter(pk=cancelled.pk).update(state="cancelled", cancel_reason="buyer")

    with django_assert_num_queries(2):
        book = order_book(gpu_model_id=gpu.pk)

    assert [(level.price, level.gpus) for level in book.asks] == [(D("2.00"), 7), (D("2.50"), 2)]
    assert [[offer.gpus for offer in level.offers] for level in book.asks] == [[4, 3], [2]]
    assert book.bids == [Level(D("1.70"), 1), Level(D("1.50"), 6)]
    assert (book.best_bid, book.best_ask, book.spread) == (D("1.70"), D("2.00"), D("0.30"))
    assert [(level.price, level.gpus) for level in order_book(gpu_model_id=gpu.pk, levels=1).asks] == [
        (D("2.00"), 7)
    ]


def test_an_empty_book():
    book = order_book(gpu_model_id=GpuModelFactory().pk)
    assert (book.asks, book.bids, book.best_bid, book.best_ask, book.spread) == ([], [], None, None, None)


@pytest.mark.parametrize("size", [3, 60])
def test_market_data_query_counts_do_not_grow_with_the_book(gpu, ssh_key, size, django_assert_num_queries):
    market_set(False)
    _book(gpu, ssh_key, size)
    for offer in list(gpu.servers.all()[:size])[: size // 2]:
        RentalFactory(offer=offer.offers.first(), gpus=1)
    with django_assert_num_queries(2):
        order_book(gpu_model_id=gpu.pk)
    with django_assert_num_queries(1):
        best_asks_by_size(gpu_model_id=gpu.pk)
    with django_assert_num_queries(1):
        trades_recent(gpu_model_id=gpu.pk)
    with django_assert_num_queries(1):
        price_history(gpu_model_id=gpu.pk)


def test_best_asks_by_size(gpu):
    _offer(gpu, "1.00", offered=1)
    _offer(gpu, "2.00", offered=4)
    _offer(gpu, "3.00", count=8, rented=2)  # 6 free
    assert best_asks_by_size(gpu_model_id=gpu.pk) == {1: D("1.00"), 2: D("2.00"), 4: D("2.00")}


def test_trades_recent_newest_first(gpu):
    offer = _offer(gpu, "2.00")
    start = timezone.now() - timedelta(hours=5)
    for hours, price in [(0, "2.00"), (2, "2.10"), (1, "2.05")]:
        RentalFactory(offer=offer, price_usd=D(price), started_at=start + timedelta(hours=hours), gpus=2)
    RentalFactory(offer=_offer(GpuModelFactory(), "9.00"))
    trades = trades_recent(gpu_model_id=gpu.pk, limit=2)
    assert [(t.time, t.price, t.gpus) for t in trades] == [
        (start + timedelta(hours=2), D("2.10"), 2), (start + timedelta(hours=1), D("2.05"), 2)
    ]


def test_price_history_hourly_buckets(gpu):
    offer = _offer(gpu, "2.00", count=16, offered=16)
    now = datetime(2026, 11, 30, 12, 30, tzinfo=UTC)
    for started, price in [
        (datetime(2026, 11, 30, 10, 5, tzinfo=UTC), "2.00"),
        (datetime(2026, 11, 30, 10, 50, tzinfo=UTC), "1.80"),
        (datetime(2026, 11, 30, 10, 20, tzinfo=UTC), "2.40"),
        (datetime(2026, 11, 30, 12, 0, tzinfo=UTC), "2.20"),
        (datetime(2026, 11, 30, 12, 45, tzinfo=UTC), "9.99"),  # after `now`
        (datetime(2026, 10, 30, 12, 0, tzinfo=UTC), "5.00"),  # 31 days before
        (datetime(2026, 11, 1, 0, 0, tzinfo=UTC), "3.00"),
    ]:
        RentalFactory(offer=offer, price_usd=D(price), started_at=started)
    RentalFactory(offer=_offer(GpuModelFactory(), "7.00"), started_at=now - timedelta(hours=1))

    points = price_history(gpu_model_id=gpu.pk, days=30, now=now)

    assert points == [
        HourPoint(hour=datetime(2026, 11, 1, 0, tzinfo=UTC), last=D("3.00"), low=D("3.00"), high=D("3.00")),
        HourPoint(hour=datetime(2026, 11, 30, 10, tzinfo=UTC), last=D("1.80"), low=D("1.80"), high=D("2.40")),
        HourPoint(hour=datetime(2026, 11, 30, 12, tzinfo=UTC), last=D("2.20"), low=D("2.20"), high=D("2.20")),
    ]


def test_the_buyers_own_bids_and_rentals(gpu, ssh_key, django_assert_num_queries):
    market_set(True)
    offer_post(server=ServerFactory(gpu_model=gpu, gpu_count=8), gpus=8, price_usd=D("1.00"))
    buyer, other = UserFactory(), UserFactory()
    resting = place(buyer, gpu, ssh_key, price="0.50").bid
    filled = place(buyer, gpu, ssh_key, price="2.00")
    theirs = place(other, gpu, ssh_key, price="2.00")

    with django_assert_num_queries(1):
        bids = list(bids_for_buyer(buyer=buyer))
        assert [bid.gpu_model.name for bid in bids] == [gpu.name, gpu.name]
        assert bids[0].rental.pk == filled.rental.pk
    assert [bid.pk for bid in bids] == [filled.bid.pk, resting.pk]
    host = filled.rental.server.host
    with django_assert_num_queries(1):
        rentals = list(rentals_for_buyer(buyer=buyer))
        assert [(r.server.host, r.gpu_model.name) for r in rentals] == [(host, gpu.name)]

    assert bid_get_for_buyer(buyer=buyer, bid_id=resting.pk) == resting
    assert bid_get_for_buyer(buyer=buyer, bid_id=theirs.bid.pk) is None
    assert rental_get_for_buyer(buyer=buyer, rental_id=filled.rental.pk) == filled.rental
    assert rental_get_for_buyer(buyer=buyer, rental_id=theirs.rental.pk) is None
