"""A bid's expiry on the trade page (issue 19): chosen as a duration named in the page's language
(the browser's date picker followed the browser's locale), the moment it ends shown on the buyer's
orders in their time zone."""

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone, translation
from django.utils.html import escape
from django.utils.translation import gettext

from billing.services import fx_rates_load
from exchange.forms import BID_EXPIRIES
from exchange.models import Bid, TimeInForce
from marketplace import formatting
from tests.exchange.support import bid_form, buyer_with, orders_state, place, signed_in

pytestmark = pytest.mark.django_db

TRADE = "/fr/trade/h100-sxm/"


@pytest.fixture
def rates():
    fx_rates_load(rates={"EUR": Decimal("0.92"), "GBP": Decimal("0.79")},
                  valid_from=datetime(2026, 1, 1, tzinfo=UTC), source="test")


def translated(message: str, language: str) -> str:
    with translation.override(language):
        text = gettext(message)
    assert text != message, message
    return text


def bid_posted(client, key, **overrides):
    """Post a resting bid (below the best ask, 2,88) and return the response and the moments
    before and after."""
    before = timezone.now()
    response = client.post(f"{TRADE}bid/", bid_form(key, **overrides))
    return response, before, timezone.now()


@pytest.mark.parametrize("choice", list(BID_EXPIRIES))
def test_each_choice_sets_the_expiry_that_long_from_now(demo_book, rates, ed25519_public_key, choice):
    buyer = buyer_with()
    response, before, after = bid_posted(signed_in(buyer), ed25519_public_key, expires_in=choice)
    assert response["Location"] == "/fr/account/orders/"
    bid = Bid.objects.get(buyer=buyer)
    duration = BID_EXPIRIES[choice]
    assert (bid.state, bid.time_in_force) == ("open", TimeInForce.BID)
    assert before + duration <= bid.expires_at <= after + duration
    assert abs(bid.expires_at - (timezone.now() + duration)) < timedelta(seconds=1)


def test_never_rests_until_filled_or_cancelled(demo_book, rates, ed25519_public_key):
    buyer = buyer_with()
    response, _before, _after = bid_posted(signed_in(buyer), ed25519_public_key, expires_in="")
    assert response["Location"] == "/fr/account/orders/"
    assert Bid.objects.get(buyer=buyer).expires_at is None


def test_the_choice_is_a_select_in_the_pages_language_never_by_default(client, demo_book, rates):
    html = client.get(TRADE).content.decode()
    select = re.search(r'<select name="expires_in".*?</select>', html, re.S).group(0)
    assert 'type="datetime-local"' not in html and 'name="expires_at"' not in html
    assert '<option value="24h">Dans 24 heures</option>' in select
    assert '<option value="1h">Dans 1 heure</option>' in select
    assert '<option value="7d">Dans 7 jours</option>' in select
    never = escape(translated("Never (until cancelled)", "fr"))
    assert f'<option value="" selected>{never}</option>' in select


@pytest.mark.parametrize("language", ["pt", "fr"])
@pytest.mark.parametrize("sent", ["2d", "2099-01-01T10:00", "24", "1H", "x" * 300])
def test_an_unknown_choice_is_a_translated_error_and_writes_nothing(
    demo_book, rates, ed25519_public_key, language, sent
):
    buyer = buyer_with()
    before = orders_state("expires_at")
    response = signed_in(buyer).post(
        f"/{language}/trade/h100-sxm/bid/", bid_form(ed25519_public_key, expires_in=sent)
    )
    assert response.status_code == 400
    error = escape(translated("Choose one of the expiry times listed.", language))
    assert f'<p class="field-error" role="alert">{error}</p>' in response.content.decode()
    assert orders_state("expires_at") == before
    assert not Bid.objects.exists()


def test_a_confirmed_bid_counts_its_expiry_from_the_confirmation(
    demo_book, rates, open_market, ed25519_public_key
):
    buyer = buyer_with()
    client = signed_in(buyer)
    form = bid_form(ed25519_public_key, max_price_usd="3,00", expires_in="3d")
    response = client.post(f"{TRADE}bid/", form)
    assert response.status_code == 200 and 'name="expires_in" value="3d"' in response.content.decode()
    assert not Bid.objects.exists()
    before = timezone.now()
    client.post(f"{TRADE}bid/", form | {"confirmed_price_usd": "2.88"})
    bid = Bid.objects.get(buyer=buyer)
    assert before + timedelta(days=3) <= bid.expires_at <= timezone.now() + timedelta(days=3)


def test_the_orders_page_shows_each_expiry_in_the_buyers_zone_in_french(demo_book, rates, ssh_key):
    buyer = buyer_with()
    buyer.profile.time_zone = "Europe/Paris"
    buyer.profile.save(update_fields=["time_zone"])
    gpu = demo_book["h100-sxm"]
    expires = timezone.now() + timedelta(hours=6)
    lapsing = place(buyer, gpu, ssh_key, price="0.50", expires_at=expires).bid
    lasting = place(buyer, gpu, ssh_key, price="0.40").bid
    html = signed_in(buyer).get("/fr/account/orders/").content.decode()
    header = escape(translated("Expires", "fr"))
    assert f'<th scope="col">{header}</th>' in html
    cells = dict(re.findall(r'<tr data-bid="(\d+)">.*?<td data-testid="bid-expires">(.*?)</td>', html, re.S))
    when = formatting.datetime_zone(expires, language="fr", zone="Europe/Paris")
    assert when.endswith(("CET", "CEST")) and when in cells[str(lapsing.pk)]
    assert cells[str(lasting.pk)] == escape(translated("Never", "fr"))


def test_a_buy_now_order_has_no_expiry(demo_book, rates, open_market, ssh_key):
    buyer = buyer_with()
    bought = place(buyer, demo_book["h100-sxm"], ssh_key, price="3.00", tif=TimeInForce.BUY_NOW).bid
    html = signed_in(buyer).get("/fr/account/orders/").content.decode()
    cell = re.search(rf'<tr data-bid="{bought.pk}">.*?<td data-testid="bid-expires">(.*?)</td>', html, re.S)
    assert cell.group(1) == formatting.NO_FIGURE


def test_the_orders_page_reads_as_much_for_many_bids_as_for_one(
    demo_book, rates, ssh_key, django_assert_max_num_queries
):
    buyer = buyer_with()
    gpu = demo_book["h100-sxm"]
    client = signed_in(buyer)
    place(buyer, gpu, ssh_key, price="0.50", expires_at=timezone.now() + timedelta(days=1))
    with django_assert_max_num_queries(30) as one:
        assert client.get("/fr/account/orders/").status_code == 200
    for cents in range(10, 20):
        place(buyer, gpu, ssh_key, price=f"0.{cents}", expires_at=timezone.now() + timedelta(hours=cents))
    with django_assert_max_num_queries(len(one.captured_queries)):
        assert client.get("/fr/account/orders/").status_code == 200
