"""The Celery application. Queues, routes and the beat schedule are declared here, in code.

Two queues: "billing" carries the charging run alone, so that a backlog of emails or VIES checks
never delays charging; everything else goes to "default". Production runs workers per queue
(`celery -A marketplace worker -Q billing`, `-Q default`) and exactly one beat; `make run` starts
one worker on both queues with the beat embedded (scripts/serve.py).

Every task is named explicitly, has its own time limits, takes ids (or nothing) and calls one
service. Only the tasks that are safe to run twice set `acks_late` and `reject_on_worker_lost`
(see billing.tasks); the Redis broker's visibility timeout is longer than any time limit
(settings.CELERY_BROKER_TRANSPORT_OPTIONS), so a task still running is never handed to a second
worker.
"""

import os

from celery import Celery
from celery.schedules import crontab
from kombu import Exchange, Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marketplace.settings.embedded")

app = Celery("marketplace")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

DEFAULT_QUEUE = "default"
BILLING_QUEUE = "billing"

app.conf.task_default_queue = DEFAULT_QUEUE
app.conf.task_queues = (
    Queue(DEFAULT_QUEUE, Exchange(DEFAULT_QUEUE, type="direct"), routing_key=DEFAULT_QUEUE),
    Queue(BILLING_QUEUE, Exchange(BILLING_QUEUE, type="direct"), routing_key=BILLING_QUEUE),
)
# Money moves on its own queue, so a backlog of emails never delays charging.
app.conf.task_routes = {
    "billing.rentals_charge_due": {"queue": BILLING_QUEUE},
    "billing.agents_check": {"queue": BILLING_QUEUE},
}

# A run of an every-minute task that waited longer than this in the queue (workers down) is
# dropped: the next one does the same work.
EVERY_MINUTE_EXPIRES = 120

app.conf.beat_schedule = {
    # Emails are written to the outbox with their cause and nudged after commit; this run sends
    # whatever a nudge lost (a broker down) or a mail server refused, a few seconds later.
    "send-outbox": {
        "task": "marketplace.outbox_send",
        "schedule": 10.0,
        "options": {"expires": 30},
    },
    "charge-due-rentals": {
        "task": "billing.rentals_charge_due",
        "schedule": 60.0,
        "options": {"expires": EVERY_MINUTE_EXPIRES},
    },
    # Servers gone silent, GPUs failed, logins not delivered; and the minute counted for reliability.
    "check-agents": {
        "task": "billing.agents_check",
        "schedule": 60.0,
        "options": {"expires": EVERY_MINUTE_EXPIRES},
    },
    "refresh-reliability": {"task": "exchange.reliability_refresh", "schedule": crontab(minute=23)},
    "expire-bids": {
        "task": "exchange.bids_expire",
        "schedule": 60.0,
        "options": {"expires": EVERY_MINUTE_EXPIRES},
    },
    # Buyers' price alerts against the best asks now (one email per crossing).
    "check-price-alerts": {
        "task": "exchange.price_alerts_check",
        "schedule": 30.0,
        "options": {"expires": 30},
    },
    "send-low-balance-warnings": {
        "task": "billing.low_balance_warnings_send",
        "schedule": 600.0,
        "options": {"expires": 540},
    },
    "reconcile-ledger": {"task": "billing.ledger_reconcile", "schedule": crontab(hour=3, minute=17)},
    "refresh-vat-ids": {"task": "accounts.vat_ids_refresh", "schedule": crontab(hour=4, minute=7)},
    "prune-outbox": {"task": "marketplace.outbox_prune", "schedule": crontab(hour=5, minute=11)},
    "prune-idempotency-records": {
        "task": "marketplace.idempotency_records_prune", "schedule": crontab(hour=5, minute=41),
    },
}
