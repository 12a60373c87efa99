"""What PostgreSQL itself refuses, whoever writes: unbalanced or lonely transactions (at commit),
any UPDATE or DELETE of the ledger, an entry in another currency than its account, a negative
wallet. Raw SQL on purpose: these guarantees must hold when the service is bypassed."""

from contextlib import contextmanager
from decimal import Decimal

import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone

from billing.ledger import ledger_account_for_wallet, ledger_account_system, ledger_post
from billing.models import LedgerAccount, LedgerEntry, LedgerTransaction
from tests.factories import WalletFactory

Kind = LedgerAccount.Kind


@pytest.fixture
def accounts(db):
    return (
        ledger_account_system(kind=Kind.ADJUSTMENTS, currency="EUR"),
        ledger_account_system(kind=Kind.PLATFORM_REVENUE, currency="EUR"),
    )


@contextmanager
def raw_sql():
    """A cursor inside its own database transaction, committed (and checked) on exit."""
    with transaction.atomic(), connection.cursor() as cursor:
        yield cursor


def insert_transaction(cursor, key: str) -> int:
    cursor.execute(
        "INSERT INTO billing_ledgertransaction (idempotency_key, kind, description, created_at)"
        " VALUES (%s, 'adjustment', 'raw', %s) RETURNING id",
        [key, timezone.now()],
    )
    return cursor.fetchone()[0]


def insert_entry(cursor, transaction_id: int, account: LedgerAccount, amount: str, currency: str = "EUR"):
    cursor.execute(
        "INSERT INTO billing_ledgerentry (transaction_id, account_id, amount, currency, created_at)"
        " VALUES (%s, %s, %s, %s, %s)",
        [transaction_id, account.pk, Decimal(amount), currency, timezone.now()],
    )


def raw_post(entries: list[tuple[LedgerAccount, str]], key: str = "raw-1") -> None:
    """Insert a transaction and its entries with raw SQL, in one database transaction."""
    with raw_sql() as cursor:
        transaction_id = insert_transaction(cursor, key)
        for account, amount in entries:
            insert_entry(cursor, transaction_id, account, amount)


@pytest.mark.django_db(transaction=True)
def test_a_balanced_raw_transaction_commits(accounts):
    adjustments, revenue = accounts
    raw_post([(adjustments, "10.00"), (revenue, "-10.00")])
    assert LedgerEntry.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_an_unbalanced_raw_transaction_is_refused_at_commit(accounts):
    adjustments, revenue = accounts
    steps = []
    with pytest.raises(IntegrityError, match="does not balance"), raw_sql() as cursor:
        transaction_id = insert_transaction(cursor, "raw-unbalanced")
        insert_entry(cursor, transaction_id, adjustments, "10.00")
        insert_entry(cursor, transaction_id, revenue, "-9.99")
        steps.append("inserted")  # the inserts themselves pass: the check waits for COMMIT
    assert steps == ["inserted"]
    assert (LedgerTransaction.objects.count(), LedgerEntry.objects.count()) == (0, 0)


@pytest.mark.django_db(transaction=True)
def test_balancing_across_currencies_is_refused_at_commit(accounts):
    adjustments, _ = accounts
    usd = ledger_account_system(kind=Kind.ADJUSTMENTS, currency="USD")
    with pytest.raises(IntegrityError, match="does not balance"), raw_sql() as cursor:
        transaction_id = insert_transaction(cursor, "cross")
        insert_entry(cursor, transaction_id, adjustments, "10.00", "EUR")
        insert_entry(cursor, transaction_id, usd, "-10.00", "USD")
    assert (LedgerTransaction.objects.count(), LedgerEntry.objects.count()) == (0, 0)


@pytest.mark.django_db(transaction=True)
def test_a_transaction_without_entries_is_refused_at_commit(accounts):
    with pytest.raises(IntegrityError, match="at least two"):
        raw_post([])
    assert LedgerTransaction.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_transaction_with_one_entry_is_refused_at_commit(accounts):
    adjustments, _ = accounts
    with pytest.raises(IntegrityError):
        raw_post([(adjustments, "10.00")])
    assert (LedgerTransaction.objects.count(), LedgerEntry.objects.count()) == (0, 0)


@pytest.mark.django_db(transaction=True)
def test_entries_added_later_must_balance_too(accounts):
    adjustments, revenue = accounts
    raw_post([(adjustments, "10.00"), (revenue, "-10.00")])
    posted = LedgerTransaction.objects.get()
    with pytest.raises(IntegrityError, match="does not balance"), raw_sql() as cursor:
        insert_entry(cursor, posted.pk, adjustments, "5.00")
    assert LedgerEntry.objects.count() == 2


@pytest.mark.django_db
def test_an_entry_in_another_currency_than_its_account_is_refused(accounts):
    adjustments, revenue = accounts
    with pytest.raises(IntegrityError, match="another currency"), raw_sql() as cursor:
        transaction_id = insert_transaction(cursor, "wrong-currency")
        insert_entry(cursor, transaction_id, adjustments, "10.00", "USD")


@pytest.mark.django_db
def test_a_zero_entry_is_refused(accounts):
    adjustments, _ = accounts
    with pytest.raises(IntegrityError), raw_sql() as cursor:
        insert_entry(cursor, insert_transaction(cursor, "zero"), adjustments, "0.00")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE billing_ledgerentry SET amount = amount + 1",
        "UPDATE billing_ledgerentry SET currency = currency",
        "DELETE FROM billing_ledgerentry",
        "UPDATE billing_ledgertransaction SET description = 'edited'",
        "DELETE FROM billing_ledgertransaction",
    ],
)
def test_the_ledger_is_append_only(accounts, statement):
    adjustments, revenue = accounts
    ledger_post(
        idempotency_key="k", kind="adjustment", description="",
        lines=[(adjustments, Decimal("10.00")), (revenue, Decimal("-10.00"))],
    )
    with pytest.raises(DatabaseError, match="append-only"), raw_sql() as cursor:
        cursor.execute(statement)
    amounts = sorted(LedgerEntry.objects.values_list("amount", flat=True))
    assert amounts == [Decimal("-10.00"), Decimal("10.00")]
    assert LedgerTransaction.objects.get().description == ""


@pytest.mark.django_db
def test_the_orm_cannot_delete_or_edit_ledger_rows_either(accounts):
    adjustments, revenue = accounts
    posted = ledger_post(
        idempotency_key="k", kind="adjustment", description="",
        lines=[(adjustments, Decimal("10.00")), (revenue, Decimal("-10.00"))],
    ).transaction
    with pytest.raises(IntegrityError), transaction.atomic():
        LedgerEntry.objects.filter(transaction=posted).delete()
    with pytest.raises(IntegrityError), transaction.atomic():
        posted.description = "edited"
        posted.save()
    assert LedgerEntry.objects.count() == 2


@pytest.mark.django_db
def test_a_negative_wallet_balance_is_refused_by_the_database():
    wallet = WalletFactory(currency="EUR", balance=Decimal("5.00"))
    with pytest.raises(IntegrityError), raw_sql() as cursor:
        cursor.execute("UPDATE accounts_wallet SET balance = -0.01 WHERE id = %s", [wallet.pk])
    wallet.refresh_from_db()
    assert wallet.balance == Decimal("5.00")


@pytest.mark.django_db(transaction=True)
def test_the_service_commits_what_the_database_accepts():
    wallet = WalletFactory(currency="EUR")
    clearing = ledger_account_system(kind=Kind.PAYMENT_CLEARING, currency="EUR", provider="stripe")
    ledger_post(
        idempotency_key="evt_1", kind="top_up", description="",
        lines=[
            (ledger_account_for_wallet(wallet=wallet), Decimal("50.00")),
            (ledger_account_system(kind=Kind.VAT_PAYABLE, currency="EUR"), Decimal("11.50")),
            (clearing, Decimal("-61.50")),
        ],
    )
    wallet.refresh_from_db()
    assert wallet.balance == Decimal("50.00")
    assert LedgerEntry.objects.count() == 3
