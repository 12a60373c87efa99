"""Reconciliation: do the books say what the ledger says?

`ledger_reconcile` runs daily (Celery beat, task "billing.ledger_reconcile") and on demand
(`manage.py reconcile_ledger`). It checks, on one snapshot of the database:

- every wallet's cached `balance` equals the sum of its ledger entries;
- every ledger transaction sums to zero in each currency and has at least two entries;
- every running rental is paid through the current hour (`paid_through` > now), and no rental
  waits in "starting" for its first charge. Charging runs every minute, so a rental that crossed
  its boundary less than `grace` ago is not yet a problem. A paid rental that waits for its login
  (starting until delivered, or ended "not delivered" by the agents check) is not a charging one.

Each run is recorded as a `ReconciliationRun` (the admin lists them) and any difference is
logged at ERROR. Reconciliation only reads: it never corrects anything (corrections are new
ledger transactions that an operator posts).
"""

import logging
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import connection, transaction
from django.db.models import DecimalField, F, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from accounts.models import Wallet
from exchange.models import Rental, RentalState

from ..models import LedgerEntry, ReconciliationRun
from ..selectors.balances import ledger_unbalanced_transactions

logger = logging.getLogger(__name__)

# How long a due rental may wait for the charging run (every minute) before it counts as unpaid.
CHARGE_GRACE = timedelta(minutes=5)
# Problems kept per check in a run's record; the rest are counted ("more").
PROBLEMS_PER_CHECK = 100

_MONEY = DecimalField(max_digits=16, decimal_places=2)
CENT = Decimal("0.01")


@contextmanager
def _snapshot() -> Iterator[None]:
    """One consistent view for every check: a read-only REPEATABLE READ transaction on
    PostgreSQL (when not already inside a transaction), so that a charge committing between two
    queries cannot look like a difference."""
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


def _capped(check: str, problems: list[dict]) -> list[dict]:
    if len(problems) <= PROBLEMS_PER_CHECK:
        return problems
    return [*problems[:PROBLEMS_PER_CHECK], {"check": check, "more": len(problems) - PROBLEMS_PER_CHECK}]


def _wallet_differences() -> list[dict]:
    """Wallets whose cached balance is not the sum of their ledger entries. One query."""
    ledger_total = (
        LedgerEntry.objects.filter(account__wallet=OuterRef("pk"))
        .order_by()
        .values("account__wallet")
        .annotate(total=Sum("amount"))
        .values("total")
    )
    rows = (
        Wallet.objects.annotate(
            ledger_total=Coalesce(Subquery(ledger_total, output_field=_MONEY), Value(Decimal("0.00")),
                                  output_field=_MONEY)
        )
        .annotate(difference=F("balance") - F("ledger_total"))
        # Half a cent either way: exact on PostgreSQL, and blind to SQLite's floating-point sums.
        .filter(Q(difference__gte=CENT / 2) | Q(difference__lte=-CENT / 2))
        .order_by("pk")
        .values_list("pk", "currency", "balance", "ledger_total")
    )
    return [
        {"check": "wallet_balance", "wallet_id": pk, "currency": currency,
         "cached": f"{Decimal(cached).quantize(CENT)}", "ledger": f"{Decimal(ledger).quantize(CENT)}"}
        for pk, currency, cached, ledger in rows
    ]


def _unbalanced_transactions() -> list[dict]:
    """Transactions that do not sum to zero per currency or have fewer than two entries. The
    selector finds them in the database; each one it names is summed again here in exact
    Decimals, because SQLite (the embedded default) adds decimals up as floating point and can
    leave a few 1e-15 where PostgreSQL's numeric says 0."""
    suspects = ledger_unbalanced_transactions()
    totals: dict[int, dict[str, Decimal]] = {pk: defaultdict(Decimal) for pk in suspects}
    entries: Counter[int] = Counter()
    rows = LedgerEntry.objects.filter(transaction_id__in=suspects).values_list(
        "transaction_id", "currency", "amount"
    )
    for pk, currency, amount in rows.iterator():
        totals[pk][currency] += Decimal(amount).quantize(CENT)
        entries[pk] += 1
    return [
        {"check": "transaction_unbalanced", "transaction_id": pk,
         "totals": {currency: f"{total:.2f}" for currency, total in sorted(totals[pk].items()) if total}}
        for pk in suspects
        if entries[pk] < 2 or any(totals[pk].values())
    ]


def _rentals_unpaid(*, now: datetime, grace: timedelta) -> list[dict]:
    """Running rentals not paid through the current hour, and rentals still waiting for their
    first charge, once the charging run has had `grace` to reach them."""
    late = now - grace
    rows = (
        Rental.objects.filter(
            Q(state=RentalState.RUNNING) & (Q(paid_through__isnull=True) | Q(paid_through__lte=late))
            # A paid rental may stay starting while its login is made (not a charging problem).
            | Q(state=RentalState.STARTING, paid_through__isnull=True, started_at__lte=late)
        )
        .order_by("pk")
        .values_list("pk", "state", "started_at", "paid_through")
    )
    return [
        {"check": "rental_unpaid", "rental_id": pk, "state": state, "started_at": started_at.isoformat(),
         "paid_through": paid_through.isoformat() if paid_through else None}
        for pk, state, started_at, paid_through in rows
    ]


def ledger_reconcile(*, now: datetime | None = None, grace: timedelta = CHARGE_GRACE) -> ReconciliationRun:
    """Run every check once, record the run and return it (`ok` when nothing differs). Logs each
    difference at ERROR. `now` (aware; default: the clock) is the instant rentals must be paid
    beyond, less `grace`."""
    started_at = timezone.now()
    now = now or started_at
    if timezone.is_naive(now):
        raise ValueError(f"Reconciliation needs an aware datetime, not the naive {now!r}.")
    run = ReconciliationRun.objects.create(started_at=started_at)
    with _snapshot():
        found = {
            "wallet_balance": _wallet_differences(),
            "transaction_unbalanced": _unbalanced_transactions(),
            "rental_unpaid": _rentals_unpaid(now=now, grace=grace),
        }
    problems = [problem for check, listed in found.items() for problem in _capped(check, listed)]
    run.finished_at = timezone.now()
    run.ok = not problems
    run.problems = problems
    run.save(update_fields=["finished_at", "ok", "problems"])
    if run.ok:
        logger.info("Ledger reconciliation %s: the books are exact.", run.pk)
    else:
        counts = ", ".join(f"{check}: {len(listed)}" for check, listed in found.items() if listed)
        logger.error("Ledger reconciliation %s found differences (%s).", run.pk, counts)
        for problem in problems:
            logger.error("Ledger reconciliation %s: %s", run.pk, problem)
    return run
