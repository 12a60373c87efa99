"""Reads of the ledger. Each runs a constant number of queries."""

from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Count, Q, Sum
from django.db.models.functions import Coalesce
from django.utils.formats import date_format
from django.utils.translation import gettext as _

from accounts.models import Wallet
from marketplace import formatting

from .models import Invoice, LedgerAccount, LedgerEntry, LedgerTransaction, TopUp

ZERO = Decimal("0.00")


def wallet_entries(*, wallet: Wallet, limit: int = 20) -> list[LedgerEntry]:
    """The wallet's latest ledger entries, newest first, each with its transaction. One query."""
    return list(
        LedgerEntry.objects.filter(account__wallet=wallet)
        .select_related(
            "transaction", "transaction__top_up", "transaction__rental_charge__rental__gpu_model"
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


def _movement_description(ledger_transaction: LedgerTransaction) -> str:
    """What a movement was, in the reader's language (the stored description is for operators)."""
    label = str(ledger_transaction.get_kind_display())
    top_up = getattr(ledger_transaction, "top_up", None)
    if top_up:
        return f"{label} {top_up.reference}"
    charge = getattr(ledger_transaction, "rental_charge", None)
    if charge:
        rental = charge.rental
        return _("Rental #%(number)s, %(count)s × %(gpu)s, hour from %(start)s") % {
            "number": rental.pk, "count": rental.gpus, "gpu": rental.gpu_model.name,
            "start": date_format(charge.period_start, "SHORT_DATETIME_FORMAT"),
        }
    return label


def account_overview(*, user) -> AccountOverview:
    """What the account page shows, for this user only, in a fixed number of queries."""
    wallet = Wallet.objects.filter(user=user).first()
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
        TopUp.objects.filter(user=user).select_related("invoice").order_by("-created_at", "-id")[:20]
    )
    for top_up in top_ups:
        top_up.amount_text = formatting.money(top_up.amount, top_up.currency)
        top_up.total_text = formatting.money(top_up.total, top_up.currency)
    return AccountOverview(
        wallet=wallet,
        balance_text=formatting.money(wallet.balance, wallet.currency) if wallet else "",
        entries=entries,
        top_ups=top_ups,
    )


def top_up_get_for_user(*, user, pk: int) -> TopUp | None:
    return TopUp.objects.filter(user=user, pk=pk).select_related("invoice").first()


def invoice_get_for_user(*, user, number: str) -> Invoice | None:
    return Invoice.objects.filter(top_up__user=user, number=number).select_related("top_up").first()


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
