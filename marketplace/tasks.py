"""The marketplace's Celery entry points: sending the outbox and pruning what it sent long ago
(`marketplace.emails`), and pruning the API's idempotency records (`marketplace.idempotency`)."""

from datetime import timedelta

from celery import shared_task

# The module, not its names: email_send nudges this task (a cycle of modules).
from . import emails, idempotency

# Rows one run sends at most; the beat's next run, seconds later, goes on with the rest.
OUTBOX_BATCH = 200
# A nudge that waited longer than this in the queue (workers down) is dropped: the beat's runs
# send the same rows.
OUTBOX_NUDGE_EXPIRES = 60


# Safe to repeat and to run on two workers at once (rows are claimed with SKIP LOCKED and marked
# sent once), so a lost or duplicated message costs nothing; acknowledged early like most tasks.
@shared_task(name="marketplace.outbox_send", time_limit=120, soft_time_limit=100)
def outbox_send() -> dict[str, int]:
    """Send the emails waiting in the outbox (beat: every few seconds; nudged after each commit
    that writes one)."""
    return emails.outbox_send_pending(limit=OUTBOX_BATCH)


# Sent emails kept for operators to look at in the admin.
OUTBOX_KEEP_SENT = timedelta(days=90)


@shared_task(name="marketplace.outbox_prune", time_limit=600, soft_time_limit=540)
def outbox_prune() -> int:
    """Delete sent emails older than OUTBOX_KEEP_SENT (beat: daily). Safe to run twice."""
    return emails.outbox_prune(older_than=OUTBOX_KEEP_SENT)


@shared_task(name="marketplace.idempotency_records_prune", time_limit=600, soft_time_limit=540)
def idempotency_records_prune() -> int:
    """Delete the API's idempotency records past their 24 hours (beat: daily). Safe to run twice."""
    return idempotency.idempotency_records_prune()
