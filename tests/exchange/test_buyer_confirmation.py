"""Issue 18, buyers: buy now asks once with what it spends (US dollars and the wallet's currency,
the balance after the first hour, the runway, the server's region and reliability), never charges
another price than the one confirmed; the rental page's times, prices and total cost; stopping
asks on its own page."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.selectors import order_spend_preview
from billing.services import fx_rates_load
from exchange.models import Rental, RentalState
from tests.exchange.support import buyer_with, login_ready, orders_state, signed_in
from tests.exchange.test_trade_orders import buy_form

pytestmark = pytest.mark.django_db

NBSP = "\u00a0"
TRADE = "/fr/trade/h100-sxm/"


@pytest.fixture
def rates():
    fx_rates_load(rates={"EUR": Decimal("0.92"), "GBP": Decimal("0.79")},
                  valid_from=datetime(2026, 1, 1, tzinfo=UTC), source="test")


def main(response) -> str:
    html = response.content.decode()
    return html[html.index("<main"):]


def test_the_spend_preview_states_totals_balance_after_and_runway(demo_book, rates):
    buyer = buyer_with("100")  # EUR
    spend = order_spend_preview(user=buyer, price_usd=Decimal("2.88"), gpus=2, hours=3)
    assert spend.currency == "EUR" and spend.per_hour_usd == Decimal("5.76")
    assert spend.total_usd == Decimal("17.28")
    assert spend.per_hour == Decimal("5.30") and spend.total == Decimal("15.90")
    assert spend.balance_after_first_hour == Decimal("94.70")
    assert spend.runway_hours == 18 and spend.other_rentals == 0  # 100 / 5.30
    assert spend.covers_first_hour


def test_buy_now_shows_the_spend_and_places_nothing_until_confirmed(
    demo_book, rates, open_market, ed25519_public_key, django_assert_max_num_queries
):
    buyer = buyer_with("100")
    client = signed_in(buyer)
    before = orders_state()
    with django_assert_max_num_queries(20):
        response = client.post(f"{TRADE}buy/", buy_form(ed25519_public_key, hours="2"))
    html = main(response)
    assert response.status_code == 200
    assert f"5,76{NBSP}$US · 5,30{NBSP}€" in html  # 2 h at 2.88 USD, at 0.92 EUR per USD
    assert f"97,35{NBSP}€" in html  # the balance after the first hour
    assert 'data-testid="confirm-runway"' in html and 'data-testid="confirm-server"' in html
    assert "fiabilité" in html
    assert orders_state() == before


def test_a_confirmation_at_a_price_that_moved_down_asks_again_and_charges_nothing(
    demo_book, rates, open_market, ed25519_public_key
):
    buyer = buyer_with("100")
    before = orders_state()
    # The buyer confirmed 3.00; the best offer is 2.88 now: never a price other than the one confirmed.
    form = buy_form(ed25519_public_key, confirmed_price_usd="3.00")
    response = signed_in(buyer).post(f"{TRADE}buy/", form)
    assert response.status_code == 200 and 'name="confirmed_price_usd" value="2.88"' in main(response)
    assert "La meilleure offre a changé" in main(response)
    assert orders_state() == before


@pytest.mark.parametrize("bad", [{"gpus": "3"}, {"hours": "0"}, {"ssh_public_key": "not a key"},
                                 {"confirmed_price_usd": "abc"}])
def test_bad_buy_input_changes_nothing(demo_book, rates, open_market, ed25519_public_key, bad):
    buyer = buyer_with("100")
    before = orders_state()
    form = buy_form(ed25519_public_key, confirmed_price_usd="2.88") | bad
    response = signed_in(buyer).post(f"{TRADE}buy/", form)
    assert response.status_code == 400
    assert orders_state() == before


def bought(buyer, key, **extra) -> Rental:
    signed_in(buyer).post(f"{TRADE}buy/", buy_form(key, confirmed_price_usd="2.88", **extra))
    return Rental.objects.get(buyer=buyer)


def test_the_rental_page_shows_times_in_the_current_zone_end_time_left_and_both_prices(
    demo_book, rates, open_market, ed25519_public_key, django_assert_max_num_queries
):
    buyer = buyer_with("100")
    rental = bought(buyer, ed25519_public_key, hours="3")
    login_ready(rental)
    client = signed_in(buyer)
    with django_assert_max_num_queries(15):
        html = main(client.get(f"/fr/account/rentals/{rental.pk}/"))
    assert f"2,88{NBSP}$US · 2,65{NBSP}€" in html
    assert 'data-testid="rental-ends"' in html and 'data-testid="rental-time-left"' in html
    assert "UTC</dd>" in html  # the zone's abbreviation
    assert "Coût total" not in html
    with timezone.override("Europe/Lisbon"):
        # The zone a middleware activates for the user: the same moment, named in that zone.
        from marketplace.formatting import moment
        assert moment(rental.started_at).endswith(("WET", "WEST"))


def test_stopping_asks_on_its_own_page_then_stops(demo_book, rates, open_market, ed25519_public_key):
    buyer = buyer_with("100")
    rental = bought(buyer, ed25519_public_key)
    login_ready(rental)
    client = signed_in(buyer)
    before = orders_state()
    page = client.get(f"/fr/account/rentals/{rental.pk}/stop/")
    assert page.status_code == 200 and "n'est pas remboursée" in main(page)
    unconfirmed = client.post(f"/fr/account/rentals/{rental.pk}/stop/")
    assert unconfirmed.status_code == 200
    assert orders_state() == before
    client.post(f"/fr/account/rentals/{rental.pk}/stop/", {"confirmed": "1"})
    rental.refresh_from_db()
    assert rental.state == RentalState.ENDED
    html = main(client.get(f"/fr/account/rentals/{rental.pk}/"))
    assert "Coût total" in html
    # Once ended, the stop page sends back to the rental.
    assert client.get(f"/fr/account/rentals/{rental.pk}/stop/")["Location"].endswith(f"/rentals/{rental.pk}/")


def test_a_new_server_is_named_new_rather_than_given_a_score(demo_book, rates, open_market,
                                                            ed25519_public_key):
    # The demo book's servers have no reliability score yet.
    response = signed_in(buyer_with("100")).post(f"{TRADE}buy/", buy_form(ed25519_public_key, hours="2"))
    html = main(response)
    assert "un nouveau serveur sans score de fiabilité pour l’instant</dd>" in html
    assert "fiabilité nouveau" not in html
