"""The platform's operations page: the market, trading, money per currency and the work waiting
for operators."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Count, Q, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from exchange.models import Rental, RentalState
from exchange.selectors import market_is_open
from sellers.models import ApplicationStatus, SellerApplication, Server, ServerStatus

from ..models import (
    LedgerAccount,
    LedgerEntry,
    PaymentProvider,
    Payout,
    PayoutStatus,
    ReconciliationRun,
    RentalCharge,
    TopUp,
    TopUpStatus,
)

ZERO = Decimal("0.00")


@dataclass(frozen=True)
class TradingWindow:
    gpu_hours: int
    gross_usd: Decimal
    fee_usd: Decimal


@dataclass(frozen=True)
class CurrencyPosition:
    """Per currency: what buyers hold in wallets against what came in through payment clearing
    (less refunds), and the platform's revenue and VAT collected, from the ledger."""

    currency: str
    wallets: Decimal
    clearing: Decimal
    revenue: Decimal
    vat: Decimal


@dataclass(frozen=True)
class OperationsSummary:
    market_open: bool
    rentals_running: int
    gpus_rented: int
    last_24_hours: TradingWindow
    last_30_days: TradingWindow
    positions: list[CurrencyPosition]
    applications_waiting: int
    bank_transfers_waiting: int
    servers_to_verify: int
    payouts_waiting: int
    payouts_waiting_usd: Decimal
    last_reconciliation: ReconciliationRun | None


def operations_summary(*, now: datetime | None = None) -> OperationsSummary:
    """Everything the operations page shows, in nine queries whatever the size of the books."""
    now = now or timezone.now()
    day, month = now - timedelta(hours=24), now - timedelta(days=30)
    running = Rental.objects.filter(state__in=(RentalState.STARTING, RentalState.RUNNING)).aggregate(
        count=Count("id"), gpus=Coalesce(Sum("gpus"), 0)
    )
    windows = RentalCharge.objects.filter(period_start__gte=month).aggregate(
        **{
            f"{name}_{figure}": Coalesce(Sum(column, filter=Q(period_start__gte=since)), default)
            for name, since in (("day", day), ("month", month))
            for figure, column, default in (
                ("hours", "rental__gpus", 0), ("gross", "cost_usd", ZERO), ("fee", "fee_usd", ZERO)
            )
        }
    )
    kinds = LedgerAccount.Kind
    sums = {
        (row["account__kind"], row["currency"]): row["total"]
        for row in LedgerEntry.objects.filter(
            account__kind__in=(kinds.WALLET, kinds.PAYMENT_CLEARING, kinds.PLATFORM_REVENUE,
                               kinds.VAT_PAYABLE)
        ).values("account__kind", "currency").annotate(total=Sum("amount"))
    }
    positions = [
        CurrencyPosition(
            currency=currency,
            wallets=sums.get((kinds.WALLET, currency), ZERO),
            clearing=-sums.get((kinds.PAYMENT_CLEARING, currency), ZERO),
            revenue=sums.get((kinds.PLATFORM_REVENUE, currency), ZERO),
            vat=sums.get((kinds.VAT_PAYABLE, currency), ZERO),
        )
        for currency in ("EUR", "USD", "GBP")
    ]
    payouts = Payout.objects.filter(status=PayoutStatus.REQUESTED).aggregate(
        count=Count("id"), total=Coalesce(Sum("amount"), ZERO)
    )
    return OperationsSummary(
        market_open=market_is_open(),
        rentals_running=running["count"],
        gpus_rented=running["gpus"],
        last_24_hours=TradingWindow(
            gpu_hours=windows["day_hours"], gross_usd=windows["day_gross"], fee_usd=windows["day_fee"]
        ),
        last_30_days=TradingWindow(
            gpu_hours=windows["month_hours"], gross_usd=windows["month_gross"], fee_usd=windows["month_fee"]
        ),
        positions=positions,
        applications_waiting=SellerApplication.objects.filter(status=ApplicationStatus.SUBMITTED).count(),
        bank_transfers_waiting=TopUp.objects.filter(
            provider=PaymentProvider.BANK, status=TopUpStatus.PENDING
        ).count(),
        servers_to_verify=Server.objects.filter(status=ServerStatus.PENDING).count(),
        payouts_waiting=payouts["count"],
        payouts_waiting_usd=payouts["total"],
        last_reconciliation=ReconciliationRun.objects.order_by("-started_at", "-id").first(),
    )
