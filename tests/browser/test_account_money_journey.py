"""The buyer's time zone, top-ups in dollars and the invoice on a phone, in Portuguese and French."""

import re

import pytest
from django.core import mail

from accounts.models import Profile
from billing.models import Invoice
from tests.browser.support import PASSWORD, french_buyer_with_balance

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NBSP = "\u00a0"


def test_portuguese_sign_up_proposes_the_browsers_zone_and_tops_up_in_dollars(live_server, browser):
    base = live_server.url
    context = browser.new_context(locale="pt-PT", timezone_id="Atlantic/Azores")
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        page.goto(f"{base}/pt/account/signup/")
        assert page.locator("input[name=time_zone]").input_value() == "Atlantic/Azores"
        page.locator("input[name=email]").fill("rui@example.com")
        page.locator("input[name=password1]").fill(PASSWORD)
        page.locator("input[name=password2]").fill(PASSWORD)
        page.locator("form button[type=submit]").last.click()
        page.wait_for_load_state()
        link = re.search(r"https?://\S+/confirm-email/\S+/", mail.outbox[0].body).group(0)
        page.goto(link)
        page.locator("main form button[type=submit]").click()
        page.wait_for_url(f"{base}/pt/account/")
        assert Profile.objects.get(user__email="rui@example.com").time_zone == "Atlantic/Azores"

        page.goto(f"{base}/pt/account/profile/")
        assert page.get_by_label("Fuso horário").input_value() == "Atlantic/Azores"
        # December in the Azores: one hour behind UTC, written by its abbreviation.
        assert re.search(r"\d\d:\d\d -01\b", page.get_by_test_id("time-zone-now").inner_text())

        page.goto(f"{base}/pt/account/top-up/")
        assert page.get_by_label(f"€{NBSP}50,00").count() == 1
        page.get_by_test_id("currency-chips").get_by_role("link", name="USD").click()
        page.wait_for_url(f"{base}/pt/account/top-up/?currency=USD")
        main = page.locator("main").inner_text()
        assert f"US${NBSP}25,00" in main and f"US${NBSP}10.000,00" in main and "€" not in main
        assert page.get_by_label(f"US${NBSP}100,00").count() == 1
    finally:
        context.close()


def test_french_invoice_fits_a_phone(live_server, browser):
    base = live_server.url
    user = french_buyer_with_balance()
    Profile.objects.filter(user=user).update(time_zone="Europe/Paris")
    number = Invoice.objects.get(top_up__user=user).number
    context = browser.new_context(locale="fr-FR", viewport={"width": 390, "height": 844})
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        page.goto(f"{base}/fr/account/login/")
        page.locator("input[name=login]").fill(user.email)
        page.locator("input[name=password]").fill(PASSWORD)
        page.locator("main form button[type=submit]").click()
        page.wait_for_url(f"{base}/fr/account/")
        page.goto(f"{base}/fr/account/invoices/{number}/")
        payment = page.get_by_test_id("invoice-payment").inner_text()
        assert "Paiement de test (sandbox)" in payment or "sandbox" in payment
        assert re.search(r"\d\d:\d\d CET", payment)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
    finally:
        context.close()
