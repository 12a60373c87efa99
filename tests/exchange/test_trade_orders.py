"""Orders from the trade page (issue 14, items 1 to 5): prices typed in the page's language, the
confirmation of an order that buys at once, buy now in a region, the preview validated as the
order is, and forms that a link cannot fill."""

import uuid
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import translation
from django.utils.html import escape
from django.utils.translation import gettext

from billing.services import fx_rates_load
from exchange.models import Bid, Rental
from tests.exchange.support import bid_form, buyer_with, orders_state, signed_in
from tests.factories import ProfileFactory

pytestmark = pytest.mark.django_db

NBSP = "\u00a0"
TRADE = "/fr/trade/h100-sxm/"


@pytest.fixture
def rates():
    fx_rates_load(rates={"EUR": Decimal("0.92"), "GBP": Decimal("0.79")},
                  valid_from=datetime(2026, 1, 1, tzinfo=UTC), source="test")


def state() -> tuple:
    return orders_state("max_price_usd")


def main(response) -> str:
    html = response.content.decode()
    return html[html.index("<main"):]


def french(message: str) -> str:
    with translation.override("fr"):
        translated = gettext(message)
    assert translated != message, message
    return translated


# --- 1. prices typed in the page's language ------------------------------------------------------

def test_the_price_field_is_text_in_the_pages_notation(client, demo_book, rates):
    html = client.get(TRADE).content.decode()
    assert 'type="number"' not in html
    assert '<input type="text" name="max_price_usd" value="2,88" inputmode="decimal"' in html
    assert 'name="hours" inputmode="numeric"' in html


@pytest.mark.parametrize("typed", ["0,50", "0.50"])
def test_a_french_bid_of_0_50_rests_at_0_50(demo_book, rates, open_market, ed25519_public_key, typed):
    buyer = buyer_with()
    response = signed_in(buyer).post(f"{TRADE}bid/", bid_form(ed25519_public_key, max_price_usd=typed))
    assert response["Location"] == "/fr/account/orders/"
    bid = Bid.objects.get(buyer=buyer)
    assert bid.max_price_usd == Decimal("0.50") and bid.state == "open"
    assert not Rental.objects.exists()


@pytest.mark.parametrize("typed", ["1 000,50", "1.000,50", "1,000.50", "١", "１", "0,5e1", "NaN", "2,505"])
def test_prices_the_parser_refuses_place_nothing(demo_book, rates, open_market, ed25519_public_key, typed):
    buyer = buyer_with()
    before = state()
    response = signed_in(buyer).post(f"{TRADE}bid/", bid_form(ed25519_public_key, max_price_usd=typed))
    assert response.status_code == 400 and 'class="field-error"' in response.content.decode()
    assert escape(typed) in response.content.decode()  # the field keeps what was typed
    assert state() == before


@pytest.mark.parametrize("typed", ["١٠٠", "１００", "1 000"])
def test_hours_take_ascii_digits_only(demo_book, rates, ed25519_public_key, typed):
    buyer = buyer_with()
    before = state()
    response = signed_in(buyer).post(f"{TRADE}bid/", bid_form(ed25519_public_key, hours=typed))
    assert response.status_code == 400
    assert state() == before


# --- 2. a bid that would buy at once asks first; a resting bid says where it rests -----------------

def test_a_crossing_bid_shows_what_it_buys_and_is_placed_only_once_confirmed(
    demo_book, rates, open_market, ed25519_public_key
):
    buyer = buyer_with()
    client = signed_in(buyer)
    before = state()
    form = bid_form(ed25519_public_key, max_price_usd="3,00", hours="2")
    response = client.post(f"{TRADE}bid/", form)
    assert response.status_code == 200
    sentence = french("This bid buys now at %(price)s per GPU-hour, %(total)s for %(hours)s h.") % {
        "price": f"2,88{NBSP}$US", "total": f"5,76{NBSP}$US", "hours": "2",
    }
    assert sentence in main(response)
    assert 'name="confirmed_price_usd" value="2.88"' in main(response)
    assert f'value="{ed25519_public_key}"' in main(response)
    assert 'name="max_price_usd" value="3,00"' in main(response)
    assert state() == before
    response = client.post(f"{TRADE}bid/", form | {"confirmed_price_usd": "2.88"})
    rental = Rental.objects.get(buyer=buyer)
    assert response["Location"] == f"/fr/account/rentals/{rental.pk}/"
    assert rental.price_usd == Decimal("2.88") and rental.hours == 2


def test_a_confirmation_of_a_price_that_moved_asks_again(demo_book, rates, open_market, ed25519_public_key):
    buyer = buyer_with()
    before = state()
    form = bid_form(ed25519_public_key, max_price_usd="3,00", confirmed_price_usd="2.50")
    response = signed_in(buyer).post(f"{TRADE}bid/", form)
    assert response.status_code == 200
    assert french("The best offer changed since the page showed it: check the new price.") in main(response)
    assert 'name="confirmed_price_usd" value="2.88"' in main(response)
    assert state() == before


def preview(client, price: str) -> str:
    response = client.post(f"{TRADE}preview/", {"gpus": "1", "max_price_usd": price, "hours": ""})
    return response.content.decode()


def test_the_preview_says_a_bid_buys_now_or_where_it_rests(
    client, demo_book, rates, open_market, ed25519_public_key
):
    crossing = preview(client, "2,88")
    assert 'data-testid="preview-crossing"' in crossing and f"2,88{NBSP}$US" in crossing
    resting = preview(client, "0,50")
    assert french("This bid rests in the book as the best bid.") in resting
    other = buyer_with()
    for price in ("0.60", "0.50"):
        signed_in(other).post(f"{TRADE}bid/", bid_form(ed25519_public_key, max_price_usd=price))
    resting = preview(client, "0,50")
    assert "2 enchères" in resting and f"0,60{NBSP}$US" in resting


def test_while_the_market_is_closed_a_high_bid_rests_without_asking(demo_book, rates, ed25519_public_key):
    buyer = buyer_with()
    response = signed_in(buyer).post(f"{TRADE}bid/", bid_form(ed25519_public_key, max_price_usd="3,00"))
    assert response["Location"] == "/fr/account/orders/"
    assert Bid.objects.get(buyer=buyer).state == "open"


# --- 3. buy now in a region -------------------------------------------------------------------------

def buy_form(key, **overrides):
    shown = {"price_1": "2,88", "price_2": "2,88", "price_4": "2,88", "price_8": "3,23"}
    form = bid_form(key, **shown | overrides)
    del form["max_price_usd"]
    return form


def test_buy_now_in_a_region_of_the_shown_price_asks_once_then_buys(
    demo_book, rates, open_market, ed25519_public_key
):
    buyer = buyer_with()
    client = signed_in(buyer)
    before = state()
    form = buy_form(ed25519_public_key, region="europe")
    response = client.post(f"{TRADE}buy/", form)
    assert response.status_code == 200 and 'name="confirmed_price_usd" value="2.88"' in main(response)
    assert "La meilleure offre a changé" not in main(response)
    assert state() == before
    response = client.post(f"{TRADE}buy/", form | {"confirmed_price_usd": "2.88"})
    rental = Rental.objects.get(buyer=buyer)
    assert response["Location"] == f"/fr/account/rentals/{rental.pk}/"
    assert rental.price_usd == Decimal("2.88") and rental.server.region == "europe"


def test_buy_now_in_a_dearer_region_quotes_that_region_then_buys(
    demo_book, rates, open_market, ed25519_public_key
):
    buyer = buyer_with()
    client = signed_in(buyer)
    before = state()
    form = buy_form(ed25519_public_key, region="north-america", hours="2")
    response = client.post(f"{TRADE}buy/", form)
    assert response.status_code == 200
    sentence = french(
        "The best offer for this order is %(price)s per GPU-hour, %(total)s for %(hours)s h."
    ) % {"price": f"3,66{NBSP}$US", "total": f"7,32{NBSP}$US", "hours": "2"}
    assert sentence in main(response)
    assert "La meilleure offre a changé" not in main(response)
    assert state() == before
    response = client.post(f"{TRADE}buy/", form | {"confirmed_price_usd": "3.66"})
    rental = Rental.objects.get(buyer=buyer)
    assert response["Location"] == f"/fr/account/rentals/{rental.pk}/"
    assert rental.price_usd == Decimal("3.66") and rental.server.region == "north-america"


def test_buy_now_where_no_server_can_fill_it_says_so(demo_book, rates, open_market, ed25519_public_key):
    buyer = buyer_with()
    before = state()
    form = buy_form(ed25519_public_key, gpus="8", region="asia-pacific")
    response = signed_in(buyer).post(f"{TRADE}buy/", form)
    assert response.status_code == 400
    assert "Asie-Pacifique" in main(response)
    assert state() == before


def test_a_buy_now_that_lost_its_offer_asks_again_with_a_new_token(
    demo_book, rates, open_market, ed25519_public_key, monkeypatch
):
    from exchange import selectors

    buyer = buyer_with()
    # The page quoted a price an instant before another buyer took the offer: the order fills
    # nothing (its maximum is below every offer left).
    quotes = iter([Decimal("1.00"), Decimal("2.88")])
    monkeypatch.setattr(
        selectors, "order_offer_best",
        lambda **terms: selectors.OfferQuote(price=next(quotes), region="europe", reliability=None),
    )
    form = buy_form(ed25519_public_key, price_1="1,00", confirmed_price_usd="1.00")
    response = signed_in(buyer).post(f"{TRADE}buy/", form)
    assert response.status_code == 200 and 'name="confirmed_price_usd" value="2.88"' in main(response)
    assert f'value="{form["form_token"]}"' not in main(response)
    assert not Rental.objects.exists()
    assert Bid.objects.get(buyer=buyer).state == "cancelled"


# --- 4. the preview validates as the order does, and never answers 5xx -----------------------------

@pytest.mark.parametrize(
    "terms",
    [
        {"max_price_usd": "٢,٥٠"}, {"max_price_usd": "２.５０"}, {"gpus": "١"}, {"hours": "٢"},
        {"max_price_usd": "NaN"}, {"max_price_usd": "sNaN"}, {"max_price_usd": "1e30"},
        {"max_price_usd": "1e999999"}, {"hours": "99999999999999999999999999999"}, {"hours": "0"},
        {"max_price_usd": "2,505"}, {"max_price_usd": "100,01"}, {"gpus": "3"}, {"region": "mars"},
    ],
)
def test_the_preview_refuses_what_the_order_refuses(demo_book, rates, ed25519_public_key, terms):
    buyer = buyer_with()
    client = signed_in(buyer)
    data = {"gpus": "1", "max_price_usd": "2,50", "hours": "2", "region": ""} | terms
    preview = client.post(f"{TRADE}preview/", data).content.decode()
    assert "Par heure" not in preview and "<li>" in preview  # the reason, not a cost
    order = client.post(f"{TRADE}bid/", bid_form(ed25519_public_key, **data))
    assert order.status_code == 400 and not Bid.objects.exists()


def test_the_preview_shows_the_cost_of_what_the_order_accepts(client, demo_book, rates):
    preview = client.post(f"{TRADE}preview/", {"gpus": "2", "max_price_usd": "2,50", "hours": "3"})
    assert f"Par heure{NBSP}: 5,00{NBSP}$US" in preview.content.decode()


@pytest.mark.parametrize(
    "terms",
    [{"max_price_usd": "NaN"}, {"max_price_usd": "sNaN"}, {"max_price_usd": "1e30"},
     {"max_price_usd": "1e999999"}, {"hours": "99999999999999999999999999999"}],
)
def test_hostile_previews_on_every_trade_page_with_and_without_javascript(client, demo_book, rates, terms):
    client.raise_request_exception = False
    data = {"gpus": "1", "max_price_usd": "2,50", "hours": "2"} | terms
    for slug in demo_book:
        for path in (f"/fr/trade/{slug}/preview/", f"/fr/trade/{slug}/"):
            response = client.post(path, data | {"preview": "1"})
            assert response.status_code == 200, path
            assert "Par heure" not in response.content.decode()
        assert client.get(f"/fr/trade/{slug}/", data | {"preview": "1"}).status_code == 200


# --- 5. a link cannot fill the forms ---------------------------------------------------------------

def test_a_link_fills_neither_the_key_nor_the_price(client, demo_book, rates, ed25519_public_key):
    stranger_key = ed25519_public_key.replace("buyer@laptop", "stranger@evil")
    response = client.get(TRADE, {
        "preview": "1", "ssh_public_key": stranger_key, "max_price_usd": "99.99", "gpus": "8", "hours": "700",
    })
    html = main(response)  # the forms (the language links keep the query string as it came)
    assert response.status_code == 200
    assert "stranger@evil" not in html and "99,99" not in html and "99.99" not in html
    # The GPUs and hours a link may choose (the fit calculator's "rent this"), never the key or price.
    assert 'value="2,88"' in html  # the best ask, as always


def test_the_preview_is_never_a_get(client, demo_book):
    assert client.get(f"{TRADE}preview/", {"gpus": "1", "max_price_usd": "2.50"}).status_code == 405


def test_the_preview_without_javascript_posts_and_keeps_the_values(demo_book, rates, ed25519_public_key):
    client = Client()
    client.force_login(ProfileFactory().user)
    form = bid_form(ed25519_public_key, max_price_usd="0,75", hours="3", preview="1")
    html = client.post(TRADE, form).content.decode()
    assert 'name="max_price_usd" value="0,75"' in html and 'value="3"' in html
    assert f"{form['form_token']}" in html and ed25519_public_key in html
    assert "Par heure" in html and not Bid.objects.exists()


def test_changing_an_order_after_its_confirmation_keeps_the_values_but_not_the_confirmation(
    demo_book, rates, open_market, ed25519_public_key
):
    client = signed_in(buyer_with())
    form = bid_form(ed25519_public_key, max_price_usd="3,00", confirmed_price_usd="2.88", form="bid")
    html = client.post(TRADE, form).content.decode()
    assert 'name="max_price_usd" value="3,00"' in html
    assert 'name="confirmed_price_usd" value="2.88"' not in html
    assert not Bid.objects.exists()


def test_the_form_token_of_a_confirmation_places_one_order(demo_book, rates, open_market, ed25519_public_key):
    client = signed_in(buyer_with())
    form = bid_form(ed25519_public_key, max_price_usd="3,00", confirmed_price_usd="2.88",
                    form_token=str(uuid.uuid4()))
    client.post(f"{TRADE}bid/", form)
    client.post(f"{TRADE}bid/", form)
    assert Bid.objects.count() == 1 and Rental.objects.count() == 1


@pytest.mark.parametrize("bids", [0, 40])
def test_the_confirmation_page_runs_a_fixed_number_of_queries(
    demo_book, rates, open_market, ed25519_public_key, bids, django_assert_max_num_queries
):
    buyer = buyer_with()
    client = signed_in(buyer)
    for _ in range(bids):  # resting bids of the buyer below the best ask
        client.post(f"{TRADE}bid/", bid_form(ed25519_public_key, max_price_usd="1,00"))
    with django_assert_max_num_queries(20):
        response = client.post(f"{TRADE}bid/", bid_form(ed25519_public_key, max_price_usd="3,00"))
    assert response.status_code == 200 and 'name="confirmed_price_usd"' in main(response)
