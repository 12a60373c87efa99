"""Real threads, each with its own database connection, committing for real."""

from decimal import Decimal

import pytest

from billing.ledger import ledger_account_for_wallet, ledger_account_system, ledger_post
from billing.models import LedgerAccount, LedgerEntry, LedgerTransaction
from tests.factories import WalletFactory
from tests.threads import run_together

pytestmark = pytest.mark.django_db(transaction=True)

Kind = LedgerAccount.Kind


def top_up_lines(wallet, amount: str):
    return [
        (ledger_account_for_wallet(wallet=wallet), Decimal(amount)),
        (ledger_account_system(kind=Kind.PAYMENT_CLEARING, currency=wallet.currency, provider="stripe"),
         -Decimal(amount)),
    ]


def test_ten_threads_posting_the_same_key_move_the_money_once():
    wallet = WalletFactory(currency="EUR")
    lines = top_up_lines(wallet, "25.00")

    results, errors = run_together(
        10,
        lambda _: ledger_post(idempotency_key="evt_same", kind="top_up", description="", lines=lines),
    )

    assert errors == []
    assert len(results) == 10
    assert sum(result.created for result in results) == 1
    assert {result.transaction.pk for result in results} == {LedgerTransaction.objects.get().pk}
    assert LedgerEntry.objects.count() == 2
    wallet.refresh_from_db()
    assert wallet.balance == Decimal("25.00")


def test_ten_threads_posting_the_same_key_without_a_wallet_meet_on_the_unique_index():
    adjustments = ledger_account_system(kind=Kind.ADJUSTMENTS, currency="USD")
    revenue = ledger_account_system(kind=Kind.PLATFORM_REVENUE, currency="USD")
    lines = [(adjustments, Decimal("-3.00")), (revenue, Decimal("3.00"))]

    results, errors = run_together(
        10,
        lambda _: ledger_post(idempotency_key="fee-1", kind="adjustment", description="", lines=lines),
    )

    assert errors == []
    assert sum(result.created for result in results) == 1
    assert len({result.transaction.pk for result in results}) == 1
    assert (LedgerTransaction.objects.count(), LedgerEntry.objects.count()) == (1, 2)


def test_opposite_transfers_between_two_wallets_do_not_deadlock():
    first = WalletFactory(currency="EUR")
    second = WalletFactory(currency="EUR")
    ledger_post(idempotency_key="fund-1", kind="top_up", description="", lines=top_up_lines(first, "100.00"))
    ledger_post(idempotency_key="fund-2", kind="top_up", description="", lines=top_up_lines(second, "100.00"))
    accounts = [ledger_account_for_wallet(wallet=first), ledger_account_for_wallet(wallet=second)]
    rounds = 15

    def transfer(index: int) -> int:
        # Thread 0 lists the first wallet first, thread 1 the second: the service must still
        # lock them in the same (ascending id) order.
        source, target = accounts if index % 2 == 0 else accounts[::-1]
        for round_ in range(rounds):
            ledger_post(
                idempotency_key=f"transfer:{index}:{round_}", kind="adjustment", description="",
                lines=[(source, Decimal("-1.00")), (target, Decimal("1.00"))],
            )
        return index

    results, errors = run_together(2, transfer)

    assert errors == []
    assert sorted(results) == [0, 1]
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.balance, second.balance) == (Decimal("100.00"), Decimal("100.00"))
    assert LedgerTransaction.objects.count() == 2 + 2 * rounds


def test_concurrent_spending_never_takes_a_wallet_below_zero():
    wallet = WalletFactory(currency="EUR")
    ledger_post(idempotency_key="fund", kind="top_up", description="", lines=top_up_lines(wallet, "5.00"))
    wallet_account = ledger_account_for_wallet(wallet=wallet)
    revenue = ledger_account_system(kind=Kind.PLATFORM_REVENUE, currency="EUR")

    results, errors = run_together(
        8,
        lambda index: ledger_post(
            idempotency_key=f"charge-{index}", kind="charge", description="",
            lines=[(wallet_account, Decimal("-1.00")), (revenue, Decimal("1.00"))],
        ),
    )

    assert len(results) == 5
    assert [type(error).__name__ for error in errors] == ["InsufficientBalance"] * 3
    wallet.refresh_from_db()
    assert wallet.balance == Decimal("0.00")


def test_concurrent_account_creation_gives_one_account():
    wallet = WalletFactory(currency="GBP")

    results, errors = run_together(
        8,
        lambda index: (
            ledger_account_system(kind=Kind.VAT_PAYABLE, currency="GBP").pk
            if index % 2
            else ledger_account_for_wallet(wallet=wallet).pk
        ),
    )

    assert errors == []
    assert len(set(results)) == 2
    assert LedgerAccount.objects.count() == 2
