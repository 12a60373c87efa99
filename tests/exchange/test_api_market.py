"""The public market operations of the API (issue 15): every market, the book, trades and price
candles, each as the pages read them and in a fixed number of queries."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from exchange.selectors import order_book, price_candles, trades_recent
from tests.factories import BidFactory, GpuModelFactory, OfferFactory, RentalFactory, ServerFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def usd(amount: str) -> dict:
    return {"amount": amount, "currency": "USD"}


def trade(gpu, at, price, gpus=1):
    offer = OfferFactory(server=ServerFactory(gpu_model=gpu), price_usd=Decimal(price), gpus_offered=8)
    return RentalFactory(offer=offer, gpus=gpus, started_at=at, state="ended",
                         ended_at=at + timedelta(hours=1), end_reason="stopped_by_buyer")


# --- GET /markets ----------------------------------------------------------------------------------

def test_markets_list_every_gpu_model_with_its_best_prices(client, demo_book):
    response = client.get("/api/v1/markets")
    assert response.status_code == 200 and response["Access-Control-Allow-Origin"] == "*"
    items = {item["gpu_model"]: item for item in response.json()["items"]}
    assert set(items) == set(demo_book)
    h100 = items["h100-sxm"]
    book = order_book(gpu_model_id=demo_book["h100-sxm"].pk)
    assert h100["best_ask"] == usd(f"{book.best_ask:.2f}") == usd("2.88")
    assert h100["market_open"] is False and h100["last_trade"] is None
    assert h100["gpus_on_offer"] == sum(level.gpus for level in order_book(
        gpu_model_id=demo_book["h100-sxm"].pk, levels=1000).asks)


def test_markets_show_the_best_bid_and_the_last_trade(client, demo_book, open_market):
    gpu = demo_book["h100-sxm"]
    BidFactory(gpu_model=gpu, state="open", max_price_usd=Decimal("1.50"))
    BidFactory(gpu_model=gpu, state="open", max_price_usd=Decimal("1.70"))
    BidFactory(gpu_model=gpu, state="cancelled", max_price_usd=Decimal("2.50"), cancel_reason="buyer")
    trade(gpu, T0, "2.10", gpus=2)
    trade(gpu, T0 + timedelta(minutes=5), "2.20", gpus=4)
    items = client.get("/api/v1/markets").json()["items"]
    item = next(item for item in items if item["gpu_model"] == gpu.slug)
    assert item["market_open"] is True
    assert item["best_bid"] == usd("1.70")
    assert item["last_trade"] == {"price": usd("2.20"), "gpus": 4, "time": "2026-11-30T10:05:00Z"}


def test_markets_run_the_same_queries_for_two_or_twenty_models(client, django_assert_max_num_queries):
    def market_with(count):
        for _ in range(count):
            gpu = GpuModelFactory()
            OfferFactory(server=ServerFactory(gpu_model=gpu))
            BidFactory(gpu_model=gpu, state="open", max_price_usd=Decimal("1.00"))
            trade(gpu, T0, "2.00")

    market_with(2)
    with django_assert_max_num_queries(5):
        assert len(client.get("/api/v1/markets").json()["items"]) == 2
    market_with(18)
    with django_assert_max_num_queries(5):
        assert len(client.get("/api/v1/markets").json()["items"]) == 20


# --- GET /markets/{slug}/book ----------------------------------------------------------------------

def test_the_book_is_the_pages_book_to_the_depth_asked(client, demo_book):
    gpu = demo_book["h100-sxm"]
    for price in ("1.10", "1.20", "1.30"):
        BidFactory(gpu_model=gpu, state="open", max_price_usd=Decimal(price))
    data = client.get("/api/v1/markets/h100-sxm/book?depth=2").json()
    book = order_book(gpu_model_id=gpu.pk, levels=2)
    assert [(ask["price"], ask["gpus"], len(ask["offers"])) for ask in data["asks"]] == [
        (usd(f"{level.price:.2f}"), level.gpus, len(level.offers)) for level in book.asks
    ]
    assert data["bids"] == [{"price": usd("1.30"), "gpus": 1}, {"price": usd("1.20"), "gpus": 1}]
    assert len(data["asks"]) == 2


@pytest.mark.parametrize("depth", ["0", "51", "-1", "abc", "1e3", "2.5", "NaN"])
def test_a_depth_out_of_range_is_a_problem(client, demo_book, depth):
    response = client.get(f"/api/v1/markets/h100-sxm/book?depth={depth}")
    assert response.status_code == 422
    assert response["Content-Type"].startswith("application/problem+json")
    assert response.json()["code"] == "validation_failed"


def test_an_unknown_market_is_404(client, demo_book):
    for path in ("book", "trades", "candles"):
        response = client.get(f"/api/v1/markets/nope/{path}")
        assert (response.status_code, response.json()["code"]) == (404, "gpu_model_not_found")


# --- GET /markets/{slug}/trades --------------------------------------------------------------------

def test_trades_are_the_pages_trades_page_by_page(client, gpu_catalog):
    gpu = gpu_catalog["h100-sxm"]
    for minute in range(5):
        trade(gpu, T0 + timedelta(minutes=minute), f"2.0{minute}", gpus=1)
    first = client.get("/api/v1/markets/h100-sxm/trades?limit=3").json()
    second = client.get(f"/api/v1/markets/h100-sxm/trades?limit=3&cursor={first['next_cursor']}").json()
    assert second["next_cursor"] is None
    shown = [(item["time"], item["price"]["amount"]) for item in first["items"] + second["items"]]
    recent = trades_recent(gpu_model_id=gpu.pk, limit=10)
    assert shown == [(t.time.strftime("%Y-%m-%dT%H:%M:%SZ"), f"{t.price:.2f}") for t in recent]


def test_trades_pages_run_fixed_queries(client, gpu_catalog, django_assert_max_num_queries):
    gpu = gpu_catalog["h100-sxm"]
    trade(gpu, T0, "2.00")
    with django_assert_max_num_queries(2):
        client.get("/api/v1/markets/h100-sxm/trades")
    for minute in range(30):
        trade(gpu, T0 + timedelta(minutes=minute), "2.00")
    with django_assert_max_num_queries(2):
        assert len(client.get("/api/v1/markets/h100-sxm/trades").json()["items"]) == 31


# --- price candles ---------------------------------------------------------------------------------

def test_hour_candles_worked_by_hand(gpu_catalog, django_assert_num_queries):
    gpu = gpu_catalog["h100-sxm"]
    # 10:00-11:00: 2.10 (1 GPU), 2.40 (2), 1.90 (4), 2.00 (1):
    # open 2.10, high 2.40, low 1.90, close 2.00, 8 GPUs in 4 trades.
    for minutes, price, gpus in ((0, "2.10", 1), (15, "2.40", 2), (30, "1.90", 4), (59, "2.00", 1)):
        trade(gpu, T0 + timedelta(minutes=minutes), price, gpus)
    # 11:00-12:00 empty; 12:00-13:00 one trade of 8 GPUs at 2.50.
    trade(gpu, T0 + timedelta(hours=2, minutes=1), "2.50", 8)
    # Another model's trade changes nothing.
    trade(gpu_catalog["a100-sxm"], T0 + timedelta(minutes=1), "9.99", 8)
    with django_assert_num_queries(1):
        candles = price_candles(gpu_model_id=gpu.pk, interval="hour", limit=10, now=T0 + timedelta(hours=3))
    assert [(c.start, c.open, c.high, c.low, c.close, c.volume, c.trades) for c in candles] == [
        (T0, Decimal("2.10"), Decimal("2.40"), Decimal("1.90"), Decimal("2.00"), 8, 4),
        (T0 + timedelta(hours=2), Decimal("2.50"), Decimal("2.50"), Decimal("2.50"), Decimal("2.50"), 8, 1),
    ]


def test_day_candles_and_the_limit_keep_the_latest(gpu_catalog):
    gpu = gpu_catalog["h100-sxm"]
    day = datetime(2026, 11, 28, tzinfo=UTC)
    trade(gpu, day + timedelta(hours=1), "3.00", 1)
    trade(gpu, day + timedelta(hours=23, minutes=59), "2.00", 2)
    trade(gpu, day + timedelta(days=1, hours=5), "2.50", 4)
    trade(gpu, day + timedelta(days=2, hours=5), "2.70", 1)
    trade(gpu, day + timedelta(days=5), "2.70", 1)  # after `now`: not a trade yet
    candles = price_candles(gpu_model_id=gpu.pk, interval="day", limit=2, now=day + timedelta(days=3))
    assert [(c.start.date().isoformat(), c.open, c.close, c.volume) for c in candles] == [
        ("2026-11-29", Decimal("2.50"), Decimal("2.50"), 4),
        ("2026-11-30", Decimal("2.70"), Decimal("2.70"), 1),
    ]
    every = price_candles(gpu_model_id=gpu.pk, interval="day", limit=10, now=day + timedelta(days=3))
    assert (every[0].open, every[0].high, every[0].low, every[0].close, every[0].volume) == (
        Decimal("3.00"), Decimal("3.00"), Decimal("2.00"), Decimal("2.00"), 3)


def test_candles_through_the_api(client, gpu_catalog):
    gpu = gpu_catalog["h100-sxm"]
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    trade(gpu, now - timedelta(hours=1), "2.10", 2)
    trade(gpu, now - timedelta(minutes=30), "2.30", 1)
    data = client.get("/api/v1/markets/h100-sxm/candles?interval=hour&limit=5").json()
    assert data["interval"] == "hour" and len(data["candles"]) == 1
    assert data["candles"][0] == {
        "start": (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "open": usd("2.10"), "high": usd("2.30"), "low": usd("2.10"), "close": usd("2.30"),
        "volume": 3, "trades": 2,
    }


@pytest.mark.parametrize("query", ["interval=week", "limit=0", "limit=501", "limit=x", "interval="])
def test_bad_candle_parameters_are_problems(client, gpu_catalog, query):
    response = client.get(f"/api/v1/markets/h100-sxm/candles?{query}")
    assert response.status_code == 422 and response.json()["code"] == "validation_failed"
