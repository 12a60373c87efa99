"""The charging run's rows are written from plain lists: on PostgreSQL as INSERT ... SELECT FROM
unnest() (`marketplace.sql.rows_insert`), elsewhere (SQLite, the embedded default) through the
ORM's bulk_create. Both ways must write the same ledger, charge, wallet and rental rows, and the
ORM's way must work on SQLite itself."""

import os
import subprocess
import sys
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import connection, transaction

from accounts.models import Wallet
from billing.models import LedgerEntry, LedgerTransaction, RentalCharge
from billing.services import rentals_charge_due
from exchange.models import Rental
from tests.billing.support import HOUR, START, assert_books_consistent, buyer_with, rental_for
from tests.factories import ExchangeRateFactory

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


def _written() -> dict:
    """Every row a charging run writes, with the ids that differ between two runs (ledger
    transactions, accounts created in the run) replaced by what names them."""
    transactions = {
        row.pk: row for row in LedgerTransaction.objects.filter(kind=LedgerTransaction.Kind.CHARGE)
    }
    entries = sorted(
        (transactions[entry.transaction_id].idempotency_key, entry.account.code, entry.amount.amount,
         entry.currency, entry.created_at)
        for entry in LedgerEntry.objects.filter(transaction_id__in=transactions).select_related("account")
    )
    return {
        "transactions": sorted(
            (row.idempotency_key, row.kind, row.description, row.created_at, row.created_by_id,
             row.reverses_id, row.fx_rate_id)
            for row in transactions.values()
        ),
        "entries": entries,
        "charges": sorted(
            (charge.rental_id, charge.period_start, charge.period_end,
             transactions[charge.ledger_transaction_id].idempotency_key, charge.cost_usd, charge.amount,
             charge.currency, charge.fx_rate_id, charge.seller_earnings_usd, charge.fee_usd,
             charge.created_at)
            for charge in RentalCharge.objects.all()
        ),
        "wallets": list(Wallet.objects.order_by("pk").values_list("pk", "balance", "updated_at")),
        "rentals": list(Rental.objects.order_by("pk").values_list("pk", "state", "paid_through")),
    }


def _run(monkeypatch, *, vendor: str | None) -> dict:
    """Two hours of charging with the rows written the `vendor`'s way, then rolled back."""
    with transaction.atomic():
        with monkeypatch.context() as patch:
            if vendor:
                patch.setattr(connection, "vendor", vendor)
            sent = []

            def record(execute, sql, params, many, context):
                sent.append(sql)
                return execute(sql, params, many, context)

            with connection.execute_wrapper(record):
                first = rentals_charge_due(now=START + timedelta(minutes=1), batch_size=3)
                second = rentals_charge_due(now=START + HOUR + timedelta(minutes=1), batch_size=3)
        unnest = sum("FROM unnest(" in sql for sql in sent)
        written = {"counts": (first, second), **_written()}
        # Per batch that charges: the transactions, the entries, the wallets, the charge rows.
        assert unnest == (0 if vendor else 4 * 7)
        assert_books_consistent()
        transaction.set_rollback(True)
    return written


def test_the_array_and_the_orm_ways_write_identical_rows(monkeypatch, time_machine):
    time_machine.move_to(START + timedelta(minutes=1), tick=False)
    ExchangeRateFactory(currency="EUR", rate=Decimal("0.92000000"))
    ExchangeRateFactory(currency="GBP", rate=Decimal("0.79000000"))
    for number, currency in enumerate(("EUR", "USD", "GBP", "EUR")):
        buyer = buyer_with(currency, "100.00")
        for gpus in (1, 2, 8)[: number + 1]:
            rental_for(buyer, price="2.87", gpus=gpus, started_at=START + timedelta(seconds=gpus))
    poor = buyer_with("USD", "3.00")  # pays its first hour, not its second
    rental_for(poor, price="2.88")

    arrays = _run(monkeypatch, vendor=None)
    orm = _run(monkeypatch, vendor="sqlite")

    assert connection.vendor == "postgresql"
    assert arrays["counts"][0]["charged"] == 10 and arrays["counts"][1]["charged"] == 9
    assert len(arrays["entries"]) > len(arrays["transactions"]) == len(arrays["charges"]) == 19
    assert arrays == orm


CHARGE_ON_SQLITE = """
import django
django.setup()
from datetime import timedelta
from django.db import connection
from django.utils import timezone
from billing.services import ledger_reconcile, rentals_charge_due
from billing.models import RentalCharge
from exchange.models import Rental
rental = Rental.objects.get()
counts = rentals_charge_due(now=rental.paid_through + timedelta(minutes=1))
charges = RentalCharge.objects.filter(rental=rental).count()
print(connection.vendor, counts["charged"], counts["errors"], charges)
print("problems", ledger_reconcile(grace=timedelta(days=365)).problems)
"""


def test_the_charging_run_charges_on_sqlite_through_the_orm(tmp_path):
    """As `make run` has it (tests/marketplace/test_embedded.py): the demo buyer's rental, paid for
    its first hour when bought, is charged its second hour by the run on SQLite."""
    services = ("DJANGO_", "DATABASE_", "REDIS_", "CELERY_")
    env = {key: value for key, value in os.environ.items() if not key.startswith(services)}
    env.update(DJANGO_SETTINGS_MODULE="marketplace.settings.embedded",
               DATABASE_URL=f"sqlite:///{tmp_path / 'embedded.sqlite3'}")
    for command in (["migrate", "--noinput", "-v0"], ["load_gpu_catalog"], ["load_demo_orderbook"],
                    ["market", "open"], ["load_fx_rates", "demo/data/demo_fx_rates.json"],
                    ["load_demo_buyer"]):
        subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env, check=True,
                       capture_output=True, timeout=300)

    charged = subprocess.run([sys.executable, "-c", CHARGE_ON_SQLITE], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=300)

    assert charged.returncode == 0, charged.stderr[-3000:]
    assert charged.stdout.splitlines() == ["sqlite 1 0 2", "problems []"]


def test_a_batch_costs_the_same_statements_whatever_it_holds(time_machine):
    time_machine.move_to(START + timedelta(minutes=1), tick=False)
    ExchangeRateFactory(currency="EUR", rate=Decimal("0.92000000"))
    ExchangeRateFactory(currency="GBP", rate=Decimal("0.79000000"))
    # Each batch reads the rate of each currency it converts to (two at most): both convert to both.
    for currency in ("EUR", "GBP", "USD", "EUR", "GBP", "USD"):
        rental_for(buyer_with(currency, "100.00"))
    rentals_charge_due(now=START + timedelta(minutes=1))  # the first hours create every account
    statements = []

    def count(execute, sql, params, many, context):
        statements[-1] += 1
        return execute(sql, params, many, context)

    later = START + HOUR + timedelta(minutes=1)
    for limit in (2, 4):
        statements.append(0)
        with connection.execute_wrapper(count):
            assert rentals_charge_due(now=later, limit=limit)["charged"] == limit

    assert statements[0] == statements[1] <= 30
