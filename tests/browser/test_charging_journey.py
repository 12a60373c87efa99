"""A French buyer's rental is charged its second hour by the charging run (the clock moved on an
hour): the rental and the account show both hours, and the runway on the account page goes down."""

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.utils import translation
from django.utils.translation import gettext

from billing.models import RentalCharge
from billing.months import month_of, month_slug
from billing.services import rentals_charge_due
from exchange.models import Market, Rental
from marketplace import formatting
from tests.browser.support import PASSWORD, french_buyer_with_balance
from tests.exchange.support import login_ready

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NBSP = "\u00a0"


def runway_text(hours: int) -> str:
    """The runway sentence as the French page must show it (whatever the catalog holds today)."""
    with translation.override("fr"):
        return gettext("Your balance covers about %(hours)s h at %(rate)s/h.") % {
            "hours": formatting.number(hours, language="fr"),
            "rate": formatting.usd(Decimal("2.88"), language="fr"),
        }


def hour_text(moment: datetime) -> str:
    """An hour as the movements list writes it: in the buyer's zone (UTC here), with its name."""
    return formatting.datetime_zone(moment, language="fr", zone="UTC")


def money_text(amount: str) -> str:
    return formatting.money(Decimal(amount), "EUR", language="fr")


def a_quiet_morning() -> datetime:
    """10:00 UTC on the 2nd of next month: both hours fall in one month, and cookies set by the
    site stay valid in Chromium, which keeps the real clock."""
    now = datetime.now(UTC)
    following = (now.replace(day=1) + timedelta(days=32)).replace(day=2)
    return following.replace(hour=10, minute=0, second=0, microsecond=0)


def test_second_hour_is_charged_shown_twice_and_the_runway_goes_down(
    live_server, demo_book, page, ed25519_public_key
):
    base = live_server.url
    with time_machine.travel(a_quiet_morning(), tick=True):
        Market.objects.update_or_create(pk=1, defaults={"is_open": True})
        buyer = french_buyer_with_balance()
        page.goto(f"{base}/fr/account/login/")
        page.locator("input[name=login]").fill(buyer.email)
        page.locator("input[name=password]").fill(PASSWORD)
        page.locator("main form button[type=submit]").last.click()
        page.wait_for_url(f"{base}/fr/account/")

        page.goto(f"{base}/fr/trade/h100-sxm/")
        buy = page.locator("form[action$='/buy/']")
        buy.locator("select[name=gpus]").select_option("1")
        buy.locator("textarea[name=ssh_public_key]").fill(ed25519_public_key)
        buy.locator("button[type=submit]").click()
        page.get_by_test_id("confirm-order").click()  # buy now asks once
        page.wait_for_url(re.compile(r".*/fr/account/rentals/\d+/$"))
        rental = Rental.objects.get(buyer=buyer)
        login_ready(rental)  # its server's agent made the login: it runs, and its hours are charged
        assert page.get_by_test_id("rental-cost").inner_text() == money_text("2.65")  # 2.88 USD at 0.92

        # One hour paid: 97.35 EUR cover 36 more hours of 2.65 EUR.
        page.goto(f"{base}/fr/account/")
        assert page.get_by_test_id("balance").inner_text() == money_text("97.35")
        assert page.get_by_test_id("runway").inner_text() == runway_text(36)

        first_hour = rental.started_at
        rental.refresh_from_db()
        assert rental.paid_through == first_hour + timedelta(hours=1)

        # An hour later the beat's charging run charges the second hour.
        with time_machine.travel(rental.paid_through + timedelta(minutes=1), tick=True):
            counts = rentals_charge_due()
            assert counts["charged"] == 1
            hours = RentalCharge.objects.filter(rental=rental).values_list("period_start", flat=True)
            assert list(hours) == [first_hour, first_hour + timedelta(hours=1)]

            page.goto(f"{base}/fr/account/rentals/{rental.pk}/")
            assert page.get_by_test_id("rental-cost").inner_text() == money_text("5.30")

            page.goto(f"{base}/fr/account/")
            assert page.get_by_test_id("balance").inner_text() == money_text("94.70")
            # 94.70 EUR cover 35 more hours.
            assert page.get_by_test_id("runway").inner_text() == runway_text(35)
            charges = page.locator("#movements tbody tr").filter(has_text="2,65")
            assert charges.count() == 2
            movements = page.locator("#movements").inner_text()
            assert hour_text(first_hour) in movements
            assert hour_text(first_hour + timedelta(hours=1)) in movements

            # The month's statement has the rental with both hours.
            page.goto(f"{base}/fr/account/statements/{month_slug(month_of(first_hour))}/")
            assert page.get_by_test_id("statement-charges").inner_text() == money_text("-5.30")
            assert page.get_by_test_id("statement-rental").locator("tbody tr").count() == 2
            assert page.get_by_test_id("statement-closing").inner_text() == money_text("94.70")
