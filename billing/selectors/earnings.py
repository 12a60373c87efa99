"""A seller's earnings: the entries of its US dollar earnings account and the earnings per month,
read from the ledger."""

from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import NamedTuple

from django.db.models import Q, Subquery, Sum
from django.db.models.functions import Coalesce, TruncMonth
from django.utils import timezone
from django.utils.translation import gettext as _

from ..models import LedgerAccount, LedgerEntry, LedgerTransaction
from ..months import month_of

ZERO = Decimal("0.00")


@dataclass(frozen=True)
class SellerEarningsEntry:
    """One entry of a seller's US dollar earnings account, with what moved it."""

    created_at: object
    label: str
    amount: Decimal


def _seller_entry_label(ledger_transaction: LedgerTransaction) -> str:
    Kind = LedgerTransaction.Kind
    key = ledger_transaction.idempotency_key
    if ledger_transaction.kind == Kind.CHARGE:
        return _("Rental charge")
    if ledger_transaction.kind == Kind.REFUND:
        return _("Refund to a buyer")
    if ledger_transaction.kind == Kind.PAYOUT and key.endswith(":reserve"):
        return _("Reserved for a payout")
    if ledger_transaction.kind == Kind.PAYOUT and key.endswith(":release"):
        return _("Released from a rejected payout")
    if ledger_transaction.kind == Kind.REVERSAL:
        return _("Correction")
    return _("Adjustment")


def seller_earnings_entries(*, seller_id: int, limit: int = 50) -> list[SellerEarningsEntry]:
    """The latest entries of the seller's US dollar earnings account, newest first. One query."""
    entries = (
        LedgerEntry.objects.filter(account__code=f"seller_earnings:{seller_id}:USD")
        .select_related("transaction")
        .order_by("-created_at", "-id")[:limit]
    )
    return [
        SellerEarningsEntry(
            created_at=entry.created_at,
            label=_seller_entry_label(entry.transaction),
            amount=Decimal(entry.amount.amount).quantize(ZERO),
        )
        for entry in entries
    ]


class SellerMonth(NamedTuple):
    """One month of a seller's rental earnings in US dollars: `gross` paid by buyers for hours on
    the seller's servers, the platform's `fee`, and `net` = gross - fee, what the seller earned.
    Refunds after server failures are taken off the month in which they were posted."""

    month: date
    gross: Decimal
    fee: Decimal
    net: Decimal


def seller_earnings_by_month(*, seller_id: int) -> list[SellerMonth]:
    """The seller's earnings per UTC month, oldest first, read from the ledger: the seller's
    earnings entries (net) and the platform revenue entries (fee) of the same transactions, for
    rental charges and refunds and reversals of them; payouts are not earnings and stay out. One
    query."""
    Kind = LedgerTransaction.Kind
    seller_transactions = LedgerEntry.objects.filter(
        account__kind=LedgerAccount.Kind.SELLER_EARNINGS, account__seller_id=seller_id, currency="USD"
    ).values("transaction_id")
    earning_kinds = (Kind.CHARGE, Kind.REFUND)
    rows = (
        LedgerEntry.objects.filter(
            Q(account__kind=LedgerAccount.Kind.SELLER_EARNINGS, account__seller_id=seller_id)
            | Q(account__kind=LedgerAccount.Kind.PLATFORM_REVENUE),
            currency="USD",
            transaction_id__in=Subquery(seller_transactions),
        )
        .filter(
            Q(transaction__kind__in=earning_kinds)
            | Q(transaction__kind=Kind.REVERSAL, transaction__reverses__kind__in=earning_kinds)
        )
        .annotate(month=TruncMonth("created_at", tzinfo=UTC))
        .values("month")
        .annotate(
            net=Coalesce(Sum("amount", filter=Q(account__kind=LedgerAccount.Kind.SELLER_EARNINGS)), ZERO),
            fee=Coalesce(Sum("amount", filter=Q(account__kind=LedgerAccount.Kind.PLATFORM_REVENUE)), ZERO),
        )
        .order_by("month")
    )
    months = []
    for row in rows:
        net = Decimal(row["net"]).quantize(ZERO)
        fee = Decimal(row["fee"]).quantize(ZERO)
        months.append(SellerMonth(month=month_of(row["month"]), gross=net + fee, fee=fee, net=net))
    return months


class EarningsTotal(NamedTuple):
    """A seller's earnings in US dollars over every month: gross, the platform's fee, net."""

    gross: Decimal
    fee: Decimal
    net: Decimal


@dataclass(frozen=True)
class SellerEarnings:
    months: list[SellerMonth]  # newest first
    this_month: SellerMonth  # the current UTC month; zeros when nothing was earned in it yet
    total: EarningsTotal


def seller_earnings_summary(*, seller_id: int, now: datetime | None = None) -> SellerEarnings:
    """The seller's earnings per month (newest first), the current month's and the total, for the
    portal's dashboard and earnings page. One query."""
    months = seller_earnings_by_month(seller_id=seller_id)
    current = month_of(now or timezone.now())
    this_month = next(
        (month for month in months if month.month == current),
        SellerMonth(month=current, gross=ZERO, fee=ZERO, net=ZERO),
    )
    total = EarningsTotal(
        gross=sum((month.gross for month in months), ZERO),
        fee=sum((month.fee for month in months), ZERO),
        net=sum((month.net for month in months), ZERO),
    )
    return SellerEarnings(months=months[::-1], this_month=this_month, total=total)
