"""The site works under its Content-Security-Policy, in French: the trade page refreshes its order
book with htmx, the invoice's print button prints, the admin's date shortcuts fill a date, and no
page reports a refused script, style or image. The favicon is there, so no page logs a 404."""

from decimal import Decimal

import pytest
from playwright.sync_api import expect

from exchange.models import Market
from tests.billing.support import paid_invoice
from tests.browser.support import PASSWORD, admin_sign_in, french_buyer_with_balance, operator_with_totp
from tests.factories import OfferFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NBSP = "\u00a0"
# Records what the policy refuses, before any script of the page runs (an init script is not
# subject to the page's policy).
WATCH_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__violations.push(`${event.violatedDirective} ${event.blockedURI || "inline"} ${event.sourceFile}`);
});
window.print = () => { window.__printed = (window.__printed || 0) + 1; };
"""


def watched(page) -> list[str]:
    """Console errors and failed requests of `page` from now on (the list fills as they come)."""
    problems: list[str] = []
    page.add_init_script(WATCH_VIOLATIONS)
    page.on("console", lambda message: message.type == "error" and problems.append(message.text))
    page.on("response", lambda response: response.status >= 400 and problems.append(
        f"{response.status} {response.url}"))
    return problems


def violations(page) -> list[str]:
    return page.evaluate("window.__violations")


def test_a_french_buyer_trades_and_prints_under_the_policy(live_server, demo_book, page):
    Market.objects.update_or_create(pk=1, defaults={"is_open": True})
    buyer = french_buyer_with_balance()
    invoice = paid_invoice(buyer)
    base = live_server.url
    problems = watched(page)

    page.goto(f"{base}/fr/account/login/")
    page.locator("input[name=login]").fill(buyer.email)
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("main form button[type=submit]").last.click()
    page.wait_for_url(f"{base}/fr/account/")

    page.goto(f"{base}/fr/trade/h100-sxm/")
    assert page.evaluate("document.documentElement.classList.contains('js')")  # static/js/site.js ran
    best_ask = page.get_by_test_id("best-ask")
    assert best_ask.inner_text() == f"2,88{NBSP}$US"
    # A cheaper offer arrives: htmx, from our static files, swaps the new book in within seconds.
    OfferFactory(server__gpu_model=demo_book["h100-sxm"], price_usd=Decimal("2.50"))
    with page.expect_response(lambda response: response.url.endswith("/fr/trade/h100-sxm/book/")):
        pass
    expect(page.get_by_test_id("best-ask")).to_have_text(f"2,50{NBSP}$US", timeout=15_000)
    assert violations(page) == []

    page.goto(f"{base}/fr/account/invoices/{invoice.number}/")
    page.get_by_role("button", name="Imprimer").click()
    assert page.evaluate("window.__printed") == 1

    for path in ("/fr/", "/fr/gpus/h100-sxm/", "/fr/workloads/fine-tuning/", "/fr/account/"):
        page.goto(f"{base}{path}")
        assert violations(page) == [], path
    # The two-factor set-up draws its QR code from a data: address.
    page.goto(f"{base}/fr/account/2fa/totp/activate/")
    page.locator("input[name=password]").fill(PASSWORD)  # allauth asks for the password again
    page.locator("main form button[type=submit]").first.click()
    page.wait_for_url(f"{base}/fr/account/2fa/totp/activate/")
    qr_code = page.locator("img[src^='data:image/svg+xml']")
    expect(qr_code).to_be_visible()
    assert qr_code.evaluate("image => image.naturalWidth") > 0
    assert violations(page) == []
    assert problems == []


def test_the_admin_works_under_the_policy(live_server, browser):
    operator, secret = operator_with_totp(None, "ops@everxcloud.fr")
    admin = admin_sign_in(browser, live_server.url, operator, secret, "fr")
    problems = watched(admin)
    admin.goto(f"{live_server.url}/fr/admin/billing/exchangerate/add/")
    # The date and time shortcuts are the admin's own scripts: "Aujourd'hui" fills the date.
    admin.locator(".datetimeshortcuts a").first.click()
    assert admin.locator("input[name=valid_from_0]").input_value() != ""
    for path in ("/fr/admin/", "/fr/admin/billing/exchangerate/", "/fr/admin/operations/"):
        admin.goto(f"{live_server.url}{path}")
        assert violations(admin) == [], path
    assert problems == []
    admin.context.close()
