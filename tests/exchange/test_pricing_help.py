"""The pricing help of an offer (exchange.selectors.offer_pricing_help): best bid and ask, the last
trades, the median price of the last 24 hours and where a price would stand among the asks, each
worked out by hand."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from exchange.selectors import PRICING_HELP_TRADES, offer_pricing_help, trades_median_price
from tests.exchange.support import market_set
from tests.factories import BidFactory, GpuModelFactory, OfferFactory, RentalFactory, ServerFactory

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


@pytest.fixture
def gpu():
    return GpuModelFactory(name="H100 SXM", slug="h100-sxm")


@pytest.fixture
def server(gpu):
    return ServerFactory(gpu_model=gpu, gpu_count=8)


def ask(gpu, price, **fields):
    return OfferFactory(server=ServerFactory(gpu_model=gpu), price_usd=Decimal(price), **fields)


def open_bid(gpu, price, *, gpus=1, state="open", **fields):
    return BidFactory(gpu_model=gpu, max_price_usd=Decimal(price), gpus=gpus, state=state,
                      time_in_force="bid", **fields)


def trade(gpu, price, *, ago_hours, gpus=1):
    offer = ask(gpu, price, state="withdrawn")
    started = NOW - timedelta(hours=ago_hours)
    return RentalFactory(offer=offer, gpus=gpus, state="ended", started_at=started,
                         ended_at=started + timedelta(minutes=30), end_reason="stopped_by_buyer")


def test_median_of_an_even_number_of_trades_is_the_mean_of_the_two_middle_rounded_half_up(gpu):
    # Within the last 24 h: 3.00, 2.00, 2.55, 2.10 -> sorted 2.00 2.10 | 2.55 3.00 -> (2.10 + 2.55) / 2
    # = 2.325, half-up 2.33. The trade 25 h ago (1.00) and one in the future (9.00) do not count.
    for price, ago in (("3.00", 1), ("2.00", 2), ("2.55", 23.5), ("2.10", 5), ("1.00", 25), ("9.00", -1)):
        trade(gpu, price, ago_hours=ago)
    median, count = trades_median_price(gpu_model_id=gpu.pk, since=NOW - timedelta(hours=24), until=NOW)
    assert (median, count) == (Decimal("2.33"), 4)


def test_median_of_an_odd_number_of_trades_is_the_middle_one_each_trade_counted_once(gpu):
    # 2.00, 2.10, 2.40 (a trade of 8 GPUs counts once), 2.55, 3.00 -> the third: 2.40.
    for price, gpus in (("3.00", 1), ("2.40", 8), ("2.00", 1), ("2.55", 1), ("2.10", 1)):
        trade(gpu, price, ago_hours=1, gpus=gpus)
    assert trades_median_price(gpu_model_id=gpu.pk, since=NOW - timedelta(hours=24), until=NOW) == (
        Decimal("2.40"), 5
    )


def test_median_without_trades_is_none(gpu):
    trade(gpu, "2.00", ago_hours=30)
    assert trades_median_price(gpu_model_id=gpu.pk, since=NOW - timedelta(hours=24), until=NOW) == (None, 0)


def test_best_prices_and_last_trades_newest_first(gpu, server):
    ask(gpu, "2.40")
    ask(gpu, "2.20")
    ask(GpuModelFactory(), "1.00")  # another model's book
    open_bid(gpu, "1.90")
    open_bid(gpu, "2.05")
    open_bid(gpu, "2.10", state="cancelled")
    open_bid(gpu, "2.15", expires_at=NOW - timedelta(minutes=1))  # expired
    for index, gpus in enumerate((1, 2, 4, 8, 1, 2, 4)):
        trade(gpu, f"2.0{index}", ago_hours=7 - index, gpus=gpus)
    help_ = offer_pricing_help(server=server, price_usd=None, now=NOW)
    assert (help_.best_bid, help_.best_ask) == (Decimal("2.05"), Decimal("2.20"))
    assert len(help_.trades) == PRICING_HELP_TRADES == 5
    assert [(t.price, t.gpus) for t in help_.trades] == [
        (Decimal("2.06"), 4), (Decimal("2.05"), 2), (Decimal("2.04"), 1), (Decimal("2.03"), 8),
        (Decimal("2.02"), 4),
    ]
    # 2.00 .. 2.06: the fourth, 2.03.
    assert (help_.median_24h, help_.trades_24h) == (Decimal("2.03"), 7)
    assert help_.place is None


def test_an_empty_book(gpu, server):
    help_ = offer_pricing_help(server=server, price_usd=Decimal("2.00"), now=NOW)
    assert (help_.best_bid, help_.best_ask, help_.trades, help_.median_24h) == (None, None, [], None)
    assert (help_.place.position, help_.place.asks, help_.place.crossing_bid) == (1, 1, None)


def test_place_among_the_asks(gpu, server):
    # Asks 2.00, 2.20, 2.20, 2.50, 3.00, 3.10 (and one whose server is fully rented, not in the book).
    for price in ("2.00", "2.20", "2.20", "2.50", "3.00", "3.10"):
        ask(gpu, price)
    full = ask(gpu, "1.00", gpus_offered=1)
    RentalFactory(offer=full, gpus=8)

    def place(price):
        found = offer_pricing_help(server=server, price_usd=Decimal(price), now=NOW).place
        return found.position, found.asks

    assert place("1.99") == (1, 7)  # the cheapest of 7 asks, counting its own
    assert place("2.00") == (2, 7)  # the older ask at the same price comes first
    assert place("2.30") == (4, 7)  # 2.00, 2.20, 2.20 before it: the 4th of 7
    assert place("5.00") == (7, 7)


def test_a_changed_offer_keeps_its_time_and_is_not_counted_twice(gpu, server):
    older = ask(gpu, "2.20")
    own = OfferFactory(server=server, price_usd=Decimal("2.50"))
    ask(gpu, "2.20")  # posted after the seller's offer
    found = offer_pricing_help(server=server, price_usd=Decimal("2.20"), offer=own, now=NOW).place
    assert (found.position, found.asks) == (2, 3)  # behind the older 2.20 only
    assert older.created_at < own.created_at


def test_a_price_at_or_below_a_resting_bid_would_trade_at_the_bids_price(gpu, server):
    market_set(True)
    open_bid(gpu, "2.60")
    open_bid(gpu, "2.40")
    open_bid(gpu, "9.00", gpus=8, region="asia")  # another region: not this server's
    open_bid(gpu, "8.00", min_reliability=Decimal("0.990"))  # the server has no score yet
    help_ = offer_pricing_help(server=server, price_usd=Decimal("2.50"), gpus=4, now=NOW)
    assert help_.place.crossing_bid == Decimal("2.60")
    assert help_.best_bid == Decimal("9.00")
    assert help_.market_open and help_.listed
    assert offer_pricing_help(server=server, price_usd=Decimal("2.61"), now=NOW).place.crossing_bid is None


def test_a_bid_for_more_gpus_than_the_offer_frees_does_not_cross(gpu, server):
    open_bid(gpu, "3.00", gpus=4)
    rented = OfferFactory(server=server, state="withdrawn")
    RentalFactory(offer=rented, gpus=4)
    RentalFactory(offer=rented, gpus=2)  # 2 of its 8 GPUs free
    assert offer_pricing_help(server=server, price_usd=Decimal("2.00"), now=NOW).place.crossing_bid is None
    open_bid(gpu, "2.50", gpus=2)
    assert offer_pricing_help(server=server, price_usd=Decimal("2.00"), now=NOW).place.crossing_bid == (
        Decimal("2.50")
    )


def test_five_queries_whatever_the_book(gpu, server, django_assert_num_queries):
    for index in range(6):
        ask(gpu, f"2.{index}0")
        open_bid(gpu, f"1.{index}0")
        trade(gpu, f"2.{index}5", ago_hours=index)
    with django_assert_num_queries(5):
        offer_pricing_help(server=server, price_usd=Decimal("2.00"), gpus=2, now=NOW)
