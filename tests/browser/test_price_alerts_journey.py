"""A French buyer sets a price alert on the account page (a bad price first), the book moves below
it, the check runs and one email in French waits in the outbox; a second check sends nothing."""

from decimal import Decimal

import pytest
from django.utils import translation
from django.utils.translation import gettext
from playwright.sync_api import expect

from exchange.models import PriceAlert
from exchange.services import offer_post, price_alerts_check
from marketplace.models import OutboxEmail
from tests.browser.support import PASSWORD, new_page
from tests.factories import GpuModelFactory, ProfileFactory, ServerFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def french(message: str) -> str:
    with translation.override("fr"):
        return gettext(message)


def test_a_buyer_sets_an_alert_in_french_and_gets_one_email(live_server, browser):
    gpu = GpuModelFactory(name="H100 SXM", slug="h100-sxm")
    buyer = ProfileFactory(preferred_language="fr", billing_country="FR").user
    page = new_page(browser, "fr")
    base = live_server.url
    page.goto(f"{base}/fr/account/login/")
    page.locator("input[name=login]").fill(buyer.email)
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("main form button[type=submit]").last.click()
    page.wait_for_url(f"{base}/fr/account/")
    page.locator("main").get_by_role("link", name=french("Price alerts")).click()
    page.wait_for_url(f"{base}/fr/account/price-alerts/")
    expect(page.get_by_role("heading", level=1)).to_have_text(french("Your price alerts"))

    page.locator("select[name=gpu_model]").select_option(label="H100 SXM")
    page.locator("select[name=gpus]").select_option("2")
    page.locator("input[name=threshold_usd]").fill("deux euros")
    page.get_by_role("button", name=french("Set the alert")).click()
    expect(page.locator(".field-error")).to_be_visible()
    assert not PriceAlert.objects.exists()

    page.locator("input[name=threshold_usd]").fill("2,50")
    page.get_by_role("button", name=french("Set the alert")).click()
    expect(page.locator("#price-alerts")).to_contain_text("H100 SXM")
    expect(page.locator("#price-alerts")).to_contain_text("2,50\u00a0$US")
    alert = PriceAlert.objects.get()
    assert (alert.buyer, alert.gpus, alert.threshold_usd) == (buyer, 2, Decimal("2.50"))

    # The book moves: an offer below the threshold, posted through the service.
    offer_post(server=ServerFactory(gpu_model=gpu, gpu_count=4), gpus=4, price_usd=Decimal("2.40"))
    assert price_alerts_check().notified == 1
    assert price_alerts_check().notified == 0
    (email,) = OutboxEmail.objects.filter(recipient=buyer.email)
    assert email.language == "fr" and "2,40\u00a0$US" in email.subject
    assert f"/fr/price-alerts/stop/{alert.unsubscribe_token}/" in email.body

    page.reload()
    reached = french("Reached: waiting for the price to rise above it")
    expect(page.locator("#price-alerts")).to_contain_text(reached)
    page.locator("#price-alerts").get_by_role("button").click()
    expect(page.locator("#price-alerts")).to_have_count(0)
    assert not PriceAlert.objects.exists()
    page.context.close()
