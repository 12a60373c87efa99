"""Monthly statements: every charge of the month grouped by rental, the top-ups, and opening and
closing balances that are what the ledger held; the page, the CSV, and a seller's earnings per month."""

import csv
import io
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import translation

from accounts.models import Wallet
from billing.ledger import ledger_account_for_seller, ledger_account_system, ledger_post
from billing.models import LedgerAccount, LedgerEntry
from billing.months import month_parse, statement_title
from billing.selectors import (
    EarningsTotal,
    LineKind,
    SellerEarnings,
    SellerMonth,
    seller_earnings_by_month,
    seller_earnings_summary,
    statement_for_user,
    wallet_ledger_balance,
    wallet_statement,
)
from billing.services import rental_charge_next_hour, server_failure_report, top_up_create, top_up_pay_sandbox
from tests.billing.support import assert_books_consistent, buyer_with, fund, rental_for
from tests.factories import ExchangeRateFactory, OfferFactory, ProfileFactory, RentalFactory

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)
NOV_30_22H = datetime(2026, 11, 30, 22, 0, tzinfo=UTC)
DEC_1 = datetime(2026, 12, 1, tzinfo=UTC)
NOVEMBER, DECEMBER = date(2026, 11, 1), date(2026, 12, 1)


@pytest.fixture(autouse=True)
def _setup(time_machine):
    time_machine.move_to(datetime(2026, 11, 20, 12, 0, tzinfo=UTC), tick=False)
    ExchangeRateFactory(currency="EUR", rate=Decimal("0.92000000"))
    yield
    assert_books_consistent()


def top_up(user, amount: str):
    created = top_up_create(user=user, amount_text=amount, currency="EUR", provider="sandbox",
                            form_token=uuid.uuid4())
    return top_up_pay_sandbox(user=user, top_up_id=created.pk)


def charge_at(time_machine, rental, moment: datetime) -> None:
    """Charge the hour starting at `moment`, posted five seconds later as the beat would."""
    time_machine.move_to(moment + timedelta(seconds=5), tick=False)
    rental_charge_next_hour(rental_id=rental.pk, now=moment + timedelta(seconds=5))


@pytest.fixture
def history(time_machine):
    """A euro buyer across the November/December boundary:

    - 20 Nov: top-up of 100.00
    - rental A (1 x 2.88 USD = 2.65 EUR an hour) from 30 Nov 22:00: hours at 22:00 and 23:00
      (November), 00:00 and 01:00 (December)
    - rental B (2 x 1.00 USD = 1.84 EUR an hour) from 1 Dec 00:30: hours at 00:30 and 01:30; its
      server fails at 01:40: 50 unused minutes, 1.84 x 50/60 = 1.5333 -> 1.53 back
    - 1 Dec 02:00: top-up of 50.00
    """
    buyer = buyer_with("EUR", preferred_language="en")
    top_up(buyer, "100")
    rental_a = rental_for(buyer, started_at=NOV_30_22H)
    for hour in range(4):
        charge_at(time_machine, rental_a, NOV_30_22H + hour * HOUR)
    rental_b = rental_for(buyer, gpus=2, price="1.00", started_at=DEC_1 + timedelta(minutes=30))
    charge_at(time_machine, rental_b, DEC_1 + timedelta(minutes=30))
    charge_at(time_machine, rental_b, DEC_1 + timedelta(minutes=90))
    time_machine.move_to(DEC_1 + timedelta(minutes=100), tick=False)
    server_failure_report(server_id=rental_b.server_id)
    time_machine.move_to(DEC_1 + 2 * HOUR, tick=False)
    top_up(buyer, "50")
    time_machine.move_to(DEC_1 + 3 * HOUR, tick=False)
    buyer.wallet.refresh_from_db()
    return {"buyer": buyer, "wallet": buyer.wallet, "a": rental_a, "b": rental_b}


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --- the statement --------------------------------------------------------------------------------


def test_november_opens_at_zero_and_closes_with_the_top_up_less_two_hours(history):
    statement = wallet_statement(wallet=history["wallet"], month=NOVEMBER)

    assert (statement.opening, statement.closing) == (Decimal("0.00"), Decimal("94.70"))
    assert statement.top_ups_total == Decimal("100.00")
    assert statement.charges_total == Decimal("-5.30")
    assert statement.refunds_total == Decimal("0.00") and statement.other == []
    [group] = statement.rentals
    assert (group.rental_id, group.hours, group.total) == (history["a"].pk, 2, Decimal("-5.30"))
    assert [line.period_start for line in group.lines] == [NOV_30_22H, NOV_30_22H + HOUR]
    # The buyer signed up on 20 November: no statement before that month.
    assert statement.next.slug == "2026-12" and statement.previous is None


def test_december_groups_the_charges_and_the_refund_by_rental(history):
    statement = wallet_statement(wallet=history["wallet"], month=DECEMBER)

    assert statement.opening == Decimal("94.70")
    a, b = statement.rentals
    assert (a.rental_id, a.hours, a.charged, a.refunded, a.total) == (
        history["a"].pk, 2, Decimal("-5.30"), Decimal("0.00"), Decimal("-5.30")
    )
    assert (b.rental_id, b.hours, b.charged, b.refunded, b.total) == (
        history["b"].pk, 2, Decimal("-3.68"), Decimal("1.53"), Decimal("-2.15")
    )
    assert [line.kind for line in b.lines] == [LineKind.CHARGE, LineKind.CHARGE, LineKind.REFUND]
    assert (a.gpu_name, a.gpus, b.gpus) == (history["a"].gpu_model.name, 1, 2)
    assert [line.amount for line in statement.top_ups] == [Decimal("50.00")]
    assert statement.charges_total == Decimal("-8.98")
    assert statement.refunds_total == Decimal("1.53")
    assert statement.closing == Decimal("137.25")  # 94.70 - 8.98 + 1.53 + 50.00
    assert statement.next is None  # the current month


def test_opening_plus_every_line_is_the_closing_which_is_the_ledger(history):
    wallet = history["wallet"]
    november = wallet_statement(wallet=wallet, month=NOVEMBER)
    december = wallet_statement(wallet=wallet, month=DECEMBER)

    for statement in (november, december):
        assert statement.opening + sum(line.amount for line in statement.lines) == statement.closing
        assert (
            statement.opening + statement.charges_total + statement.refunds_total
            + statement.top_ups_total + statement.other_total
        ) == statement.closing
    assert november.closing == december.opening
    assert december.closing == wallet.balance == wallet_ledger_balance(wallet=wallet) == Decimal("137.25")
    entries = LedgerEntry.objects.filter(account__wallet=wallet)
    assert len(november.lines) + len(december.lines) == entries.count()


def test_a_month_without_movements_carries_the_balance(history):
    statement = wallet_statement(wallet=history["wallet"], month=date(2026, 10, 1))
    assert (statement.opening, statement.closing, statement.lines) == (Decimal("0.00"), Decimal("0.00"), [])


def test_adjustments_are_other_movements(history):
    wallet = history["wallet"]
    ledger_post(
        idempotency_key="adjustment:1", kind="adjustment", description="goodwill",
        lines=[
            (LedgerAccount.objects.get(code=f"wallet:{wallet.pk}"), Decimal("5.00")),
            (ledger_account_system(kind=LedgerAccount.Kind.ADJUSTMENTS, currency="EUR"), Decimal("-5.00")),
        ],
    )
    statement = wallet_statement(wallet=wallet, month=DECEMBER)
    assert [line.amount for line in statement.other] == [Decimal("5.00")]
    assert statement.closing == Decimal("142.25")


def test_three_queries_whatever_the_number_of_rentals(time_machine, django_assert_num_queries):
    buyer = buyer_with("USD", "500.00")
    for _ in range(5):
        rental = rental_for(buyer, started_at=DEC_1)
        for hour in range(3):
            charge_at(time_machine, rental, DEC_1 + hour * HOUR)
    wallet = Wallet.objects.select_related("user").get(pk=buyer.wallet.pk)

    with django_assert_num_queries(3):
        statement = wallet_statement(wallet=wallet, month=DECEMBER)

    assert len(statement.rentals) == 5 and statement.charges_total == Decimal("-43.20")


def test_only_the_users_own_wallet_and_not_months_to_come(history):
    other = buyer_with("EUR", "7.00")
    assert statement_for_user(user=other, month=DECEMBER).closing == Decimal("7.00")
    assert statement_for_user(user=ProfileFactory().user, month=DECEMBER) is None  # no wallet
    assert statement_for_user(user=history["buyer"], month=date(2027, 1, 1)) is None


@pytest.mark.parametrize("text", ["2026-13", "2026-00", "2026-1", "202612", "1999-12", "abcd-ef", ""])
def test_month_parse_refuses_what_is_not_a_month(text):
    with pytest.raises(ValueError):
        month_parse(text)


# --- the page and the CSV -------------------------------------------------------------------------


def test_statement_page_in_english(history):
    html = signed_in(history["buyer"]).get("/en/account/statements/2026-12/").content.decode()

    assert "Statement for December 2026" in html
    assert "€94.70" in html and "€137.25" in html and "€50.00" in html and "-€8.98" in html
    assert f"Rental #{history['b'].pk}: 2 × {history['b'].gpu_model.name} at $1.00 per GPU-hour" in html
    assert "Total for this rental (2 hours charged)" in html
    assert "Refund of the unused minutes after a server failure" in html
    assert 'href="/en/account/statements/2026-11/"' in html
    assert 'href="/en/account/statements/2026-12.csv"' in html


def test_statement_page_in_french_formats_money_the_french_way(history):
    html = signed_in(history["buyer"]).get("/fr/account/statements/2026-11/").content.decode()
    assert "94,70\u00a0€" in html and "-5,30\u00a0€" in html
    assert 'href="/fr/account/statements/2026-12/"' in html  # the next month


def test_statement_csv(history):
    response = signed_in(history["buyer"]).get("/en/account/statements/2026-12.csv")

    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="everxcloud-statement-2026-12.csv"'
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == ["Date (UTC)", "Type", "Rental", "Description", "Hour from (UTC)", "Amount", "Currency"]
    assert rows[1] == ["2026-12-01T00:00:00Z", "Opening balance", "", "", "", "94.70", "EUR"]
    assert rows[-1][1:] == ["Closing balance", "", "", "", "137.25", "EUR"]
    lines = rows[2:-1]
    assert len(lines) == 6  # 2 + 2 charges, 1 refund, 1 top-up
    assert Decimal("94.70") + sum(Decimal(row[5]) for row in lines) == Decimal("137.25")
    first = lines[0]
    assert first[:3] == ["2026-12-01T00:00:05Z", "Rental charge", str(history["a"].pk)]
    assert (first[4], first[5], first[6]) == ("2026-12-01T00:00:00Z", "-2.65", "EUR")
    assert [row[1] for row in lines].count("Refund") == 1


@pytest.mark.parametrize(
    "path",
    [
        "/en/account/statements/2026-13/", "/en/account/statements/2026-00/",
        "/en/account/statements/2026-1/", "/en/account/statements/26-12/",
        "/en/account/statements/1999-12/", "/en/account/statements/2027-01/",
        "/en/account/statements/2026-13.csv", "/en/account/statements/2027-01.csv",
        "/en/account/statements/december/",
    ],
)
def test_bad_or_future_months_are_not_found(history, path):
    assert signed_in(history["buyer"]).get(path).status_code == 404


def test_a_user_without_a_wallet_has_no_statement():
    client = signed_in(ProfileFactory().user)
    assert client.get("/en/account/statements/2026-11/").status_code == 404
    assert client.get("/en/account/statements/2026-11.csv").status_code == 404


def test_each_user_sees_only_their_own_wallet(history):
    other = buyer_with("EUR", "7.00", preferred_language="en")
    html = signed_in(other).get("/en/account/statements/2026-12/").content.decode()
    assert "€7.00" in html and "€94.70" not in html and f"Rental #{history['a'].pk}" not in html


def test_statements_need_a_login():
    for path in ("/en/account/statements/2026-11/", "/en/account/statements/2026-11.csv"):
        response = Client().get(path)
        assert response.status_code == 302 and "/en/account/login/" in response["Location"]


@pytest.mark.parametrize("rentals", [1, 6])
def test_statement_page_runs_a_constant_number_of_queries(
    time_machine, rentals, django_assert_max_num_queries
):
    buyer = buyer_with("EUR", "500.00", preferred_language="en")
    for _ in range(rentals):
        rental = rental_for(buyer, started_at=DEC_1)
        for hour in range(2):
            charge_at(time_machine, rental, DEC_1 + hour * HOUR)
    client = signed_in(buyer)
    client.get("/en/account/")  # warm the session
    with CaptureQueriesContext(connection) as page, django_assert_max_num_queries(8):
        assert client.get("/en/account/statements/2026-12/").status_code == 200
    with CaptureQueriesContext(connection) as download, django_assert_max_num_queries(8):
        assert client.get("/en/account/statements/2026-12.csv").status_code == 200
    # Whatever the number of rentals: the session, the user, the wallet, the balances, the
    # entries, the rentals.
    assert len(page) == len(download) == 6


def test_the_account_page_links_every_month_since_the_account_was_created(history):
    html = signed_in(history["buyer"]).get("/en/account/").content.decode()
    assert 'href="/en/account/statements/2026-12/"' in html and "Statement for December 2026" in html
    assert 'href="/en/account/statements/2026-11/"' in html and "Statement for November 2026" in html
    assert 'href="/en/account/statements/2026-11.csv"' in html
    assert "2026-10" not in html  # the buyer signed up in November


def test_a_new_account_has_no_statement_of_a_month_before_it_existed(time_machine):
    time_machine.move_to(datetime(2027, 1, 3, 9, 0, tzinfo=UTC), tick=False)
    buyer = buyer_with("EUR", preferred_language="fr")
    top_up(buyer, "20")
    client = signed_in(buyer)
    html = client.get("/fr/account/").content.decode()
    assert 'href="/fr/account/statements/2027-01/"' in html and "Relevé de janvier 2027" in html
    assert "2026-12" not in html
    assert client.get("/fr/account/statements/2026-12/").status_code == 404
    assert client.get("/fr/account/statements/2026-12.csv").status_code == 404
    page = client.get("/fr/account/statements/2027-01/").content.decode()
    assert 'rel="prev"' not in page and 'rel="next"' not in page


@pytest.mark.parametrize(
    ("language", "month", "title"),
    [
        ("fr", date(2026, 10, 1), "Relevé d'octobre 2026"), ("fr", date(2026, 8, 1), "Relevé d'août 2026"),
        ("fr", date(2026, 4, 1), "Relevé d'avril 2026"), ("fr", date(2026, 5, 1), "Relevé de mai 2026"),
        ("pt", date(2026, 12, 1), "Extrato de dezembro de 2026"),
        ("en", date(2026, 10, 1), "Statement for October 2026"),
    ],
)
def test_statement_titles_bend_the_article_before_the_month(language, month, title):
    with translation.override(language):
        assert statement_title(month) == title


# --- a seller's earnings --------------------------------------------------------------------------


def two_months_of_earnings(time_machine):
    """A seller's three hours (two in November, one in December), a server failure refunding part of
    the December hour, another seller's hour and a payout: 5.76/0.58/5.18 in November and
    1.01/0.10/0.91 in December (gross/fee/net, US dollars)."""
    buyer = buyer_with("EUR", "100.00")
    offer = OfferFactory(price_usd=Decimal("2.88"))
    seller = offer.server.seller
    rental = RentalFactory(buyer=buyer, offer=offer, started_at=NOV_30_22H)
    for hour in range(3):  # 22:00 and 23:00 in November, 00:00 in December
        charge_at(time_machine, rental, NOV_30_22H + hour * HOUR)
    time_machine.move_to(DEC_1 + timedelta(minutes=20, seconds=30), tick=False)
    server_failure_report(server_id=offer.server_id)  # 39 minutes back: 1.87 = 1.68 + 0.19
    # Another seller's hour, and a payout to this seller: neither is this seller's earnings.
    rental_for(buyer_with("USD", "10.00"), started_at=DEC_1)
    charge_at(time_machine, rental_for(buyer_with("USD", "10.00"), started_at=DEC_1), DEC_1)
    earnings = ledger_account_for_seller(seller=seller, currency="USD")
    ledger_post(
        idempotency_key="payout:1", kind="payout", description="payout",
        lines=[
            (earnings, Decimal("-5.00")),
            (ledger_account_system(kind=LedgerAccount.Kind.PAYMENT_CLEARING, currency="USD", provider="bank"),
             Decimal("5.00")),
        ],
    )

    return seller


def test_seller_earnings_by_month_from_the_ledger(time_machine, django_assert_num_queries):
    seller = two_months_of_earnings(time_machine)

    with django_assert_num_queries(1):
        months = seller_earnings_by_month(seller_id=seller.pk)

    assert months == [
        (NOVEMBER, Decimal("5.76"), Decimal("0.58"), Decimal("5.18")),
        (DECEMBER, Decimal("1.01"), Decimal("0.10"), Decimal("0.91")),  # 2.88 - 1.87
    ]
    assert months[1].net == months[1].gross - months[1].fee


def test_a_seller_without_sales_has_no_months():
    assert seller_earnings_by_month(seller_id=OfferFactory().server.seller_id) == []


def test_seller_earnings_summary_newest_month_first_this_month_and_totals(
    time_machine, django_assert_num_queries
):
    seller = two_months_of_earnings(time_machine)

    with django_assert_num_queries(1):
        summary = seller_earnings_summary(seller_id=seller.pk, now=DEC_1 + timedelta(days=30, hours=23))

    assert summary.months == [
        SellerMonth(month=DECEMBER, gross=Decimal("1.01"), fee=Decimal("0.10"), net=Decimal("0.91")),
        SellerMonth(month=NOVEMBER, gross=Decimal("5.76"), fee=Decimal("0.58"), net=Decimal("5.18")),
    ]
    assert summary.this_month == summary.months[0]
    assert summary.total == EarningsTotal(gross=Decimal("6.77"), fee=Decimal("0.68"), net=Decimal("6.09"))
    assert [str(figure) for figure in summary.total] == ["6.77", "0.68", "6.09"]


def test_seller_earnings_summary_of_a_month_without_sales_is_zero_this_month(time_machine):
    seller = two_months_of_earnings(time_machine)

    january = seller_earnings_summary(seller_id=seller.pk, now=datetime(2027, 1, 1, tzinfo=UTC))
    nothing = seller_earnings_summary(seller_id=OfferFactory().server.seller_id, now=DEC_1)

    assert january.this_month == SellerMonth(
        month=date(2027, 1, 1), gross=Decimal("0.00"), fee=Decimal("0.00"), net=Decimal("0.00")
    )
    assert [str(figure) for figure in january.this_month[1:]] == ["0.00", "0.00", "0.00"]
    assert january.total == EarningsTotal(gross=Decimal("6.77"), fee=Decimal("0.68"), net=Decimal("6.09"))
    assert nothing == SellerEarnings(
        months=[],
        this_month=SellerMonth(
            month=DECEMBER, gross=Decimal("0.00"), fee=Decimal("0.00"), net=Decimal("0.00")
        ),
        total=EarningsTotal(gross=Decimal("0.00"), fee=Decimal("0.00"), net=Decimal("0.00")),
    )
    assert [str(figure) for figure in nothing.total] == ["0.00", "0.00", "0.00"]


def test_wallet_is_untouched_by_reading(history):
    before = Wallet.objects.get(pk=history["wallet"].pk).balance
    wallet_statement(wallet=history["wallet"], month=DECEMBER)
    statement_for_user(user=history["buyer"], month=NOVEMBER)
    assert Wallet.objects.get(pk=history["wallet"].pk).balance == before


def test_fund_helper_top_ups_count_as_top_ups():
    buyer = buyer_with("USD")
    fund(buyer.wallet, "12.00")
    statement = wallet_statement(wallet=buyer.wallet, month=NOVEMBER)
    assert statement.top_ups_total == Decimal("12.00") and statement.closing == Decimal("12.00")
