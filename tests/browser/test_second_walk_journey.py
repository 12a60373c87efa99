"""What the second walk found (issue 21), in a French browser: a long e-mail address stays inside
the invoice at 390 and 1280 px, and a private person's profile shows no company fields."""

import uuid
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.test import Client

from billing.services import fx_rates_load, top_up_create, top_up_pay_sandbox
from tests.factories import OfferFactory, ProfileFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDE, PHONE = {"width": 1280, "height": 800}, {"width": 390, "height": 844}
LONG_EMAIL = "marie-claire.delacroix-fontaine.factures@cabinet-exemples.fr"


def signed_in_page(browser, base: str, user, *, viewport: dict):
    client = Client()
    client.force_login(user)
    context = browser.new_context(locale="fr-FR", viewport=viewport)
    context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": base}])
    page = context.new_page()
    page.set_default_timeout(10_000)
    return page


def overflowing(page, selector: str) -> list[str]:
    """The elements inside `selector` whose right edge passes the selector's own."""
    return page.evaluate(
        """(selector) => {
            const box = document.querySelector(selector).getBoundingClientRect();
            return [...document.querySelectorAll(selector + ' *')]
                .filter((el) => el.getBoundingClientRect().right > box.right + 0.5)
                .map((el) => el.tagName + ': ' + el.textContent.slice(0, 40));
        }""",
        selector,
    )


def test_a_long_email_address_stays_inside_the_invoice(live_server, browser):
    user = UserFactory(email=LONG_EMAIL)
    assert len(LONG_EMAIL) == 60
    ProfileFactory(user=user, preferred_language="fr", billing_country="FR", name="Marie Delacroix")
    fx_rates_load(rates={"EUR": Decimal("0.92"), "GBP": Decimal("0.79")},
                  valid_from=datetime(2026, 1, 1, tzinfo=UTC), source="test")
    top_up = top_up_create(user=user, amount_text="50", currency="EUR", provider="sandbox",
                           form_token=uuid.uuid4())
    number = top_up_pay_sandbox(user=user, top_up_id=top_up.pk).invoice.number
    for viewport in (PHONE, WIDE):
        page = signed_in_page(browser, live_server.url, user, viewport=viewport)
        page.goto(f"{live_server.url}/fr/account/invoices/{number}/")
        assert page.get_by_text(LONG_EMAIL).is_visible()
        assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
        assert overflowing(page, "main") == []


def box(page, selector: str) -> dict:
    return page.locator(selector).first.evaluate("(el) => { const r = el.getBoundingClientRect(); "
                                                 "return {width: r.width, height: r.height}; }")


def test_a_private_person_sees_no_company_fields_until_choosing_business(live_server, browser):
    user = ProfileFactory(preferred_language="fr", billing_country="FR", name="Léa Martin",
                          billing_type="individual").user
    page = signed_in_page(browser, live_server.url, user, viewport=PHONE)
    page.goto(f"{live_server.url}/fr/account/profile/")
    company = page.get_by_test_id("company-fields")
    assert not company.is_visible() and not page.get_by_label("Nom de l'entreprise").is_visible()
    # The choice is no wider than the other fields, its heading weighs what their labels weigh.
    choice = box(page, ".field:has(input[name=billing_type]) fieldset")
    assert choice["width"] <= box(page, "#id_name")["width"]
    legend_weight = page.locator(".field:has(input[name=billing_type]) legend").evaluate(
        "(el) => getComputedStyle(el).fontWeight")
    label_weight = page.locator("label[for=id_name]").evaluate("(el) => getComputedStyle(el).fontWeight")
    assert legend_weight == label_weight
    page.get_by_role("radio", name="Entreprise").check()
    assert company.is_visible() and page.get_by_label("Nom de l'entreprise").is_visible()
    page.get_by_role("radio", name="Particulier").check()
    assert not company.is_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]


def test_the_buy_now_form_stands_apart_from_its_table(live_server, browser):
    offer = OfferFactory(price_usd=Decimal("2.35"))
    buyer = ProfileFactory(preferred_language="fr").user
    page = signed_in_page(browser, live_server.url, buyer, viewport=WIDE)
    page.goto(f"{live_server.url}/fr/trade/{offer.server.gpu_model.slug}/")
    gap = page.evaluate("""() => {
        const table = document.querySelector('#buy-prices').closest('.table-scroll').getBoundingClientRect();
        const form = document.querySelector('#buy-prices').closest('section').querySelector('form');
        return form.getBoundingClientRect().top - table.bottom;
    }""")
    assert gap >= 16
