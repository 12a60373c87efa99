"""Balances as the ledger holds them, and the checks that the books sum up. Each runs one query
or two."""

from decimal import Decimal

from django.db.models import Count, Q, Sum
from django.db.models.functions import Coalesce

from accounts.models import Wallet

from ..models import LedgerAccount, LedgerEntry, LedgerTransaction

ZERO = Decimal("0.00")


def _entries_sum(entries) -> Decimal:
    total = entries.aggregate(total=Coalesce(Sum("amount"), ZERO))["total"]
    return Decimal(total).quantize(ZERO)


def ledger_account_balance(*, account: LedgerAccount) -> Decimal:
    """The sum of the account's entries, in the account's currency."""
    return _entries_sum(LedgerEntry.objects.filter(account=account))


def wallet_ledger_balance(*, wallet: Wallet) -> Decimal:
    """What the ledger says the wallet holds; `Wallet.balance` caches the same figure."""
    return _entries_sum(LedgerEntry.objects.filter(account__wallet=wallet))


def ledger_unbalanced_transactions() -> list[int]:
    """Ids of transactions whose entries do not sum to zero in some currency, or that have fewer
    than two entries, for reconciliation. Always empty on PostgreSQL, where the database refuses
    them at commit; on SQLite only the service's checks stand guard."""
    unbalanced = (
        LedgerEntry.objects.values("transaction_id", "currency")
        .annotate(total=Sum("amount"))
        .exclude(total=0)
        .values_list("transaction_id", flat=True)
    )
    too_few = (
        LedgerTransaction.objects.annotate(entry_count=Count("entries"))
        .filter(Q(entry_count__lt=2))
        .values_list("id", flat=True)
    )
    return sorted(set(unbalanced) | set(too_few))
