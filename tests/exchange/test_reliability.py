"""Reliability where buyers decide (issue 16): every offer of the book shows its server's score, the
trade page filters by a minimum, and a bid with a minimum matches only servers that meet it
("new" servers, without a score, never do). Scores are set on the factories: computing them is
`reliability_refresh`'s."""

import uuid
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import translation
from django.utils.html import escape
from django.utils.translation import gettext

from billing.services import fx_rates_load
from exchange.exceptions import BidRejected
from exchange.models import Bid, Rental
from exchange.selectors import OFFERS_PER_LEVEL, order_book, order_quote
from exchange.services import market_reliability_changed
from sellers.models import Server
from tests.exchange.support import bid_form, buyer_with, orders_state, place, signed_in
from tests.factories import GpuModelFactory, OfferFactory, ServerFactory, UserFactory

pytestmark = pytest.mark.django_db

D = Decimal
NBSP = "\u00a0"
BAD_MINIMUMS = ["1.5", "-1", "abc", "0.9999"]


@pytest.fixture
def rates():
    fx_rates_load(rates={"EUR": D("0.92"), "GBP": D("0.79")},
                  valid_from=datetime(2026, 1, 1, tzinfo=UTC), source="test")


@pytest.fixture
def gpu():
    return GpuModelFactory(slug="h200")


def _ask(gpu, price, reliability, *, gpus=4, uptime=None, delivery=None):
    server = ServerFactory(
        gpu_model=gpu, reliability=None if reliability is None else D(reliability),
        reliability_uptime=uptime, reliability_delivery=delivery,
    )
    return OfferFactory(server=server, gpus_offered=gpus, price_usd=D(price))


@pytest.fixture
def book(gpu):
    """A cheap "new" server, a cheap 90 % one and a dearer 99.5 % one."""
    return {
        "new": _ask(gpu, "2.00", None, gpus=2),
        "ninety": _ask(gpu, "2.00", "0.900", gpus=4),
        "reliable": _ask(gpu, "2.50", "0.995", gpus=8, uptime=D("0.998"), delivery=D("0.990")),
    }


def state() -> tuple:
    return orders_state("min_reliability")


def translated(message: str, language: str) -> str:
    with translation.override(language):
        text = gettext(message)
    assert language == "en" or text != message, message
    return text


# --- the book shows every offer's reliability ------------------------------------------------------


def test_the_book_lists_each_offers_reliability_in_matching_order(book, gpu):
    asks = order_book(gpu_model_id=gpu.pk).asks
    assert [(level.price, level.gpus) for level in asks] == [(D("2.00"), 6), (D("2.50"), 8)]
    assert [[(offer.gpus, offer.reliability) for offer in level.offers] for level in asks] == [
        [(2, None), (4, D("0.900"))], [(8, D("0.995"))],
    ]
    reliable = asks[1].offers[0]
    assert (reliable.uptime, reliable.delivery) == (D("0.998"), D("0.990"))


def test_a_minimum_keeps_only_servers_that_meet_it(book, gpu):
    asks = order_book(gpu_model_id=gpu.pk, min_reliability=D("0.9")).asks
    assert [(level.price, level.gpus) for level in asks] == [(D("2.00"), 4), (D("2.50"), 8)]
    assert order_quote(gpu_model_id=gpu.pk, gpus=1, min_reliability=D("0.95")) == D("2.50")
    assert order_quote(gpu_model_id=gpu.pk, gpus=1) == D("2.00")
    assert order_quote(gpu_model_id=gpu.pk, gpus=1, min_reliability=D("0.999")) is None


def test_a_deep_level_lists_its_first_offers_and_counts_the_others(gpu, django_assert_num_queries):
    for _ in range(OFFERS_PER_LEVEL + 3):
        _ask(gpu, "3.00", "0.970", gpus=1)
    with django_assert_num_queries(2):
        (level,) = order_book(gpu_model_id=gpu.pk).asks
    assert (level.gpus, len(level.offers), level.more_offers) == (OFFERS_PER_LEVEL + 3, OFFERS_PER_LEVEL, 3)


@pytest.mark.parametrize(
    ("language", "reliable", "new"),
    [("en", "8 GPUs, 99.5%", "2 GPUs, new"), ("pt", "8 GPU, 99,5%", "2 GPU, novo"),
     ("fr", f"8 GPU, 99,5{NBSP}%", "2 GPU, nouveau")],
)
def test_the_book_fragment_shows_reliability_in_the_pages_language(client, book, language, reliable, new):
    html = client.get(f"/{language}/trade/h200/book/").content.decode()
    assert f'<span data-testid="ask-reliability">{reliable}</span>' in html
    assert f'<span data-testid="ask-reliability">{new}</span>' in html
    assert translated("Reliability of each offer's server", language) in html


@pytest.mark.parametrize("size", [5, 60])
def test_book_pages_run_a_fixed_number_of_queries(client, gpu, size, django_assert_max_num_queries):
    for index in range(size):
        _ask(gpu, f"{2 + index % 4}.00", None if index % 3 == 0 else f"0.9{index % 10}0", gpus=1 + index % 8)
    for path in ("/fr/trade/h200/", "/fr/trade/h200/book/", "/fr/trade/h200/?min_reliability=0.95",
                 "/fr/trade/h200/book/?min_reliability=0.95", "/api/v1/markets/h200/book",
                 "/api/v1/markets/h200"):
        with django_assert_max_num_queries(12):
            assert client.get(path).status_code == 200


# --- the trade page's filter -----------------------------------------------------------------------


def test_the_filter_hides_offers_below_it_and_starts_the_order_forms_from_it(client, book, rates):
    html = client.get("/fr/trade/h200/?min_reliability=0.95").content.decode()
    asks = html[html.index('id="asks"'):html.index('id="bids"')]
    assert f"8 GPU, 99,5{NBSP}%" in asks and "nouveau" not in asks and f"90{NBSP}%" not in asks
    assert "2,00" not in asks
    # The book refreshes itself with the filter; both order forms carry it, chosen.
    assert 'data-hx-get="/fr/trade/h200/book/?min_reliability=0.95"' in html
    assert html.count('<option value="0.95" selected>') == 3  # the filter, buy now, the bid
    assert 'name="price_1" value="2,50"' in html  # buy now's best price among reliable servers


def test_without_a_filter_the_page_shows_every_offer(client, book, rates):
    html = client.get("/en/trade/h200/").content.decode()
    assert "2 GPUs, new" in html and "4 GPUs, 90%" in html
    assert '<option value="" selected>Any reliability</option>' in html


def test_a_filter_it_cannot_read_filters_nothing(client, book, rates):
    response = client.get("/en/trade/h200/?min_reliability=lots")
    assert response.status_code == 200 and "2 GPUs, new" in response.content.decode()


# --- bids with a minimum ---------------------------------------------------------------------------


def test_a_bid_from_the_filtered_page_carries_the_minimum_and_buys_only_a_server_meeting_it(
    book, rates, open_market, ed25519_public_key
):
    buyer = buyer_with()
    client = signed_in(buyer)
    data = bid_form(ed25519_public_key, max_price_usd="3,00", min_reliability="0.95")
    confirm = client.post("/fr/trade/h200/bid/", data)
    assert confirm.status_code == 200  # it buys at once: the confirmation shows the price first
    html = confirm.content.decode()
    assert f"2,50{NBSP}$US" in html and f"95{NBSP}%" in html
    assert 'name="min_reliability" value="0.95"' in html
    response = client.post("/fr/trade/h200/bid/", data | {"confirmed_price_usd": "2.50", "form": "bid"})
    assert response.status_code == 302
    bid = Bid.objects.get(buyer=buyer)
    assert bid.min_reliability == D("0.950") and bid.state == "filled"
    assert bid.rental.server_id == book["reliable"].server_id and bid.rental.price_usd == D("2.50")


def test_the_preview_quotes_from_offers_meeting_the_minimum(client, book, rates, open_market):
    html = client.post("/en/trade/h200/preview/", {
        "gpus": "1", "max_price_usd": "3.00", "hours": "", "region": "", "min_reliability": "0.95",
    }).content.decode()
    assert "This bid buys now at $2.50 per GPU-hour" in html


def test_new_servers_never_meet_a_minimum(gpu, balances, open_market, ssh_key):
    new = _ask(gpu, "1.00", None, gpus=8)
    scored = _ask(gpu, "4.00", "0.000", gpus=1)  # a score of 0 meets a minimum of 0; "new" does not
    placed = place(UserFactory(), gpu, ssh_key, price="5.00", min_reliability=D("0"))
    assert placed.rental.server_id == scored.server_id and placed.rental.price_usd == D("4.00")
    new.server.refresh_from_db()
    assert new.server.gpus_rented == 0


def test_a_bid_with_a_minimum_rests_while_only_new_servers_offer(gpu, balances, open_market, ssh_key):
    _ask(gpu, "1.00", None, gpus=8)
    placed = place(UserFactory(), gpu, ssh_key, price="5.00", min_reliability=D("0.5"))
    assert placed.rental is None and placed.bid.state == "open" and not Rental.objects.exists()


def test_a_bid_matches_a_server_exactly_at_its_minimum_and_not_below(gpu, balances, open_market, ssh_key):
    _ask(gpu, "1.00", "0.949", gpus=8)
    at = _ask(gpu, "2.00", "0.950", gpus=8)
    placed = place(UserFactory(), gpu, ssh_key, price="5.00", min_reliability=D("0.95"))
    assert placed.rental.server_id == at.server_id and placed.rental.price_usd == D("2.00")


@pytest.mark.parametrize("typed", BAD_MINIMUMS)
def test_bad_minimums_from_the_page_place_nothing(book, rates, open_market, ed25519_public_key, typed):
    buyer = buyer_with()
    before = state()
    response = signed_in(buyer).post(
        "/fr/trade/h200/bid/", bid_form(ed25519_public_key, min_reliability=typed)
    )
    assert response.status_code == 400
    message = translated(
        "The minimum reliability must be a share from 0 to 1 with at most 3 decimals, such as 0.95, "
        "or empty for any server.", "fr",
    )
    assert escape(message) in response.content.decode()
    assert state() == before


@pytest.mark.parametrize("typed", BAD_MINIMUMS)
def test_bad_minimums_in_the_preview_are_refused(client, book, typed):
    html = client.post("/fr/trade/h200/preview/", {
        "gpus": "1", "max_price_usd": "3,00", "min_reliability": typed,
    }).content.decode()
    assert 'class="preview-errors"' in html and escape(translated(
        "The minimum reliability must be a share from 0 to 1 with at most 3 decimals, such as 0.95, "
        "or empty for any server.", "fr",
    )) in html


@pytest.mark.parametrize("value", [D("1.5"), D("-1"), D("0.9999"), D("NaN"), D("Infinity"), 0.95])
def test_bid_place_refuses_a_bad_minimum_and_writes_nothing(gpu, book, balances, ssh_key, value):
    with pytest.raises(BidRejected) as refused:
        place(UserFactory(), gpu, ssh_key, min_reliability=value, token=uuid.uuid4())
    assert refused.value.code == "min_reliability_invalid"
    assert not Bid.objects.exists()


@pytest.mark.parametrize("value", [D("0"), D("1"), D("0.95"), D("0.9500"), D("1.000")])
def test_bid_place_takes_any_share_with_three_decimals(gpu, book, balances, ssh_key, value):
    placed = place(UserFactory(), gpu, ssh_key, min_reliability=value)
    assert placed.bid.min_reliability == value


# --- new scores reach the cached book and resting bids ---------------------------------------------


def test_new_scores_drop_the_cached_book_and_let_a_resting_bid_trade(
    book, gpu, balances, open_market, ssh_key
):
    cache.clear()
    placed = place(UserFactory(), gpu, ssh_key, price="2.20", min_reliability=D("0.95"))
    assert placed.bid.state == "open"  # the cheap servers are new or 90 % reliable
    client = Client()
    assert "4 GPUs, 90%" in client.get("/en/trade/h200/book/").content.decode()
    Server.objects.filter(pk=book["ninety"].server_id).update(reliability=D("0.960"))
    assert "4 GPUs, 90%" in client.get("/en/trade/h200/book/").content.decode()  # the cached copy
    rentals = market_reliability_changed(gpu_model_ids=[gpu.pk, gpu.pk])
    assert [rental.server_id for rental in rentals] == [book["ninety"].server_id]
    assert rentals[0].price_usd == D("2.00")  # the resting offer is older: its price
    html = client.get("/en/trade/h200/book/").content.decode()
    assert "96%" in html and "90%" not in html
