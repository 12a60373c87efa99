"""Billing's Celery entry points: each takes ids (or nothing) and calls one service. Billing's
emails are not tasks: each is written to the outbox with its cause (`marketplace.emails`)."""

import logging

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded

from billing import services

logger = logging.getLogger(__name__)


# Safe to repeat (acks_late + reject_on_worker_lost): each batch is one database transaction and
# each (rental, hour) has its idempotency key, so a message redelivered after a worker died, or
# delivered twice by two beats, charges nothing twice (tests/billing/test_charging_faults.py).
@shared_task(
    name="billing.rentals_charge_due", time_limit=300, soft_time_limit=240,
    acks_late=True, reject_on_worker_lost=True,
)
def rentals_charge_due() -> dict[str, int] | None:
    """Charge every rental hour that is due, in batches (beat: every minute, queue "billing")."""
    try:
        return services.rentals_charge_due()
    except SoftTimeLimitExceeded:
        # The batch in progress was rolled back whole; the next run (a minute later) goes on.
        logger.warning("Charging run stopped at its time limit; the next run carries on.")
        return None


# Read-only checks and one row recording them: safe to repeat.
@shared_task(
    name="billing.ledger_reconcile", time_limit=1800, soft_time_limit=1740,
    acks_late=True, reject_on_worker_lost=True,
)
def ledger_reconcile() -> bool:
    """Check the books against the ledger (beat: daily) and record the result; True when exact."""
    return services.ledger_reconcile().ok


@shared_task(name="billing.low_balance_warnings_send", time_limit=120, soft_time_limit=90)
def low_balance_warnings_send() -> int:
    """Email buyers whose balance covers fewer hours of their running rentals than their threshold
    (profile), once per fall (beat: every few minutes). Safe to run twice at once."""
    return services.low_balance_warnings_send()


# Safe to repeat and to overlap (two beats): each judgement is its own transaction and claims its
# server or rental first, each refund and reversal has its key (tests/billing/test_agents_check.py).
@shared_task(
    name="billing.agents_check", time_limit=300, soft_time_limit=240,
    acks_late=True, reject_on_worker_lost=True,
)
def agents_check() -> dict[str, int] | None:
    """The watch over the host agents (beat: every minute, queue "billing")."""
    try:
        checked = services.agents_check()
    except SoftTimeLimitExceeded:
        # The judgement in progress was rolled back whole; the next run (a minute later) goes on.
        logger.warning("Agents check stopped at its time limit; the next run carries on.")
        return None
    return {
        "unreachable": len(checked.unreachable_server_ids),
        "gpu_failed": len(checked.gpu_failed_rental_ids),
        "not_delivered": len(checked.not_delivered_rental_ids),
        "isolation_lost": len(checked.isolation_lost_rental_ids),
        "counted": checked.servers_counted,
    }
