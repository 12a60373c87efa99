"""The look of the site (issue 18): the header stays on one row at 1280 px, signed in, in every
language, and folds behind a menu button on a phone; the seller portal's pages fit a phone without
scrolling the page sideways, its tabs mark the page open."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.test import Client

from billing.services import rental_charge_next_hour
from sellers.models import MemberRole, SellerMembership
from tests.billing.support import buyer_with
from tests.factories import OfferFactory, ProfileFactory, RentalFactory, SellerFactory, ServerFactory
from tests.sellers.support import with_mfa

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDE, PHONE = {"width": 1280, "height": 800}, {"width": 390, "height": 844}
LOCALES = {"en": "en-GB", "pt": "pt-PT", "fr": "fr-FR"}
PHONE_HEADER_PX = 64


def signed_in_page(browser, base: str, user, *, language: str, viewport: dict):
    """A page of a browser signed in as `user` (the session made by Django's test client: signing
    in through the form is tested elsewhere, and is slow)."""
    client = Client()
    client.force_login(user)
    context = browser.new_context(locale=LOCALES[language], viewport=viewport)
    context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": base}])
    page = context.new_page()
    page.set_default_timeout(10_000)
    return page


def buyer():
    return ProfileFactory(preferred_language="pt", billing_country="PT", name="Rita Sousa").user


def seller_member():
    """An owner of a seller with a server, an offer, a running rental that has earned an hour, and
    two-factor authentication on (the portal asks for it)."""
    seller = SellerFactory(name="Lisboa Compute Unipessoal Lda")
    user = with_mfa(ProfileFactory(preferred_language="pt", name="Joana Ferreira").user)
    SellerMembership.objects.create(seller=seller, user=user, role=MemberRole.OWNER)
    server = ServerFactory(seller=seller, name="lis-h100-pcie-frankfurt-01", gpu_count=8)
    offer = OfferFactory(server=server, gpus_offered=4, price_usd=Decimal("2.35"))
    rental = RentalFactory(
        buyer=buyer_with("USD", "500.00"), offer=offer, gpus=2,
        started_at=datetime.now(UTC).replace(microsecond=0),
    )
    rental_charge_next_hour(rental_id=rental.pk, now=rental.started_at)
    return user, server


def header_rows(page) -> dict:
    """The header's height, how far apart the middles of its links and buttons are (one row: a few
    pixels at most), the page's width and the free space left at the end of the main navigation."""
    return page.evaluate(
        """() => {
          const header = document.querySelector(".site-header");
          const items = [...header.querySelectorAll(".brand, .header-menu a, .header-menu button")];
          const middles = items.map((el) => {
            const box = el.getBoundingClientRect();
            return box.top + box.height / 2;
          });
          const ends = [...document.querySelectorAll(".main-nav li")]
            .map((li) => li.getBoundingClientRect().right);
          const navEnd = document.querySelector(".main-nav").getBoundingClientRect().right;
          return {height: header.getBoundingClientRect().height,
                  spread: Math.max(...middles) - Math.min(...middles),
                  overflow: document.documentElement.scrollWidth,
                  // free space at the end of the main navigation
                  slack: navEnd - Math.max(...ends)};
        }"""
    )


@pytest.mark.parametrize("language", ["pt", "fr", "en"])
def test_the_header_is_one_row_at_1280_px_signed_in(live_server, browser, language):
    base = live_server.url
    member, _server = seller_member()
    for user, path in ((buyer(), "account/"), (member, "seller/")):
        page = signed_in_page(browser, base, user, language=language, viewport=WIDE)
        page.goto(f"{base}/{language}/{path}")
        assert page.locator(".menu-button").filter(visible=True).count() == 0
        rows = header_rows(page)
        assert rows["spread"] <= 6, rows
        assert rows["slack"] >= 40, rows  # room left for fonts a little wider than this machine's
        assert rows["height"] <= PHONE_HEADER_PX, rows
        assert rows["overflow"] <= WIDE["width"]
        page.context.close()


@pytest.mark.parametrize("javascript", [True, False])
def test_on_a_phone_the_header_is_short_and_the_menu_button_opens_the_navigation(
    live_server, browser, javascript
):
    base = live_server.url
    member, _server = seller_member()
    client = Client()
    client.force_login(member)
    context = browser.new_context(locale="pt-PT", viewport=PHONE, java_script_enabled=javascript)
    context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": base}])
    page = context.new_page()
    page.goto(f"{base}/pt/seller/")
    header = page.locator(".site-header")
    assert header.bounding_box()["height"] <= PHONE_HEADER_PX
    account = page.locator(".account-nav").get_by_role("link", name="Conta")
    assert not account.is_visible()

    button = page.locator(".menu-button").filter(visible=True)
    assert button.count() == 1 and button.inner_text().strip() == "Menu"
    if javascript:
        assert button.get_attribute("aria-expanded") == "false"
    button.click()
    assert account.is_visible()
    assert page.locator(".language-switcher").get_by_role("link", name="Français").is_visible()
    if javascript:
        assert button.get_attribute("aria-expanded") == "true"
        page.keyboard.press("Escape")
        assert button.get_attribute("aria-expanded") == "false" and not account.is_visible()
        button.click()
    assert header.bounding_box()["height"] <= PHONE_HEADER_PX  # the menu opens over the page
    account.click()
    page.wait_for_url(f"{base}/pt/account/")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    context.close()


PORTAL_PAGES = [
    ("seller/", "Vue d'ensemble"),
    ("seller/servers/", "Serveurs et offres"),
    ("seller/servers/{server}/", "Serveurs et offres"),
    ("seller/servers/{server}/agent/", "Serveurs et offres"),
    ("seller/servers/new/", "Serveurs et offres"),
    ("seller/rentals/", "Locations"),
    ("seller/earnings/", "Gains"),
    ("seller/payouts/", "Versements"),
    ("seller/payout-details/", "Versements"),
    ("seller/members/", "Membres"),
]


def test_the_seller_portal_fits_a_phone_and_marks_its_tab_in_french(live_server, browser):
    base = live_server.url
    member, server = seller_member()
    for viewport in (PHONE, WIDE):
        page = signed_in_page(browser, base, member, language="fr", viewport=viewport)
        for path, tab in PORTAL_PAGES:
            page.goto(f"{base}/fr/{path.format(server=server.pk)}")
            assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"], path
            current = page.locator(".tabs [aria-current]")
            assert current.count() == 1 and current.inner_text() == tab, path
        page.goto(f"{base}/fr/seller/")
        cards = page.get_by_test_id("portal-cards")
        assert cards.get_by_test_id("card-servers").inner_text().startswith("1")
        assert cards.get_by_test_id("card-gpus-rented").inner_text().startswith("2")
        # The first hour of 2 GPUs at 2,35 $US, less the platform's 10 % fee.
        assert cards.get_by_test_id("card-earnings-month").inner_text().startswith("4,23\u00a0$US")
        page.context.close()
