"""A buyer's monthly usage statement per wallet, read from the ledger, on the page and as CSV.

Months are calendar months in UTC (the site's time zone, `billing.months`), and a movement belongs
to the month in which its ledger entry was written: the statement of a month is exactly the
wallet's ledger entries of that month, so that the opening balance plus every line equals the
closing balance, and both balances are what the ledger held at the two boundaries.
"""

import csv
import io
import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.db.models import Q, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext, pgettext

from accounts.models import Wallet
from exchange.models import Rental
from marketplace import formatting

from ..models import LedgerAccount, LedgerEntry, LedgerTransaction
from ..months import StatementMonth, month_bounds, month_next, month_of, month_previous
from .wallets import wallet_for_user

ZERO = Decimal("0.00")
# The refund of a rental's unused minutes after a server failure (billing.services.refunds).
REFUND_KEY = re.compile(r"rental:(?P<rental_id>\d+):server-failure-refund")


# --- a buyer's monthly statement ------------------------------------------------------------------


class LineKind:
    CHARGE = "charge"
    REFUND = "refund"
    TOP_UP = "top_up"
    OTHER = "other"


@dataclass(frozen=True)
class StatementLine:
    """One ledger entry of the wallet in the month, signed as in the ledger (a charge is negative)."""

    created_at: datetime
    kind: str  # a LineKind
    description: str
    amount: Decimal
    amount_text: str
    rental_id: int | None = None
    period_start: datetime | None = None  # the hour a charge paid for


@dataclass
class RentalGroup:
    """Every charge (and refund) of one rental in the month."""

    rental_id: int
    gpu_name: str
    gpus: int
    price_text: str
    lines: list[StatementLine] = field(default_factory=list)
    hours: int = 0  # hours charged in the month
    charged: Decimal = ZERO  # negative: what the hours cost
    refunded: Decimal = ZERO  # positive
    total: Decimal = ZERO
    total_text: str = ""


@dataclass(frozen=True)
class Statement:
    wallet: Wallet
    currency: str
    month: StatementMonth
    previous: StatementMonth | None  # None for the month the account was created in
    next: StatementMonth | None  # None for the current month
    start: datetime
    end: datetime
    opening: Decimal  # what the ledger held at `start`
    closing: Decimal  # what the ledger held at `end` (or now, for the current month)
    rentals: list[RentalGroup]
    top_ups: list[StatementLine]
    other: list[StatementLine]
    lines: list[StatementLine]  # every line, oldest first
    charges_total: Decimal
    refunds_total: Decimal
    top_ups_total: Decimal
    other_total: Decimal
    texts: dict[str, str]  # the figures above, formatted for the active language

    @property
    def last_day(self) -> date:
        """The month's last day, whose end the closing balance is at."""
        return (self.end - timedelta(days=1)).date()

    @property
    def movements_total(self) -> Decimal:
        return self.charges_total + self.refunds_total + self.top_ups_total + self.other_total


def _line_of(entry: LedgerEntry, currency: str, rental_ids: set[int]) -> StatementLine:
    posted = entry.transaction
    amount = Decimal(entry.amount.amount)
    text = formatting.money(amount, currency)
    charge = getattr(posted, "rental_charge", None)
    if charge is not None:
        rental_ids.add(charge.rental_id)
        return StatementLine(
            created_at=entry.created_at, kind=LineKind.CHARGE,
            description=gettext("Hour from %(start)s") % {
                "start": date_format(charge.period_start, "SHORT_DATETIME_FORMAT")
            },
            amount=amount, amount_text=text, rental_id=charge.rental_id, period_start=charge.period_start,
        )
    refund = None
    if posted.kind == LedgerTransaction.Kind.REFUND:
        refund = REFUND_KEY.fullmatch(posted.idempotency_key)
    if refund is not None:
        rental_id = int(refund["rental_id"])
        rental_ids.add(rental_id)
        return StatementLine(
            created_at=entry.created_at, kind=LineKind.REFUND,
            description=gettext("Refund of the unused minutes after a server failure"),
            amount=amount, amount_text=text, rental_id=rental_id,
        )
    if posted.kind == LedgerTransaction.Kind.TOP_UP:
        top_up = getattr(posted, "top_up", None)  # none for a bank transfer credited by hand
        return StatementLine(
            created_at=entry.created_at, kind=LineKind.TOP_UP,
            description=(
                gettext("Top-up %(reference)s") % {"reference": top_up.reference}
                if top_up is not None else str(posted.get_kind_display())
            ),
            amount=amount, amount_text=text,
        )
    return StatementLine(
        created_at=entry.created_at, kind=LineKind.OTHER, description=str(posted.get_kind_display()),
        amount=amount, amount_text=text,
    )


def wallet_statement(*, wallet: Wallet, month: date, now: datetime | None = None) -> Statement:
    """The wallet's statement of one month: its opening and closing balances as the ledger holds
    them, and every entry of the month, charges and refunds grouped by rental. Three queries
    (balances, entries, rentals), whatever the number of movements, with the wallet's user loaded
    (its creation is the first month with a statement)."""
    now = now or timezone.now()
    start, end = month_bounds(month)
    entries_of_wallet = LedgerEntry.objects.filter(
        account__kind=LedgerAccount.Kind.WALLET, account__wallet=wallet
    )
    balances = entries_of_wallet.aggregate(
        opening=Coalesce(Sum("amount", filter=Q(created_at__lt=start)), ZERO),
        closing=Coalesce(Sum("amount", filter=Q(created_at__lt=end)), ZERO),
    )
    entries = (
        entries_of_wallet.filter(created_at__gte=start, created_at__lt=end)
        .select_related("transaction", "transaction__top_up", "transaction__rental_charge")
        .order_by("created_at", "id")
    )
    currency = wallet.currency
    rental_ids: set[int] = set()
    lines = [_line_of(entry, currency, rental_ids) for entry in entries]
    rentals = (
        {rental.pk: rental for rental in Rental.objects.filter(pk__in=rental_ids).select_related("gpu_model")}
        if rental_ids else {}
    )

    groups: dict[int, RentalGroup] = {}
    top_ups, other = [], []
    for line in lines:
        if line.rental_id is None:
            (top_ups if line.kind == LineKind.TOP_UP else other).append(line)
            continue
        group = groups.get(line.rental_id)
        if group is None:
            rental = rentals[line.rental_id]
            group = groups[line.rental_id] = RentalGroup(
                rental_id=rental.pk, gpu_name=rental.gpu_model.name, gpus=rental.gpus,
                price_text=formatting.usd(rental.price_usd),
            )
        group.lines.append(line)
        if line.kind == LineKind.CHARGE:
            group.hours += 1
            group.charged += line.amount
        else:
            group.refunded += line.amount
        group.total += line.amount
    for group in groups.values():
        group.total_text = formatting.money(group.total, currency)
    rental_groups = sorted(groups.values(), key=lambda group: group.rental_id)

    opening = Decimal(balances["opening"]).quantize(ZERO)
    closing = Decimal(balances["closing"]).quantize(ZERO)
    charges_total = sum((group.charged for group in rental_groups), ZERO)
    refunds_total = sum((group.refunded for group in rental_groups), ZERO)
    top_ups_total = sum((line.amount for line in top_ups), ZERO)
    other_total = sum((line.amount for line in other), ZERO)
    current, first = month_of(now), month_of(wallet.user.date_joined)
    figures = {
        "opening": opening, "closing": closing, "charges_total": charges_total,
        "refunds_total": refunds_total, "top_ups_total": top_ups_total, "other_total": other_total,
    }
    return Statement(
        wallet=wallet,
        currency=currency,
        month=StatementMonth.of(month),
        previous=StatementMonth.of(month_previous(month)) if month > first else None,
        next=StatementMonth.of(month_next(month)) if month < current else None,
        start=start,
        end=end,
        opening=opening,
        closing=closing,
        rentals=rental_groups,
        top_ups=top_ups,
        other=other,
        lines=lines,
        charges_total=charges_total,
        refunds_total=refunds_total,
        top_ups_total=top_ups_total,
        other_total=other_total,
        texts={name: formatting.money(value, currency) for name, value in figures.items()},
    )


def statement_for_user(*, user, month: date, now: datetime | None = None) -> Statement | None:
    """The signed-in user's own statement of `month`; None without a wallet, for a month that has
    not begun, or for one before the account was created. Four queries."""
    now = now or timezone.now()
    if not month_of(user.date_joined) <= month <= month_of(now):
        return None
    wallet = wallet_for_user(user=user)
    if wallet is None:
        return None
    wallet.user = user  # already loaded: the statement reads its creation date
    return wallet_statement(wallet=wallet, month=month, now=now)


def _cell(text: str) -> str:
    """Text that a spreadsheet shows as text: a leading =, +, - or @ would make it a formula."""
    return f"'{text}" if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def statement_csv(*, statement: Statement) -> str:
    """The statement as CSV for spreadsheets and accounting tools: column titles and kinds in the
    active language, times in ISO 8601 UTC and amounts as plain signed decimals with a point
    (machine-readable on purpose, unlike the page), the opening balance first and the closing last."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow([
        gettext("Date (UTC)"), gettext("Type"), gettext("Rental"), gettext("Description"),
        gettext("Hour from (UTC)"), gettext("Amount"), gettext("Currency"),
    ])
    kinds = {
        LineKind.CHARGE: pgettext("statement line", "Rental charge"),
        LineKind.REFUND: pgettext("statement line", "Refund"),
        LineKind.TOP_UP: pgettext("statement line", "Top-up"),
        LineKind.OTHER: pgettext("statement line", "Other movement"),
    }
    currency = statement.currency
    writer.writerow([
        _utc(statement.start), pgettext("statement line", "Opening balance"), "", "", "",
        f"{statement.opening:f}", currency,
    ])
    for line in statement.lines:
        writer.writerow([
            _utc(line.created_at), kinds[line.kind], line.rental_id or "", _cell(line.description),
            _utc(line.period_start) if line.period_start else "", f"{line.amount:f}", currency,
        ])
    writer.writerow([
        _utc(min(statement.end, max(statement.start, timezone.now()))),
        pgettext("statement line", "Closing balance"), "", "", "", f"{statement.closing:f}", currency,
    ])
    return out.getvalue()
