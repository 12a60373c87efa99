"""A seller's payouts as the portal shows them: what may be asked for, the smallest payout, and the
requests waiting for an operator."""

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, QuerySet, Sum
from django.db.models.functions import Coalesce

from sellers.models import Seller

from ..models import LedgerAccount, Payout, PayoutStatus
from .balances import ledger_account_balance

ZERO = Decimal("0.00")
CURRENCY = "USD"  # payouts are paid from the US dollar earnings account


def payout_minimum() -> Decimal:
    return Decimal(str(settings.PAYOUT_MINIMUM_USD)).quantize(ZERO)


def payout_available(*, seller: Seller) -> Decimal:
    """What the seller may ask to be paid now: the balance of its US dollar earnings account."""
    account = LedgerAccount.objects.filter(code=f"seller_earnings:{seller.pk}:{CURRENCY}").first()
    return ZERO if account is None else ledger_account_balance(account=account)


def payouts_for_seller(*, seller: Seller) -> QuerySet[Payout]:
    """The seller's payout requests, newest first."""
    return Payout.objects.filter(seller=seller).order_by("-requested_at", "-id")


@dataclass(frozen=True)
class PendingPayouts:
    count: int
    total: Decimal


def seller_payouts_pending(*, seller_id: int) -> PendingPayouts:
    """The seller's payout requests not yet paid or rejected: how many, and their total. One query."""
    row = Payout.objects.filter(seller_id=seller_id, status=PayoutStatus.REQUESTED).aggregate(
        count=Count("id"), total=Coalesce(Sum("amount"), ZERO)
    )
    return PendingPayouts(count=row["count"], total=Decimal(row["total"]).quantize(ZERO))
