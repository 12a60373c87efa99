"""A buyer's wallet as the account pages read it: the balance and its latest movements, what the
running rentals burn and how long the balance lasts, and whether it covers a first hour."""

from dataclasses import dataclass, field
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, F, Sum, Window
from django.utils.translation import gettext as _

from accounts.models import User, Wallet
from exchange.models import Rental, RentalState
from marketplace import formatting
from marketplace.money import money_round

from ..exceptions import RateMissing
from ..models import LedgerEntry, LedgerTransaction, TopUp
from ..months import StatementMonth, statement_months_since
from .fx import BASE_CURRENCY, fx_convert_from_usd, fx_rate_current

ZERO = Decimal("0.00")


def wallet_for_user(*, user: User) -> Wallet | None:
    return Wallet.objects.filter(user=user).first()


def _entries_of(wallet: Wallet):
    return LedgerEntry.objects.filter(account__wallet=wallet).select_related(
        "transaction", "transaction__top_up", "transaction__rental_charge__rental__gpu_model",
        "transaction__top_up_refund__top_up", "transaction__top_up_vat_refund__top_up",
    )


def wallet_entries(*, wallet: Wallet, limit: int = 20) -> list[LedgerEntry]:
    """The wallet's latest ledger entries, newest first, each with its transaction. One query."""
    return list(_entries_of(wallet).order_by("-created_at", "-id")[:limit])


def wallet_movements(*, wallet: Wallet):
    """Every ledger entry of the wallet, newest first, each with its transaction and
    `balance_after`: the wallet's balance once this entry and every earlier one (by id) were
    posted. A queryset for pages of movements: one query a page, the running balance summed by
    the database. Leaving out newer entries (a page's cursor) keeps each running balance exact."""
    return (
        _entries_of(wallet)
        .annotate(balance_after=Window(Sum("amount"), order_by=F("id").asc()))
        .order_by("-id")
    )


def ledger_movement_description(*, ledger_transaction: LedgerTransaction) -> str:
    """What a movement of a wallet was, in the reader's language, as the account page says it."""
    return _movement_description(ledger_transaction)


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
    # Below the buyer's warning threshold (hours, from the profile): the page urges a top-up.
    runway_low: bool = False
    low_balance_hours: int = 0
    # The statements the page links to, newest first: the current month and the one before.
    statement_months: list[StatementMonth] = field(default_factory=list)


def _movement_description(ledger_transaction: LedgerTransaction) -> str:
    """What a movement was, in the reader's language (the stored description is for operators)."""
    label = str(ledger_transaction.get_kind_display())
    top_up = getattr(ledger_transaction, "top_up", None)
    if top_up:
        return f"{label} {top_up.reference}"
    refund = getattr(ledger_transaction, "top_up_refund", None) or getattr(
        ledger_transaction, "top_up_vat_refund", None
    )
    if refund:
        return f"{label} {refund.top_up.reference}"
    charge = getattr(ledger_transaction, "rental_charge", None)
    if charge:
        rental = charge.rental
        return _("Rental #%(number)s, %(count)s × %(gpu)s, hour from %(start)s") % {
            "number": rental.pk, "count": rental.gpus, "gpu": rental.gpu_model.name,
            "start": formatting.datetime_zone(charge.period_start),
        }
    return label


def account_overview(*, user: User, low_balance_hours: int | None = None) -> AccountOverview:
    """What the account page shows, for this user only, in a fixed number of queries. The runway is
    low below `low_balance_hours` (the buyer's threshold; the site's setting when not given)."""
    threshold = low_balance_hours or settings.LOW_BALANCE_WARNING_HOURS
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
        runway_low=bool(runway and runway.is_below(threshold)),
        low_balance_hours=threshold,
        statement_months=statement_months_since(first=user.date_joined) if wallet else [],
    )


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
        return self.is_below(settings.LOW_BALANCE_WARNING_HOURS)

    def is_below(self, hours: int) -> bool:
        """Fewer hours left than `hours`, a buyer's threshold (False when unknown)."""
        return self.hours is not None and self.hours < hours


def wallets_runway(*, wallets: list[Wallet]) -> dict[int, Runway]:
    """The runway of each wallet whose owner has rentals starting or running, by wallet id; wallets
    whose balance nothing burns are left out. One query for the rentals, plus one per non-dollar
    currency for its current rate (at most three in all), whatever the number of wallets."""
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


def rental_first_hour_payable(*, buyer_id: int, price_usd: Decimal, gpus: int) -> bool:
    """Whether the buyer's wallet covers the first hour of `gpus` GPUs at `price_usd` each, converted
    into the wallet's currency at the current rate. Reads the balance without locking it: the
    charge itself decides. False without a wallet or without a rate for its currency."""
    return wallet_covers_first_hour(
        wallet=Wallet.objects.filter(user_id=buyer_id).first(), price_usd=price_usd, gpus=gpus
    )


def wallet_covers_first_hour(
    *, wallet: Wallet | None, price_usd: Decimal, gpus: int, rates: dict | None = None
) -> bool:
    """Whether `wallet` (None: the buyer has none) covers one hour of `gpus` GPUs at `price_usd`
    each, at the current rates (read now, or the `rates` the caller read: `fx_rates_current`).
    The charge converts the same way (`billing.services.charging`)."""
    if wallet is None:
        return False
    try:
        conversion = fx_convert_from_usd(
            amount_usd=money_round(price_usd * gpus, BASE_CURRENCY), currency=wallet.currency, rates=rates
        )
    except RateMissing:
        return False
    return wallet.balance >= conversion.amount
