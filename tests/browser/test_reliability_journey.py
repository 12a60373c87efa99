"""A French buyer filters the trade page by reliability (issue 16): the filter hides the offers of
servers below it (and "new" ones), and a bid placed from the filtered page carries the minimum."""

import re
from decimal import Decimal

import pytest
from django.utils import translation
from django.utils.translation import gettext, pgettext
from playwright.sync_api import expect

from exchange.models import Bid, Market, Rental
from tests.browser.support import PASSWORD, french_buyer_with_balance
from tests.factories import GpuModelFactory, OfferFactory, ServerFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NBSP = "\u00a0"


def french(message: str) -> str:
    with translation.override("fr"):
        return gettext(message)


@pytest.fixture
def servers():
    gpu = GpuModelFactory(slug="h200", name="H200")
    Market.objects.update_or_create(pk=1, defaults={"is_open": True})

    def ask(price, reliability, gpus):
        server = ServerFactory(gpu_model=gpu, reliability=reliability)
        OfferFactory(server=server, gpus_offered=gpus, price_usd=Decimal(price))
        return server

    return {"new": ask("2.00", None, 2), "ninety": ask("2.00", Decimal("0.900"), 4),
            "reliable": ask("2.50", Decimal("0.995"), 8)}


def test_the_filter_hides_less_reliable_offers_and_the_bid_carries_it(
    live_server, servers, page, ed25519_public_key
):
    buyer = french_buyer_with_balance()
    base = live_server.url
    page.goto(f"{base}/fr/account/login/")
    page.locator("input[name=login]").fill(buyer.email)
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("main form button[type=submit]").last.click()
    page.wait_for_url(f"{base}/fr/account/")
    page.goto(f"{base}/fr/trade/h200/")
    asks = page.locator("#asks")
    with translation.override("fr"):
        new = pgettext("reliability without a score yet", "new")
    expect(asks).to_contain_text(f"2 GPU, {new}")
    expect(asks).to_contain_text(f"4 GPU, 90{NBSP}%")

    page.locator("#trade-filter select[name=min_reliability]").select_option("0.95")
    page.locator("#trade-filter").get_by_role("button", name=french("Show these offers")).click()
    # The filter's isolation levels, all ticked, go with it.
    page.wait_for_url(re.compile(r".*/fr/trade/h200/\?min_reliability=0\.95&isolation=container&"))
    expect(asks).to_contain_text(f"8 GPU, 99,5{NBSP}%")
    expect(asks).not_to_contain_text(new)
    expect(asks).not_to_contain_text(f"90{NBSP}%")

    bid = page.locator("form[action$='/bid/']")
    assert bid.locator("select[name=min_reliability]").input_value() == "0.95"
    bid.locator("input[name=max_price_usd]").fill("3,00")
    bid.locator("input[name=hours]").fill("2")
    # The live preview quotes the reliable server's price, not the cheaper ones below the minimum.
    expect(page.get_by_test_id("preview-crossing")).to_contain_text(f"2,50{NBSP}$US")
    bid.locator("textarea[name=ssh_public_key]").fill(ed25519_public_key)
    bid.get_by_role("button", name=french("Place bid")).click()
    expect(page.get_by_test_id("confirm-min-reliability")).to_have_text(f"95{NBSP}%")
    assert not Bid.objects.exists()
    page.get_by_test_id("confirm-order").click()
    page.wait_for_url(re.compile(r".*/fr/account/rentals/\d+/$"))
    placed = Bid.objects.get(buyer=buyer)
    assert placed.min_reliability == Decimal("0.950")
    rental = Rental.objects.get(buyer=buyer)
    assert (rental.server_id, rental.price_usd) == (servers["reliable"].pk, Decimal("2.50"))
