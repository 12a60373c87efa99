"""Celery as configured in marketplace/celery.py and the settings, and a real worker charging a
due rental end to end through the local Redis."""

import json
import os
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal

import pytest
import redis
from celery.contrib.testing.worker import start_worker
from celery.result import EagerResult
from celery.schedules import crontab
from django.conf import settings as django_settings
from django.core import mail
from django.utils import timezone

from billing.models import RentalCharge
from billing.tasks import rentals_charge_due
from exchange.models import EndReason, Rental, RentalState
from marketplace.celery import app
from tests.billing.support import assert_books_consistent, buyer_with, celery_app_configured, rental_for
from tests.factories import ExchangeRateFactory

# The real worker's broker: the local Redis, in a database of its own.
WORKER_BROKER_URL = os.environ.get("TEST_CELERY_BROKER_URL", "redis://127.0.0.1:6379/14")
# Tasks that set acks_late + reject_on_worker_lost, each proven safe to run twice: the charging
# run (tests/billing/test_charging_faults.py), the read-only reconciliation, and the rental's SSH
# banner probe, which delivers once however often it runs (tests/exchange/test_rental_ssh.py).
SAFE_TO_REPEAT = {"billing.rentals_charge_due", "billing.ledger_reconcile", "billing.agents_check",
                  "exchange.rental_login_probe"}
# Money moves on the billing queue: charging, and the agents check that refunds failures.
ON_BILLING_QUEUE = {"billing.rentals_charge_due", "billing.agents_check"}


def our_tasks() -> dict:
    app.loader.import_default_modules()
    return {name: task for name, task in app.tasks.items() if not name.startswith("celery.")}


# --- configuration ---------------------------------------------------------------------------------


def test_two_queues_and_charging_on_its_own():
    assert [queue.name for queue in app.conf.task_queues] == ["default", "billing"]
    assert app.conf.task_default_queue == "default"
    router = app.amqp.router
    for name in ON_BILLING_QUEUE:
        assert router.route({}, name)["queue"].name == "billing", name
    for name in set(our_tasks()) - ON_BILLING_QUEUE:
        assert router.route({}, name)["queue"].name == "default", name


def test_the_beat_schedule_is_in_code_and_every_task_it_sends_exists():
    schedule = app.conf.beat_schedule
    by_task = {entry["task"]: entry["schedule"] for entry in schedule.values()}
    assert by_task["billing.rentals_charge_due"] == 60.0
    assert by_task["exchange.bids_expire"] == 60.0
    assert by_task["billing.agents_check"] == 60.0
    assert isinstance(by_task["exchange.reliability_refresh"], crontab)
    assert by_task["billing.low_balance_warnings_send"] == 600.0
    assert by_task["marketplace.outbox_send"] == 10.0
    for daily in ("billing.ledger_reconcile", "accounts.vat_ids_refresh", "marketplace.outbox_prune"):
        assert isinstance(by_task[daily], crontab)
        assert len(by_task[daily].hour) == 1 and len(by_task[daily].minute) == 1, daily
    assert set(by_task) <= set(our_tasks())


def test_every_task_is_named_has_time_limits_and_takes_no_more_than_the_visibility_timeout():
    visibility_timeout = django_settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]
    for name, task in our_tasks().items():
        app_label, _dot, function = name.partition(".")
        # demo: the embedded demo's simulated agents (the test settings install the demo app).
        apps = {"marketplace", "accounts", "billing", "exchange", "catalog", "sellers", "demo"}
        assert app_label in apps, name
        assert function, name
        assert task.time_limit and task.soft_time_limit, name
        assert task.soft_time_limit < task.time_limit < visibility_timeout, name


def test_only_tasks_safe_to_repeat_acknowledge_late():
    late = {name for name, task in our_tasks().items() if task.acks_late}
    assert late == SAFE_TO_REPEAT
    for name in SAFE_TO_REPEAT:
        assert our_tasks()[name].reject_on_worker_lost is True, name
    assert app.conf.task_acks_late is False
    assert app.conf.worker_prefetch_multiplier == 1


def _settings_in_a_new_process(module: str, **env) -> dict:
    code = (
        "import json, django; django.setup(); from django.conf import settings as s; "
        "print(json.dumps({'broker': s.CELERY_BROKER_URL, 'options': s.CELERY_BROKER_TRANSPORT_OPTIONS, "
        "'eager': getattr(s, 'CELERY_TASK_ALWAYS_EAGER', False)}, default=str))"
    )
    base = {key: value for key, value in os.environ.items() if not key.startswith(("CELERY_", "REDIS_"))}
    result = subprocess.run(
        [sys.executable, "-c", code], env={**base, "DJANGO_SETTINGS_MODULE": module, **env},
        cwd=django_settings.BASE_DIR, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_production_uses_redis_with_a_visibility_timeout_longer_than_any_task():
    env = {
        "SECRET_KEY": "x" * 50, "SITE_URL": "https://everxcloud.example", "REDIS_URL": "redis://cache:6379/0",
        "DATABASE_URL": "postgres://everxcloud@db:5432/everxcloud",
    }
    production = _settings_in_a_new_process("marketplace.settings.production", **env)
    assert production["broker"] == "redis://cache:6379/0"
    assert production["eager"] is False
    longest = max(task.time_limit for task in our_tasks().values())
    assert production["options"]["visibility_timeout"] > longest


def test_the_embedded_default_uses_the_filesystem_broker():
    embedded = _settings_in_a_new_process("marketplace.settings.embedded")
    assert embedded["broker"] == "filesystem://"
    assert embedded["options"]["data_folder_in"].endswith(".broker/queue")


# --- a real worker ---------------------------------------------------------------------------------


@contextmanager
def broker_of_our_own(settings):
    """Point the app at WORKER_BROKER_URL, not eager, under a key prefix of this test run alone
    (other runs may share that Redis database), and put everything back afterwards.

    The values go into the app's own layer of changes (where a monkeypatch of `app.conf` also
    lands), over the Django settings it reads otherwise."""
    prefix = f"evx-test-{uuid.uuid4().hex[:12]}:"
    overrides = {
        "broker_url": WORKER_BROKER_URL,
        "broker_transport_options": {
            **django_settings.CELERY_BROKER_TRANSPORT_OPTIONS, "global_keyprefix": prefix,
        },
        "worker_hijack_root_logger": False,
    }
    try:
        with celery_app_configured(settings, overrides):
            yield
    finally:
        client = redis.Redis.from_url(WORKER_BROKER_URL)
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)

def wait_for(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_charges_a_due_rental_end_to_end(settings):
    ExchangeRateFactory(
        currency="EUR", rate=Decimal("0.92000000"), valid_from=timezone.now() - timedelta(days=1)
    )
    started_at = timezone.now() - timedelta(minutes=1)
    buyer = buyer_with("EUR", "50.00")
    rental = rental_for(buyer, started_at=started_at)
    broke = buyer_with("EUR", "1.00", preferred_language="en")
    unpaid = rental_for(broke, started_at=started_at)

    with broker_of_our_own(settings), start_worker(
        app, pool="solo", perform_ping_check=False, queues=["default", "billing"], shutdown_timeout=30,
    ):
        sent = rentals_charge_due.delay()  # through Redis to the "billing" queue
        assert not isinstance(sent, EagerResult)
        assert app.connection_for_write().as_uri().endswith(WORKER_BROKER_URL.rsplit(":", 1)[-1])
        assert wait_for(lambda: RentalCharge.objects.filter(rental=rental).exists()), "no charge"
        # Its GPUs back to the book, and the buyer's email sent from the "default" queue.
        assert wait_for(lambda: len(mail.outbox) == 1), "no email"

    charge = RentalCharge.objects.get()
    assert (charge.rental_id, charge.period_start, charge.amount) == (rental.pk, started_at, Decimal("2.65"))
    rental.refresh_from_db()
    assert (rental.state, rental.paid_through) == (RentalState.RUNNING, started_at + timedelta(hours=1))
    unpaid.refresh_from_db()
    assert (unpaid.state, unpaid.end_reason) == (RentalState.ENDED, EndReason.PAYMENT_FAILED)
    assert mail.outbox[0].to == [broke.email]
    buyer.wallet.refresh_from_db()
    assert buyer.wallet.balance == Decimal("47.35")
    assert Rental.objects.filter(state=RentalState.STARTING).count() == 0
    assert_books_consistent()
