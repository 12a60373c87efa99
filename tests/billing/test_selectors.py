from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import timezone

from billing.ledger import ledger_account_for_wallet, ledger_account_system, ledger_post
from billing.models import LedgerAccount, LedgerEntry, LedgerTransaction
from billing.selectors import (
    ledger_account_balance,
    ledger_unbalanced_transactions,
    wallet_entries,
    wallet_ledger_balance,
)
from tests.factories import WalletFactory

pytestmark = pytest.mark.django_db

Kind = LedgerAccount.Kind


def post(wallet, key: str, amount: str):
    ledger_post(
        idempotency_key=key, kind="adjustment", description=key,
        lines=[
            (ledger_account_for_wallet(wallet=wallet), Decimal(amount)),
            (ledger_account_system(kind=Kind.ADJUSTMENTS, currency=wallet.currency), -Decimal(amount)),
        ],
    )


def test_wallet_entries_newest_first_in_one_query(django_assert_num_queries):
    wallet = WalletFactory(currency="EUR")
    other = WalletFactory(currency="EUR")
    for index in range(25):
        post(wallet, f"k{index}", "1.00")
    post(other, "other", "7.00")

    with django_assert_num_queries(1):
        entries = wallet_entries(wallet=wallet)
        descriptions = [entry.transaction.description for entry in entries]

    assert len(entries) == 20
    assert descriptions == [f"k{index}" for index in range(24, 4, -1)]
    assert all(entry.amount.amount == Decimal("1.00") for entry in entries)
    with django_assert_num_queries(1):
        assert len(wallet_entries(wallet=wallet, limit=5)) == 5


def test_balances_sum_the_entries_exactly():
    wallet = WalletFactory(currency="EUR")
    assert wallet_ledger_balance(wallet=wallet) == Decimal("0.00")
    for index, amount in enumerate(["0.10", "0.20", "0.30", "-0.15"]):
        post(wallet, f"k{index}", amount)
    wallet.refresh_from_db()
    assert wallet_ledger_balance(wallet=wallet) == wallet.balance == Decimal("0.45")
    adjustments = LedgerAccount.objects.get(code="adjustments:EUR")
    balance = ledger_account_balance(account=adjustments)
    assert balance == Decimal("-0.45")
    assert str(balance) == "-0.45"


def test_unbalanced_transactions_are_found():
    # Written past the service, as a SQLite database could hold them.
    wallet = WalletFactory(currency="EUR")
    post(wallet, "fine", "5.00")
    adjustments = ledger_account_system(kind=Kind.ADJUSTMENTS, currency="EUR")
    revenue = ledger_account_system(kind=Kind.PLATFORM_REVENUE, currency="EUR")
    usd = ledger_account_system(kind=Kind.ADJUSTMENTS, currency="USD")
    now = timezone.now()

    with transaction.atomic():
        lopsided = LedgerTransaction.objects.create(
            idempotency_key="lopsided", kind="adjustment", created_at=now
        )
        LedgerEntry.objects.bulk_create([
            LedgerEntry(transaction=lopsided, account=adjustments, amount=Decimal("1.00"), currency="EUR"),
            LedgerEntry(transaction=lopsided, account=revenue, amount=Decimal("-0.99"), currency="EUR"),
        ])
        cross = LedgerTransaction.objects.create(idempotency_key="cross", kind="fx", created_at=now)
        LedgerEntry.objects.bulk_create([
            LedgerEntry(transaction=cross, account=adjustments, amount=Decimal("1.00"), currency="EUR"),
            LedgerEntry(transaction=cross, account=usd, amount=Decimal("-1.00"), currency="USD"),
        ])
        empty = LedgerTransaction.objects.create(idempotency_key="empty", kind="adjustment", created_at=now)

        assert ledger_unbalanced_transactions() == sorted([lopsided.pk, cross.pk, empty.pk])
        # Roll the savepoint back: PostgreSQL would refuse these rows when the test's
        # transaction checks its deferred constraints.
        transaction.set_rollback(True)
    assert ledger_unbalanced_transactions() == []


def test_no_unbalanced_transactions_when_everything_went_through_the_service():
    post(WalletFactory(currency="GBP"), "a", "3.00")
    assert ledger_unbalanced_transactions() == []
