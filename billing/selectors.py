"""Reads of the ledger. Each runs a constant number of queries."""

from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Q, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext as _

from accounts.models import Wallet
from exchange.models import Rental, RentalState
from exchange.selectors import market_is_open
from marketplace import formatting
from sellers.models import ApplicationStatus, SellerApplication

from .models import (
    CreditNote,
    Invoice,
    LedgerAccount,
    LedgerEntry,
    LedgerTransaction,
    Payout,
    PayoutStatus,
    ReconciliationRun,
    RentalCharge,
    TopUp,
)

ZERO = Decimal("0.00")


def wallet_entries(*, wallet: Wallet, limit: int = 20) -> list[LedgerEntry]:
    """The wallet's latest ledger entries, newest first, each with its transaction. One query."""
    return list(
        LedgerEntry.objects.filter(account__wallet=wallet)
        .select_related(
            "transaction", "transaction__top_up", "transaction__rental_charge__rental__gpu_model",
            "transaction__top_up_refund__top_up",
        )
        .order_by("-created_at", "-id")[:limit]
    )


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


@dataclass(frozen=True)
class EntryLine:
    created_at: object
    description: str
    amount_text: str


@dataclass(frozen=True)
class AccountOverview:
    wallet: Wallet | None
    balance_text: str
    entries: list
    top_ups: list
    # What the running rentals burn and how long the balance lasts; None when nothing burns it.
    runway: "Runway | None" = None
    runway_hours_text: str = ""  # whole hours, rounded down, formatted; "" when unknown (no rate)
    burn_rate_text: str = ""  # US dollars per hour, formatted
    # Below settings.LOW_BALANCE_WARNING_HOURS: the page urges a top-up.
    runway_low: bool = False
    # The statements the page links to, newest first: the current month and the one before.
    statement_months: list = field(default_factory=list)


def _movement_description(ledger_transaction: LedgerTransaction) -> str:
    """What a movement was, in the reader's language (the stored description is for operators)."""
    label = str(ledger_transaction.get_kind_display())
    top_up = getattr(ledger_transaction, "top_up", None)
    if top_up:
        return f"{label} {top_up.reference}"
    refund = getattr(ledger_transaction, "top_up_refund", None)
    if refund:
        return f"{label} {refund.top_up.reference}"
    charge = getattr(ledger_transaction, "rental_charge", None)
    if charge:
        rental = charge.rental
        return _("Rental #%(number)s, %(count)s × %(gpu)s, hour from %(start)s") % {
            "number": rental.pk, "count": rental.gpus, "gpu": rental.gpu_model.name,
            "start": date_format(charge.period_start, "SHORT_DATETIME_FORMAT"),
        }
    return label


def wallet_for_user(*, user) -> Wallet | None:
    return Wallet.objects.filter(user=user).first()


def account_overview(*, user) -> AccountOverview:
    """What the account page shows, for this user only, in a fixed number of queries."""
    wallet = wallet_for_user(user=user)
    entries = []
    if wallet:
        entries = [
            EntryLine(
                created_at=entry.created_at,
                description=_movement_description(entry.transaction),
                amount_text=formatting.money(entry.amount.amount, wallet.currency),
            )
            for entry in wallet_entries(wallet=wallet, limit=20)
        ]
    top_ups = list(
        TopUp.objects.filter(user=user).select_related("invoice")
        .prefetch_related("invoice__credit_notes").order_by("-created_at", "-id")[:20]
    )
    for top_up in top_ups:
        top_up.amount_text = formatting.money(top_up.amount, top_up.currency)
        top_up.total_text = formatting.money(top_up.total, top_up.currency)
    runway = wallet_runway(wallet=wallet) if wallet else None
    return AccountOverview(
        wallet=wallet,
        balance_text=formatting.money(wallet.balance, wallet.currency) if wallet else "",
        entries=entries,
        top_ups=top_ups,
        runway=runway,
        runway_hours_text=formatting.number(runway.hours) if runway and runway.hours is not None else "",
        burn_rate_text=formatting.usd(runway.per_hour_usd) if runway else "",
        runway_low=bool(runway and runway.is_low),
        statement_months=statement_months_recent() if wallet else [],
    )


def top_up_get_for_user(*, user, pk: int) -> TopUp | None:
    return TopUp.objects.filter(user=user, pk=pk).select_related("invoice").first()


def invoice_get_for_user(*, user, number: str) -> Invoice | None:
    return Invoice.objects.filter(top_up__user=user, number=number).select_related("top_up").first()


def credit_note_get_for_user(*, user, number: str) -> CreditNote | None:
    return (
        CreditNote.objects.filter(invoice__top_up__user=user, number=number)
        .select_related("invoice").first()
    )


# --- rental charges -------------------------------------------------------------------------


def rental_costs(*, rental_ids) -> dict[int, tuple[Decimal, str]]:
    """What each rental has cost its buyer so far, as (total, currency of the wallet), in one
    query. Rentals without a charge yet are left out. A wallet keeps its currency for good, so
    a rental's charges share one currency."""
    from .models import RentalCharge

    rows = (
        RentalCharge.objects.filter(rental_id__in=list(rental_ids))
        .values("rental_id", "currency")
        .annotate(total=Sum("amount"))
        .order_by("rental_id", "currency")
    )
    return {row["rental_id"]: (Decimal(row["total"]).quantize(ZERO), row["currency"]) for row in rows}


def wallet_runway_hours(*, wallet: Wallet) -> int | None:
    """How many more full hours the wallet pays for its owner's rentals that are starting or running,
    each hour of each rental converted at the current rate as a charge would be. None when
    nothing burns the balance, or when the wallet's currency has no rate. Two queries."""
    from exchange.models import Rental, RentalState
    from marketplace.money import money_round

    from .fx import BASE_CURRENCY, fx_rate_current

    rentals = list(
        Rental.objects.filter(
            buyer_id=wallet.user_id, state__in=(RentalState.STARTING, RentalState.RUNNING)
        ).values_list("price_usd", "gpus")
    )
    if not rentals:
        return None
    if wallet.currency == BASE_CURRENCY:
        rate = Decimal(1)
    else:
        current = fx_rate_current(currency=wallet.currency)
        if current is None:
            return None
        rate = current.rate
    per_hour = sum(
        (
            money_round(money_round(price * gpus, BASE_CURRENCY) * rate, wallet.currency)
            for price, gpus in rentals
        ),
        ZERO,
    )
    return int(wallet.balance // per_hour) if per_hour > 0 else None


# --- runway: what the running rentals burn and how long the balance pays for them ------------------


@dataclass(frozen=True)
class Runway:
    """The burn rate of a buyer's rentals that are starting or running, and the wallet's runway.

    `per_hour_usd` sums price x GPUs of each rental; `per_hour` is the same hour in the wallet's
    currency, each rental converted and rounded at the current rate as its charge would be (None
    when the currency has no rate). `hours` is how many more full hours the balance pays (rounded
    down; None when `per_hour` is unknown).
    """

    currency: str
    balance: Decimal
    rentals: int
    per_hour_usd: Decimal
    per_hour: Decimal | None
    hours: int | None

    @property
    def is_low(self) -> bool:
        """Fewer hours left than settings.LOW_BALANCE_WARNING_HOURS (False when unknown)."""
        return self.hours is not None and self.hours < settings.LOW_BALANCE_WARNING_HOURS


def wallets_runway(*, wallets) -> dict[int, Runway]:
    """The runway of each wallet whose owner has rentals starting or running, by wallet id; wallets
    whose balance nothing burns are left out. One query for the rentals, plus one per non-dollar
    currency for its current rate (at most three in all), whatever the number of wallets."""
    from exchange.models import Rental, RentalState
    from marketplace.money import money_round

    from .fx import BASE_CURRENCY, fx_rate_current

    by_user = {wallet.user_id: wallet for wallet in wallets}
    if not by_user:
        return {}
    rows = (
        Rental.objects.filter(
            buyer_id__in=list(by_user), state__in=(RentalState.STARTING, RentalState.RUNNING)
        )
        .values("buyer_id", "price_usd", "gpus")
        .annotate(count=Count("id"))
        .order_by("buyer_id", "price_usd", "gpus")
    )
    burns: dict[int, list[tuple[Decimal, int]]] = {}
    for row in rows:
        cost_usd = money_round(row["price_usd"] * row["gpus"], BASE_CURRENCY)
        burns.setdefault(row["buyer_id"], []).append((cost_usd, row["count"]))
    rates: dict[str, Decimal | None] = {BASE_CURRENCY: Decimal(1)}
    runways = {}
    for user_id, burn in burns.items():
        wallet = by_user[user_id]
        if wallet.currency not in rates:
            current = fx_rate_current(currency=wallet.currency)
            rates[wallet.currency] = current.rate if current else None
        rate = rates[wallet.currency]
        per_hour_usd = sum((cost * count for cost, count in burn), ZERO)
        per_hour = None
        if rate is not None:
            per_hour = sum((money_round(cost * rate, wallet.currency) * count for cost, count in burn), ZERO)
        hours = int(wallet.balance // per_hour) if per_hour else None
        runways[wallet.pk] = Runway(
            currency=wallet.currency,
            balance=wallet.balance,
            rentals=sum(count for _cost, count in burn),
            per_hour_usd=per_hour_usd,
            per_hour=per_hour,
            hours=hours,
        )
    return runways


def wallet_runway(*, wallet: Wallet) -> Runway | None:
    """The runway of one wallet (see `Runway`), None when nothing burns its balance. At most two
    queries."""
    return wallets_runway(wallets=[wallet]).get(wallet.pk)


def statement_months_recent(*, now=None) -> list:
    """The current month and the one before (UTC), newest first, as `StatementMonth`s."""
    from .statements import StatementMonth, month_of, month_previous

    current = month_of(now or timezone.now())
    return [StatementMonth.of(current), StatementMonth.of(month_previous(current))]


def seller_revenue_by_rental(*, rental_ids) -> dict[int, Decimal]:
    """What the seller has earned from each rental so far (US dollars, after the platform's fee),
    in one query. Rentals without a charge yet are left out."""
    from .models import RentalCharge

    rows = (
        RentalCharge.objects.filter(rental_id__in=list(rental_ids))
        .values("rental_id")
        .annotate(total=Sum("seller_earnings_usd"))
        .order_by("rental_id")
    )
    return {row["rental_id"]: Decimal(row["total"]).quantize(ZERO) for row in rows}


# --- a seller's earnings account ------------------------------------------------------------------


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


# --- the operations page -------------------------------------------------------------------------


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
    payouts_waiting: int
    payouts_waiting_usd: Decimal
    last_reconciliation: ReconciliationRun | None


def operations_summary(*, now=None) -> OperationsSummary:
    """Everything the operations page shows, in seven queries whatever the size of the books."""
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
        payouts_waiting=payouts["count"],
        payouts_waiting_usd=payouts["total"],
        last_reconciliation=ReconciliationRun.objects.order_by("-started_at", "-id").first(),
    )
