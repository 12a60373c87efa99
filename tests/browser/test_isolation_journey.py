"""A French buyer sees how each offer keeps its renters apart (issue 22): the book shows every
offer's isolation level and what a rental gets with each GPU, in French number format; the filter
narrows the book to the levels ticked, and a bid placed from the filtered page accepts only them."""

import re
from decimal import Decimal

import pytest
from playwright.sync_api import expect

from exchange.models import Bid, Market, Rental
from tests.browser.support import buyer_sign_in, french, french_buyer_with_balance
from tests.factories import GpuModelFactory, OfferFactory, ServerFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NBSP, NNBSP = "\u00a0", "\u202f"


@pytest.fixture
def servers():
    gpu = GpuModelFactory(slug="h200", name="H200")
    Market.objects.update_or_create(pk=1, defaults={"is_open": True})

    def ask(price, level, **fields):
        server = ServerFactory(gpu_model=gpu, gpu_count=8, isolation_level=level, **fields)
        OfferFactory(server=server, gpus_offered=8, price_usd=Decimal(price))
        return server

    return {
        "shared": ask("2.00", "shared"),
        "container": ask("2.50", "container", sellable_cpu_cores=128, sellable_memory_mib=1024 * 1024,
                         sellable_disk_gb=16_000),
        "whole": ask("3.00", "whole"),
    }


def test_offers_show_their_level_and_share_and_the_filter_narrows_the_book(
    live_server, servers, page, ed25519_public_key
):
    buyer = french_buyer_with_balance()
    base = live_server.url
    buyer_sign_in(page, base, buyer)
    page.goto(f"{base}/fr/trade/h200/")
    asks = page.locator("#asks")
    expect(asks.get_by_test_id("ask-isolation")).to_have_text(
        ["Serveur partagé", "Conteneur", "Serveur entier"]
    )
    expect(asks.get_by_test_id("ask-resources")).to_have_text([
        "8 vCPU, 64 Gio de RAM, 500 Go de disque par GPU",
        f"16 vCPU, 128 Gio de RAM, 2{NNBSP}000 Go de disque par GPU",
        "8 vCPU, 64 Gio de RAM, 500 Go de disque par GPU",
    ])

    levels = page.locator("#trade-filter")
    levels.get_by_label("Serveur partagé").uncheck()
    levels.get_by_label("Serveur entier").uncheck()
    levels.get_by_role("button", name=french("Show these offers")).click()
    page.wait_for_url(re.compile(r".*/fr/trade/h200/\?.*isolation=container"))
    expect(asks.get_by_test_id("ask-isolation")).to_have_text(["Conteneur"])
    expect(asks).to_contain_text(f"Offres des serveurs vendus en{NBSP}: Conteneur.")
    expect(page.locator("#best-ask, [data-testid=best-ask]").first).to_have_text(f"2,50{NBSP}$US")

    bid = page.locator("form[action$='/bid/']")
    expect(bid.get_by_label("Conteneur")).to_be_checked()
    expect(bid.get_by_label("Serveur partagé")).not_to_be_checked()
    bid.locator("input[name=max_price_usd]").fill("3,00")
    bid.locator("input[name=hours]").fill("2")
    # The live preview quotes the container server, not the cheaper shared one.
    expect(page.get_by_test_id("preview-crossing")).to_contain_text(f"2,50{NBSP}$US")
    bid.locator("textarea[name=ssh_public_key]").fill(ed25519_public_key)
    bid.get_by_role("button", name=french("Place bid")).click()
    expect(page.get_by_test_id("confirm-isolation")).to_have_text("Conteneur")
    page.get_by_test_id("confirm-order").click()
    page.wait_for_url(re.compile(r".*/fr/account/rentals/\d+/$"))
    expect(page.get_by_test_id("rental-isolation")).to_have_text(
        f"Conteneur · 16 vCPU, 128 Gio de RAM, 2{NNBSP}000 Go de disque par GPU"
    )
    assert Bid.objects.get(buyer=buyer).isolation_levels == "container"
    rental = Rental.objects.get(buyer=buyer)
    assert (rental.server_id, rental.price_usd, rental.isolation_level) == (
        servers["container"].pk, Decimal("2.50"), "container",
    )
