import re
from decimal import Decimal

import pytest
from django.utils import translation
from django.utils.translation import gettext, ngettext

from exchange.models import Market, Rental, RentalState
from tests.browser.support import PASSWORD, french_buyer_with_balance
from tests.exchange.support import login_ready

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NBSP = "\u00a0"


def french_runway(hours: int) -> str:
    with translation.override("fr"):
        return ngettext(
            "Your balance pays %(hours)s hour at this rate.",
            "Your balance pays %(hours)s hours at this rate.",
            hours,
        ) % {"hours": hours}


def test_french_buyer_buys_one_h100_stops_it_and_sees_the_charge(
    live_server, demo_book, page, ed25519_public_key
):
    Market.objects.update_or_create(pk=1, defaults={"is_open": True})
    buyer = french_buyer_with_balance()
    base = live_server.url
    page.goto(f"{base}/fr/account/login/")
    page.locator("input[name=login]").fill(buyer.email)
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("main form button[type=submit]").last.click()
    page.wait_for_url(f"{base}/fr/account/")

    page.goto(f"{base}/fr/trade/h100-sxm/")
    assert page.get_by_test_id("best-ask").inner_text() == f"2,88{NBSP}$US"
    buy = page.locator("form[action$='/buy/']")
    buy.locator("select[name=gpus]").select_option("1")
    buy.locator("textarea[name=ssh_public_key]").fill(ed25519_public_key)
    buy.locator("button[type=submit]").click()
    # Before spending: the total in US dollars and in euros (0.92 EUR per USD), the balance after
    # the first hour, the runway and the server, then one confirmation.
    page.get_by_test_id("confirm-total").wait_for()
    assert page.get_by_test_id("confirm-total").inner_text() == f"2,88{NBSP}$US · 2,65{NBSP}€"
    assert page.get_by_test_id("confirm-balance-after").inner_text() == f"97,35{NBSP}€"
    assert page.get_by_test_id("confirm-runway").inner_text() == french_runway(37)
    assert page.get_by_test_id("confirm-server").inner_text()
    assert not Rental.objects.filter(buyer=buyer).exists()
    page.get_by_test_id("confirm-order").click()
    page.wait_for_url(re.compile(r".*/fr/account/rentals/\d+/$"))

    rental = Rental.objects.get(buyer=buyer)
    assert rental.price_usd == Decimal("2.88")
    with translation.override("fr"):
        running, ended = str(RentalState.RUNNING.label), str(RentalState.ENDED.label)
        stop = gettext("Stop the rental now")
        starting = str(RentalState.STARTING.label)
    assert running != "Running" and stop != "Stop the rental now"
    # Paid, waiting for the server's agent to make the login; it does, and the page shows it.
    assert page.get_by_test_id("rental-state").inner_text().startswith(starting)
    assert not page.get_by_test_id("ssh-command").count()
    login_ready(rental)
    page.reload()
    assert page.get_by_test_id("rental-state").inner_text().startswith(running)
    command = page.get_by_test_id("ssh-command").inner_text()
    assert command == f"ssh -p 22 {rental.username}@{rental.server.host}"
    # 2.88 USD at 0.92 EUR per USD.
    assert page.get_by_test_id("rental-cost").inner_text() == f"2,65{NBSP}€"

    # Stopping asks on a page of its own, which says the hour paid is not refunded.
    page.get_by_test_id("rental-stop").click()
    page.get_by_test_id("stop-warning").wait_for()
    with translation.override("fr"):
        not_refunded = ngettext(
            "Stopping releases the %(count)s GPU %(name)s at once. The hour already paid is not refunded.",
            "Stopping releases the %(count)s GPUs %(name)s at once. The hour already paid is not refunded.",
            1,
        ) % {"count": 1, "name": rental.gpu_model.name}
    assert page.get_by_test_id("stop-warning").inner_text() == not_refunded
    assert Rental.objects.get(pk=rental.pk).state == RentalState.RUNNING
    page.get_by_role("button", name=stop).click()
    page.wait_for_url(re.compile(r".*/fr/account/rentals/\d+/$"))
    assert page.get_by_test_id("rental-state").inner_text().startswith(ended)
    assert not page.get_by_test_id("ssh-command").count()

    page.goto(f"{base}/fr/account/")
    movements = page.locator("#movements").inner_text()
    assert f"-2,65{NBSP}€" in movements or f"−2,65{NBSP}€" in movements
    assert page.get_by_test_id("balance").inner_text() == f"97,35{NBSP}€"
