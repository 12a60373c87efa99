"""A French buyer's orders on the trade page (issue 14, items 1 to 3): a price typed as "0,50",
a bid that would buy at once, buy now in a region; a bid's expiry chosen in the page's language
(issue 19)."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone, translation
from django.utils.translation import gettext
from playwright.sync_api import expect

from accounts.models import Wallet
from billing.models import LedgerEntry
from exchange.models import Bid, Market, Rental, SshKey
from marketplace import formatting
from tests.browser.support import PASSWORD, french_buyer_with_balance

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NBSP = "\u00a0"


def french(message: str) -> str:
    with translation.override("fr"):
        return gettext(message)


def signed_in_on_the_trade_page(page, base: str, buyer) -> None:
    page.goto(f"{base}/fr/account/login/")
    page.locator("input[name=login]").fill(buyer.email)
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("main form button[type=submit]").last.click()
    page.wait_for_url(f"{base}/fr/account/")
    page.goto(f"{base}/fr/trade/h100-sxm/")


@pytest.fixture
def buyer(demo_book):
    Market.objects.update_or_create(pk=1, defaults={"is_open": True})
    return french_buyer_with_balance()


def test_typing_0_50_places_a_resting_bid_at_0_50(live_server, buyer, page, ed25519_public_key):
    signed_in_on_the_trade_page(page, live_server.url, buyer)
    bid = page.locator("form[action$='/bid/']")
    price = bid.locator("input[name=max_price_usd]")
    assert price.input_value() == "2,88"  # the best ask, in French notation
    price.fill("")
    price.press_sequentially("0,50")
    assert price.input_value() == "0,50"
    bid.locator("input[name=hours]").fill("2")
    expect(page.get_by_test_id("preview-resting")).to_have_text(
        french("This bid rests in the book as the best bid.")
    )  # the live preview, by htmx
    bid.locator("textarea[name=ssh_public_key]").fill(ed25519_public_key)
    bid.get_by_role("button", name=french("Place bid")).click()
    page.wait_for_url(f"{live_server.url}/fr/account/orders/")
    assert f"0,50{NBSP}$US" in page.locator("#orders").inner_text()
    placed = Bid.objects.get(buyer=buyer)
    assert placed.max_price_usd == Decimal("0.50") and placed.state == "open"
    assert not Rental.objects.exists()


def test_a_crossing_bid_shows_the_confirmation_first(live_server, buyer, page, ed25519_public_key):
    signed_in_on_the_trade_page(page, live_server.url, buyer)
    bid = page.locator("form[action$='/bid/']")
    bid.locator("input[name=max_price_usd]").fill("3,00")
    bid.locator("input[name=hours]").fill("2")
    sentence = french("This bid buys now at %(price)s per GPU-hour, %(total)s for %(hours)s h.") % {
        "price": f"2,88{NBSP}$US", "total": f"5,76{NBSP}$US", "hours": "2",
    }
    expect(page.get_by_test_id("preview-crossing")).to_have_text(sentence)  # the live preview
    bid.locator("textarea[name=ssh_public_key]").fill(ed25519_public_key)
    balance, entries = Wallet.objects.get(user=buyer).balance, LedgerEntry.objects.count()
    bid.get_by_role("button", name=french("Place bid")).click()
    page.get_by_test_id("confirm-price").wait_for()
    assert page.get_by_test_id("confirm-price").inner_text() == sentence
    assert not Bid.objects.exists()
    assert (Wallet.objects.get(user=buyer).balance, LedgerEntry.objects.count()) == (balance, entries)
    page.get_by_test_id("confirm-order").click()
    page.wait_for_url(re.compile(r".*/fr/account/rentals/\d+/$"))
    rental = Rental.objects.get(buyer=buyer)
    assert rental.price_usd == Decimal("2.88") and rental.hours == 2


def test_buy_now_in_a_region_succeeds(live_server, buyer, page, ed25519_public_key):
    signed_in_on_the_trade_page(page, live_server.url, buyer)
    buy = page.locator("form[action$='/buy/']")
    buy.locator("select[name=gpus]").select_option("1")
    buy.locator("select[name=region]").select_option("north-america")
    buy.locator("textarea[name=ssh_public_key]").fill(ed25519_public_key)
    buy.get_by_role("button", name=french("Buy now")).click()
    page.get_by_test_id("confirm-price").wait_for()
    assert f"3,66{NBSP}$US" in page.get_by_test_id("confirm-price").inner_text()
    page.get_by_test_id("confirm-order").click()
    page.wait_for_url(re.compile(r".*/fr/account/rentals/\d+/$"))
    rental = Rental.objects.get(buyer=buyer)
    assert rental.price_usd == Decimal("3.66") and rental.server.region == "north-america"
    assert page.get_by_test_id("rental-state").inner_text()


def test_a_key_pasted_on_a_bid_is_saved_and_offered_on_the_next(live_server, buyer, page, ed25519_public_key):
    signed_in_on_the_trade_page(page, live_server.url, buyer)
    bid = page.locator("form[action$='/bid/']")
    bid.locator("input[name=max_price_usd]").fill("0,50")
    bid.locator("textarea[name=ssh_public_key]").fill("ssh-dss AAAA")  # refused: nothing is placed
    bid.locator("input[name=save_key_as]").fill("Mon portable")
    bid.get_by_role("button", name=french("Place bid")).click()
    expect(page.locator("form[action$='/bid/'] .field-error")).to_be_visible()
    assert not Bid.objects.exists() and not SshKey.objects.exists()

    bid = page.locator("form[action$='/bid/']")
    bid.locator("textarea[name=ssh_public_key]").fill(ed25519_public_key)
    bid.get_by_role("button", name=french("Place bid")).click()
    page.wait_for_url(f"{live_server.url}/fr/account/orders/")
    saved = french("Your key is saved as “%(name)s”: your next orders offer it.") % {"name": "Mon portable"}
    expect(page.locator(".messages")).to_contain_text(saved)
    key = SshKey.objects.get(buyer=buyer)

    page.goto(f"{live_server.url}/fr/trade/h100-sxm/")
    bid = page.locator("form[action$='/bid/']")
    expect(bid.locator("input[name=ssh_key]:checked")).to_have_value(str(key.pk))
    chosen = bid.locator(f"input[name=ssh_key][value='{key.pk}']")
    expect(bid.locator(f"label[for='{chosen.get_attribute('id')}']")).to_contain_text("Mon portable")
    paste = bid.locator("textarea[name=ssh_public_key]")
    expect(paste).to_be_hidden()  # a saved key is chosen: nothing to paste
    bid.get_by_label(french("Another key, pasted below")).check()
    expect(paste).to_be_visible()
    chosen.check()
    expect(paste).to_be_hidden()
    bid.locator("input[name=max_price_usd]").fill("0,60")
    bid.get_by_role("button", name=french("Place bid")).click()
    page.wait_for_url(f"{live_server.url}/fr/account/orders/")
    assert [placed.ssh_public_key for placed in Bid.objects.order_by("pk")] == [key.public_key] * 2


def test_a_bid_expiring_in_24_hours_in_a_browser_speaking_english(
    live_server, buyer, browser, ed25519_public_key
):
    buyer.profile.time_zone = "Europe/Paris"
    buyer.profile.save(update_fields=["time_zone"])
    # The browser's own language is not the page's: a date picker would follow the browser's.
    context = browser.new_context(locale="en-US")
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        signed_in_on_the_trade_page(page, live_server.url, buyer)
        bid = page.locator("form[action$='/bid/']")
        bid.locator("input[name=max_price_usd]").fill("0,50")
        expires = bid.get_by_label(french("Expires"))  # its label, "Expire :"
        expect(expires).to_have_value("")  # never, unless the buyer chooses
        expires.select_option(label="Dans 24 heures")
        bid.locator("textarea[name=ssh_public_key]").fill(ed25519_public_key)
        before = timezone.now()
        bid.get_by_role("button", name=french("Place bid")).click()
        page.wait_for_url(f"{live_server.url}/fr/account/orders/")
        placed = Bid.objects.get(buyer=buyer)
        assert before + timedelta(hours=24) <= placed.expires_at <= timezone.now() + timedelta(hours=24)
        shown = formatting.datetime_zone(placed.expires_at, language="fr", zone="Europe/Paris")
        assert shown.endswith(("CET", "CEST"))
        expect(page.locator(f"tr[data-bid='{placed.pk}'] [data-testid=bid-expires]")).to_have_text(shown)
    finally:
        context.close()
