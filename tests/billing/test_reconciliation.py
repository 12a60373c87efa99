"""Reconciliation: the books against the ledger, recorded and logged loudly on any difference."""

import logging
from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.contrib import admin
from django.core.management import CommandError, call_command
from django.db import transaction
from django.test import RequestFactory
from djmoney.money import Money

from accounts.models import Wallet
from billing.ledger import ledger_account_system
from billing.models import LedgerAccount, LedgerEntry, LedgerTransaction, ReconciliationRun
from billing.services import ledger_reconcile, rental_charge_next_hour, rentals_charge_due
from billing.services.reconciliation import PROBLEMS_PER_CHECK
from billing.tasks import ledger_reconcile as reconcile_task
from exchange.models import RentalState
from tests.admin_support import operator_client
from tests.billing.support import HOUR, START, buyer_with, rental_for
from tests.factories import ExchangeRateFactory, UserFactory

pytestmark = pytest.mark.django_db

NOW = START + 2 * HOUR + timedelta(minutes=30)


@pytest.fixture(autouse=True)
def _clock(time_machine):
    time_machine.move_to(NOW, tick=False)


@pytest.fixture
def charged_books():
    """Three buyers, three currencies, every due hour charged: exact books."""
    ExchangeRateFactory(currency="EUR", rate=Decimal("0.92000000"))
    ExchangeRateFactory(currency="GBP", rate=Decimal("0.79000000"))
    rentals = [rental_for(buyer_with(currency, "100.00")) for currency in ("EUR", "USD", "GBP")]
    rental_for(buyer_with("USD", "1.00"))  # ends unpaid: not a problem
    rentals_charge_due(now=NOW)
    return rentals


def problems_of(run: ReconciliationRun, check: str) -> list[dict]:
    return [problem for problem in run.problems if problem["check"] == check]


def test_exact_books_make_an_ok_run(charged_books, caplog):
    with caplog.at_level(logging.INFO, logger="billing.services.reconciliation"):
        run = ledger_reconcile()

    assert (run.ok, run.problems) == (True, [])
    assert run.started_at == NOW and run.finished_at == NOW
    assert ReconciliationRun.objects.get() == run
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert "the books are exact" in caplog.text


def test_no_data_at_all_is_exact():
    assert ledger_reconcile().ok


def test_a_cached_balance_that_differs_from_the_ledger_is_a_problem_logged_at_error(charged_books, caplog):
    wallet = Wallet.objects.get(user=charged_books[0].buyer)
    ledger = wallet.balance
    Wallet.objects.filter(pk=wallet.pk).update(balance=ledger + Decimal("1.00"))
    before = (LedgerTransaction.objects.count(), LedgerEntry.objects.count())

    with caplog.at_level(logging.INFO, logger="billing.services.reconciliation"):
        run = ledger_reconcile()

    assert run.ok is False
    assert run.problems == [
        {"check": "wallet_balance", "wallet_id": wallet.pk, "currency": "EUR",
         "cached": f"{ledger + Decimal('1.00'):.2f}", "ledger": f"{ledger:.2f}"}
    ]
    errors = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert errors and "wallet_balance: 1" in errors[0].getMessage()
    # Reconciliation only reads: it corrects nothing.
    assert (LedgerTransaction.objects.count(), LedgerEntry.objects.count()) == before
    wallet.refresh_from_db()
    assert wallet.balance == ledger + Decimal("1.00")


def test_a_wallet_with_a_balance_but_no_ledger_entries_is_a_problem(db):
    user = UserFactory()
    wallet = Wallet.objects.create(user=user, currency="GBP", balance=Decimal("5.00"))

    run = ledger_reconcile()

    assert problems_of(run, "wallet_balance") == [
        {"check": "wallet_balance", "wallet_id": wallet.pk, "currency": "GBP", "cached": "5.00",
         "ledger": "0.00"}
    ]


class RolledBack(Exception):
    pass


def test_an_unbalanced_transaction_is_a_problem(charged_books):
    # On PostgreSQL the database refuses this at commit (a deferred trigger): the savepoint below
    # is rolled back before, which lets the ledger hold for a moment what should never be there.
    posted = LedgerTransaction.objects.filter(kind="charge").first()
    revenue = ledger_account_system(kind=LedgerAccount.Kind.PLATFORM_REVENUE, currency="USD")
    with pytest.raises(RolledBack), transaction.atomic():
        LedgerEntry.objects.create(transaction=posted, account=revenue, amount=Money("0.01", "USD"))
        run = ledger_reconcile()
        raise RolledBack

    assert problems_of(run, "transaction_unbalanced") == [
        {"check": "transaction_unbalanced", "transaction_id": posted.pk, "totals": {"USD": "0.01"}}
    ]
    assert run.ok is False


def test_a_running_rental_not_paid_through_the_current_hour_is_a_problem(charged_books):
    rental = charged_books[1]
    rental.refresh_from_db()
    assert rental.paid_through == START + 3 * HOUR

    # Within the grace the charging run has to reach it: not yet a problem.
    assert ledger_reconcile(now=rental.paid_through + timedelta(minutes=4)).ok
    run = ledger_reconcile(now=rental.paid_through + timedelta(minutes=6))
    late = problems_of(run, "rental_unpaid")
    assert {problem["rental_id"] for problem in late} == {rental.pk for rental in charged_books}
    assert late[0]["state"] == RentalState.RUNNING
    assert late[0]["paid_through"] == (START + 3 * HOUR).isoformat()
    # Exactly: paid through must be after now.
    assert not ledger_reconcile(now=rental.paid_through, grace=timedelta(0)).ok
    assert ledger_reconcile(now=rental.paid_through - timedelta(microseconds=1), grace=timedelta(0)).ok


def test_a_rental_left_starting_is_a_problem(charged_books):
    starting = rental_for(buyer_with("USD", "50.00"), started_at=NOW - timedelta(minutes=10))

    run = ledger_reconcile()

    assert [problem["rental_id"] for problem in problems_of(run, "rental_unpaid")] == [starting.pk]
    assert problems_of(run, "rental_unpaid")[0]["paid_through"] is None
    rental_charge_next_hour(rental_id=starting.pk)
    assert ledger_reconcile().ok


def test_a_paid_rental_waiting_for_its_login_is_not_a_problem(charged_books):
    waiting = rental_for(buyer_with("USD", "50.00"), started_at=NOW - timedelta(minutes=8), delivered_at=None,
                         username="")
    rental_charge_next_hour(rental_id=waiting.pk, now=waiting.started_at)
    waiting.refresh_from_db()
    assert (waiting.state, waiting.paid_through is not None) == (RentalState.STARTING, True)

    assert ledger_reconcile().ok


def test_problems_are_capped_per_check_and_the_rest_counted(db):
    users = UserFactory.create_batch(PROBLEMS_PER_CHECK + 3)
    Wallet.objects.bulk_create(
        Wallet(user=user, currency="USD", balance=Decimal("1.00")) for user in users
    )

    run = ledger_reconcile()

    listed = problems_of(run, "wallet_balance")
    assert len(listed) == PROBLEMS_PER_CHECK + 1
    assert listed[-1] == {"check": "wallet_balance", "more": 3}


def test_a_naive_now_is_refused(db):
    with pytest.raises(ValueError, match="aware"):
        ledger_reconcile(now=NOW.replace(tzinfo=None))


def test_the_command_reports_exact_books(charged_books):
    out = StringIO()
    call_command("reconcile_ledger", stdout=out)
    run = ReconciliationRun.objects.get()
    assert out.getvalue().strip() == f"Reconciliation {run.pk}: the books are exact."


def test_the_command_fails_on_a_difference(charged_books):
    wallet = Wallet.objects.get(user=charged_books[2].buyer)
    Wallet.objects.filter(pk=wallet.pk).update(balance=Decimal("0.00"))
    err = StringIO()

    with pytest.raises(CommandError, match="1 problem"):
        call_command("reconcile_ledger", stderr=err)
    assert f"'wallet_id': {wallet.pk}" in err.getvalue()
    assert ReconciliationRun.objects.get().ok is False


def test_the_daily_task_records_a_run(charged_books):
    assert reconcile_task.name == "billing.ledger_reconcile"
    assert reconcile_task.apply().get() is True
    assert ReconciliationRun.objects.filter(ok=True).count() == 1


def test_the_admin_shows_runs_read_only(charged_books, client):
    run = ledger_reconcile()
    model_admin = admin.site._registry[ReconciliationRun]
    request = RequestFactory().get("/admin/")
    request.user = UserFactory(is_staff=True, is_superuser=True)
    assert model_admin.has_view_permission(request, run)
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request, run)
    assert not model_admin.has_delete_permission(request, run)
    assert model_admin.problem_count(run) == 0

    operator_client(client)
    listing = client.get("/en/admin/billing/reconciliationrun/")
    assert listing.status_code == 200
    assert client.get(f"/en/admin/billing/reconciliationrun/{run.pk}/change/").status_code == 200
    deleted = client.post(f"/en/admin/billing/reconciliationrun/{run.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 403
    assert ReconciliationRun.objects.filter(pk=run.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_it_reads_one_snapshot(charged_books):
    """The checks run in a read-only REPEATABLE READ transaction of their own (PostgreSQL)."""
    run = ledger_reconcile()
    assert run.ok
    assert ReconciliationRun.objects.get(pk=run.pk).finished_at is not None
