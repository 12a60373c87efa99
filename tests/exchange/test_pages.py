import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import translation
from django.utils.html import escape
from django.utils.translation import ngettext

from billing.services import fx_rates_load
from exchange.models import Bid, Market, Rental
from tests.exchange.support import bid_form, buyer_with, login_ready, signed_in
from tests.factories import ProfileFactory, SellerFactory

pytestmark = pytest.mark.django_db

NBSP = "\u00a0"


@pytest.fixture
def rates():
    fx_rates_load(rates={"EUR": Decimal("0.92"), "GBP": Decimal("0.79")},
                  valid_from=datetime(2026, 1, 1, tzinfo=UTC), source="test")


@pytest.fixture
def market_open():
    Market.objects.update_or_create(pk=1, defaults={"is_open": True})


@pytest.mark.parametrize("language", ["en", "pt", "fr"])
def test_trade_page_and_rules_render_in_every_language(client, demo_book, rates, language):
    response = client.get(f"/{language}/trade/h100-sxm/")
    html = response.content.decode()
    assert response.status_code == 200
    assert f'<html lang="{language}">' in html
    assert 'id="asks"' in html and 'htmx/htmx.min.js' in html
    assert client.get(f"/{language}/market-rules/").status_code == 200


def test_book_fragment_is_only_the_book(client, demo_book):
    html = client.get("/fr/trade/h100-sxm/book/").content.decode()
    assert html.lstrip().startswith('<div id="book"') and "<html" not in html
    assert f"2,88{NBSP}$US" in html


def test_market_data_json(client, demo_book):
    data = client.get("/api/v1/markets/h100-sxm").json()
    assert data["best_ask"] == "2.88" and data["best_bid"] is None
    assert data["asks"][0] | {"offers": None} == {
        "price": "2.88", "gpus": 4, "offers": None, "more_offers": 0,
    }
    assert client.get("/api/v1/markets/nope").status_code == 404


def test_market_data_first_address_redirects_to_the_api(client, demo_book):
    response = client.get("/api/v1/markets/h100-sxm/")
    assert (response.status_code, response["Location"]) == (301, "/api/v1/markets/h100-sxm")
    assert client.get("/api/v1/markets/h100-sxm/", follow=True).json()["asks"][0]["price"] == "2.88"


def test_unknown_gpu_trade_page_is_404(client, demo_book):
    assert client.get("/fr/trade/nope/").status_code == 404


def _grow_book(gpu, sellers: int, bids: int, key: str):
    from exchange.models import Offer
    from sellers.models import Server

    seller = SellerFactory()
    servers = Server.objects.bulk_create(
        Server(seller=seller, gpu_model=gpu, name=f"grow-{i}", gpu_count=8, region="europe",
               status="active", host=f"grow-{i}.example.test")
        for i in range(sellers)
    )
    Offer.objects.bulk_create(
        Offer(server=server, gpus_offered=8, price_usd=Decimal("3.00") + i % 40)
        for i, server in enumerate(servers)
    )
    buyer = ProfileFactory().user
    Bid.objects.bulk_create(
        Bid(buyer=buyer, gpu_model=gpu, gpus=1, max_price_usd=Decimal("1.00") + i % 30, time_in_force="bid",
            ssh_public_key=key, form_token=uuid.uuid4())
        for i in range(bids)
    )


@pytest.mark.parametrize("size", [10, 500])
def test_trade_pages_run_a_fixed_number_of_queries(
    client, demo_book, rates, django_assert_max_num_queries, size, ed25519_public_key
):
    _grow_book(demo_book["h100-sxm"], size, size, ed25519_public_key)
    for path in ("/fr/trade/h100-sxm/", "/fr/trade/h100-sxm/book/", "/api/v1/markets/h100-sxm",
                 "/fr/gpus/h100-sxm/"):
        with django_assert_max_num_queries(12):
            assert client.get(path).status_code == 200


def test_bidding_logged_out_goes_to_login_and_back(client, demo_book, ed25519_public_key):
    response = client.post("/pt/trade/h100-sxm/bid/", bid_form(ed25519_public_key))
    assert response.status_code == 302
    assert response["Location"].startswith("/pt/account/login/?next=/pt/trade/h100-sxm/bid/")
    assert not Bid.objects.exists()
    # After signing in, the login page sends the buyer back, to the trade page.
    back = signed_in(ProfileFactory().user).get("/pt/trade/h100-sxm/bid/")
    assert back["Location"] == "/pt/trade/h100-sxm/"


def test_a_resting_bid_shows_in_my_orders_and_can_be_cancelled(demo_book, rates, ed25519_public_key):
    buyer = buyer_with()
    client = signed_in(buyer)
    response = client.post("/en/trade/h100-sxm/bid/", bid_form(ed25519_public_key))
    assert response["Location"] == "/en/account/orders/"
    bid = Bid.objects.get(buyer=buyer)
    assert bid.state == "open"
    assert f'data-bid="{bid.pk}"' in client.get("/en/account/orders/").content.decode()
    client.post(f"/en/account/orders/{bid.pk}/cancel/")
    assert Bid.objects.get(pk=bid.pk).state == "cancelled"


def test_the_same_form_sent_twice_places_one_order(demo_book, rates, ed25519_public_key):
    buyer = buyer_with()
    client = signed_in(buyer)
    form = bid_form(ed25519_public_key)
    client.post("/en/trade/h100-sxm/bid/", form)
    client.post("/en/trade/h100-sxm/bid/", form)
    assert Bid.objects.filter(buyer=buyer).count() == 1


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"max_price_usd": "2.505"}, "decimals"),
        ({"max_price_usd": "0"}, None),
        ({"max_price_usd": "-1"}, None),
        ({"max_price_usd": "100.01"}, None),
        ({"gpus": "3"}, "Selecione uma opção válida. 3 não se encontra nas opções disponíveis."),
        ({"hours": "0"}, None),
        ({"hours": "-2"}, None),
        ({"expires_in": "2020-01-01T10:00"}, None),
        ({"ssh_public_key": "ssh-rsa AAAA not-a-key"}, None),
    ],
)
def test_bad_bids_are_translated_errors_and_write_nothing(
    demo_book, rates, ed25519_public_key, overrides, message
):
    buyer = buyer_with()
    response = signed_in(buyer).post("/pt/trade/h100-sxm/bid/", bid_form(ed25519_public_key, **overrides))
    assert response.status_code == 400
    html = response.content.decode()
    assert 'class="field-error"' in html or 'class="errors"' in html
    if message == "decimals":
        with translation.override("pt"):
            expected = ngettext(
                "Enter at most %(places)d decimal, for example %(example)s.",
                "Enter at most %(places)d decimals, for example %(example)s.", 2,
            ) % {"places": 2, "example": "1234,50"}
        assert escape(expected) in html
    elif message:
        assert escape(message) in html
    assert not Bid.objects.exists() and not Rental.objects.exists()


@pytest.mark.parametrize(
    "query",
    [
        {"max_price_usd": "2.505", "gpus": "2"},  # off the cent tick
        {"max_price_usd": "100.01", "gpus": "2"},  # above the cap
        {"max_price_usd": "0", "gpus": "2"},
        {"max_price_usd": "2.50", "gpus": "3"},
        {"max_price_usd": "2.50", "gpus": "2", "hours": "0"},
        {"max_price_usd": "2.50", "gpus": "2", "hours": str(24 * 366 + 1)},
        {"max_price_usd": "two", "gpus": "2"},
    ],
)
def test_the_cost_preview_shows_only_a_bid_the_exchange_accepts(client, demo_book, rates, query):
    html = client.post("/en/trade/h100-sxm/preview/", query).content.decode()
    assert html.startswith('<div id="bid-preview"') and "Per hour" not in html
    html = client.post("/en/trade/h100-sxm/preview/", {"max_price_usd": "2.50", "gpus": "2", "hours": "3"})
    assert "Per hour: $5.00 · For the hours chosen: $15.00" in html.content.decode()


def test_insufficient_balance_for_the_first_hour(demo_book, rates, ed25519_public_key):
    buyer = buyer_with(amount="10")
    response = signed_in(buyer).post(
        "/en/trade/h100-sxm/bid/", bid_form(ed25519_public_key, gpus="8", max_price_usd="5.00")
    )
    assert response.status_code == 400
    assert not Bid.objects.exists()


def test_buy_now_runs_a_rental_and_charges_the_first_hour(demo_book, rates, market_open, ed25519_public_key):
    buyer = buyer_with()
    client = signed_in(buyer)
    form = bid_form(ed25519_public_key, price_1="2.88", price_2="2.88", price_4="2.88", price_8="3.23")
    del form["max_price_usd"]
    response = client.post("/fr/trade/h100-sxm/buy/", form)
    assert response.status_code == 200 and not Rental.objects.exists()  # it asks first
    response = client.post("/fr/trade/h100-sxm/buy/", form | {"confirmed_price_usd": "2.88"})
    rental = Rental.objects.get(buyer=buyer)
    assert response["Location"] == f"/fr/account/rentals/{rental.pk}/"
    assert rental.state == "starting" and rental.paid_through and rental.price_usd == Decimal("2.88")
    html = client.get(response["Location"]).content.decode()
    assert rental.server.host not in html  # no connection details before the agent made the login
    login_ready(rental)
    assert rental.state == "running"
    html = client.get(response["Location"]).content.decode()
    assert rental.server.host in html and f"evx-{rental.pk}@" in html


def test_buy_now_above_the_shown_price_asks_again_at_the_new_price(
    demo_book, rates, market_open, ed25519_public_key
):
    buyer = buyer_with()
    client = signed_in(buyer)
    form = bid_form(ed25519_public_key, price_1="1.00")
    del form["max_price_usd"]
    response = client.post("/en/trade/h100-sxm/buy/", form)
    html = response.content.decode()
    assert response.status_code == 200 and "The best offer changed since the page showed it" in html
    assert "The best offer for this order is $2.88 per GPU-hour" in html
    assert not Rental.objects.exists() and not Bid.objects.exists()
    response = client.post("/en/trade/h100-sxm/buy/", form | {"confirmed_price_usd": "2.88"})
    assert Rental.objects.get(buyer=buyer).price_usd == Decimal("2.88")


def test_nobody_touches_someone_elses_orders_or_rentals(demo_book, rates, market_open, ed25519_public_key):
    owner, stranger = buyer_with(), buyer_with()
    signed_in(owner).post("/en/trade/h100-sxm/bid/", bid_form(ed25519_public_key, max_price_usd="1.00"))
    form = bid_form(ed25519_public_key, price_1="2.88", confirmed_price_usd="2.88")
    del form["max_price_usd"]
    signed_in(owner).post("/en/trade/h100-sxm/buy/", form)
    bid = Bid.objects.get(buyer=owner, state="open")
    rental = Rental.objects.get(buyer=owner)
    client = signed_in(stranger)
    assert client.post(f"/en/account/orders/{bid.pk}/cancel/").status_code == 404
    assert client.post(f"/en/account/rentals/{rental.pk}/stop/", {"confirmed": "1"}).status_code == 404
    assert client.get(f"/en/account/rentals/{rental.pk}/stop/").status_code == 404
    assert client.get(f"/en/account/rentals/{rental.pk}/").status_code == 404
    assert f'data-rental="{rental.pk}"' not in client.get("/en/account/rentals/").content.decode()
    assert Bid.objects.get(pk=bid.pk).state == "open"
    assert Rental.objects.get(pk=rental.pk).state == "starting"


def test_gpu_page_draws_the_price_history(client, demo_book, rates, market_open, ed25519_public_key):
    buyer = buyer_with()
    form = bid_form(ed25519_public_key, price_1="2.88", confirmed_price_usd="2.88")
    del form["max_price_usd"]
    signed_in(buyer).post("/en/trade/h100-sxm/buy/", form)
    Rental.objects.update(started_at=datetime.now(UTC) - timedelta(hours=3))
    html = client.get("/en/gpus/h100-sxm/").content.decode()
    assert '<svg class="chart"' in html and 'id="price-history"' in html
