"""The Celery application. Queues and the beat schedule are declared here, in code."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marketplace.settings.embedded")

app = Celery("marketplace")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Money moves on its own queue, so a backlog of emails never delays charging.
app.conf.task_routes = {"billing.rentals_charge_due": {"queue": "billing"}}
app.conf.beat_schedule = {
    "charge-due-rentals": {"task": "billing.rentals_charge_due", "schedule": 60.0},
    "expire-bids": {"task": "exchange.bids_expire", "schedule": 60.0},
}
