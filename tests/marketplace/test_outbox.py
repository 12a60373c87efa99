"""The outbox (`marketplace.emails`): an email is a row written in the transaction of its cause, once
per key, and the sender sends each row once, with two senders at once, a mail server that refuses
and a broker that is away. The fault test of a charging run is tests/billing/test_outbox_faults.py."""

import time
from datetime import timedelta
from smtplib import SMTPException

import pytest
from django.core import mail
from django.core.mail.backends.locmem import EmailBackend
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext
from kombu.exceptions import OperationalError

from billing.services import refunds, rental_charge_next_hour, rental_end_by_operator
from exchange.models import RentalState
from marketplace import emails, tasks
from marketplace.celery import app
from marketplace.emails import RETRY_FIRST, RETRY_LONGEST, email_send, outbox_send_pending
from marketplace.models import OutboxEmail, OutboxStatus
from tests.admin_support import operator_client
from tests.billing.support import START, buyer_with, rental_for
from tests.factories import UserFactory, operator_make
from tests.threads import run_together

BID_TEMPLATE = "exchange/email/bid_cancelled"


def bid_email(*, key: str, email: str = "buyer@example.com", price: str = "$0.79") -> None:
    """One email of a real template (the cancelled bid's), to `email`."""
    bid = {"gpus": 2, "gpu_model": {"name": "H100"}}
    email_send(template=BID_TEMPLATE, email=email, key=key,
               context={"bid": bid, "price": price, "top_up_url": "http://testserver/top-up/"})


@pytest.fixture
def broker_down(monkeypatch):
    """The nudge's publish fails as it does when Redis is away; returns the nudges attempted."""
    attempts = []

    def unreachable(*args, **kwargs):
        attempts.append(kwargs)
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(tasks.outbox_send, "apply_async", unreachable)
    return attempts


@pytest.fixture
def refusing_mail_server(monkeypatch):
    """The mail server refuses every message until `.accept()`; `.calls` counts the attempts."""

    class Server:
        calls = 0
        refusing = True

        def accept(self):
            self.refusing = False

    server = Server()
    real = EmailBackend.send_messages

    def send_messages(backend, messages):
        server.calls += 1
        if server.refusing:
            raise SMTPException("451 4.3.0 try again later")
        return real(backend, messages)

    monkeypatch.setattr(EmailBackend, "send_messages", send_messages)
    return server


# --- written with its cause ------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_email_commits_with_its_cause_and_is_sent_after_commit(time_machine):
    time_machine.move_to(START, tick=False)
    buyer = buyer_with("USD", "50.00", preferred_language="en")
    rental = rental_for(buyer)
    rental_charge_next_hour(rental_id=rental.pk, now=START)

    rental_end_by_operator(rental_id=rental.pk, operator=operator_make("finance"), reason="Maintenance")

    row = OutboxEmail.objects.get()
    assert (row.key, row.recipient, row.language) == (f"rental-ended:{rental.pk}", buyer.email, "en")
    assert row.sent_at == START and row.attempts == 1  # the nudge after commit sent it (eager here)
    [message] = mail.outbox
    assert (message.to, message.subject, message.body) == ([buyer.email], row.subject, row.body)


@pytest.mark.django_db(transaction=True)
def test_the_email_disappears_with_a_rollback_of_its_cause(monkeypatch, time_machine):
    time_machine.move_to(START, tick=False)
    buyer = buyer_with("USD", "50.00")
    rental = rental_for(buyer)
    rental_charge_next_hour(rental_id=rental.pk, now=START)

    def audit_fails(**kwargs):
        raise IntegrityError("the audit log refused the entry")  # after the email was written

    monkeypatch.setattr(refunds, "audit_record", audit_fails)
    with pytest.raises(IntegrityError):
        rental_end_by_operator(rental_id=rental.pk, operator=operator_make("finance"), reason="Maintenance")

    rental.refresh_from_db()
    assert rental.state == RentalState.RUNNING
    assert not OutboxEmail.objects.exists()
    assert mail.outbox == []


@pytest.mark.django_db
def test_a_savepoint_rolled_back_takes_its_email_and_its_nudge_with_it(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        try:
            with transaction.atomic():
                bid_email(key="gone")
                raise RuntimeError("the change failed")
        except RuntimeError:
            pass
        assert not OutboxEmail.objects.exists()
        assert callbacks == []
        bid_email(key="kept")

    assert [row.key for row in OutboxEmail.objects.all()] == ["kept"]
    assert len(callbacks) == 1 and len(mail.outbox) == 1


@pytest.mark.django_db
def test_one_nudge_per_transaction_however_many_emails_it_writes(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        for n in range(5):
            bid_email(key=f"bid-cancelled:{n}", email=f"buyer{n}@example.com")

    assert len(callbacks) == 1
    assert sorted(message.to[0] for message in mail.outbox) == [f"buyer{n}@example.com" for n in range(5)]


@pytest.mark.django_db
def test_the_same_key_twice_is_one_email(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        bid_email(key="bid-cancelled:7", price="$0.79")
        bid_email(key="bid-cancelled:7", price="$9.99")  # a retry, or a second worker

    [row] = OutboxEmail.objects.all()
    assert "$0.79" in row.body
    assert [message.body for message in mail.outbox] == [row.body]


@pytest.mark.django_db(transaction=True)
def test_the_same_key_from_two_transactions_at_once_is_one_row(monkeypatch):
    monkeypatch.setattr(emails, "_outbox_nudge", lambda: None)

    def write(index: int) -> None:
        with transaction.atomic():
            bid_email(key="rental-ended:42", email=f"buyer{index}@example.com")
            time.sleep(0.2)  # both hold their insert open: the second waits, then writes nothing

    _results, errors = run_together(2, write)

    assert errors == []
    assert OutboxEmail.objects.filter(key="rental-ended:42").count() == 1


@pytest.mark.django_db
def test_the_database_refuses_a_row_without_a_key_or_a_recipient():
    with pytest.raises(IntegrityError), transaction.atomic():
        bid_email(key="")
    with pytest.raises(IntegrityError), transaction.atomic():
        OutboxEmail.objects.create(key="k", recipient="", language="en", subject="s", body="b")
    with pytest.raises(IntegrityError), transaction.atomic():
        OutboxEmail.objects.create(key="k", recipient="a@example.com", language="en", subject="s", body="b",
                                   sent_at=timezone.now())  # sent, never tried


@pytest.mark.django_db
def test_the_row_is_rendered_in_the_recipients_language_when_written():
    with translation.override("fr"):
        expected = gettext("Your EverXCloud bid was cancelled")
    buyer = buyer_with("EUR", preferred_language="fr")

    with translation.override("pt"):  # the page's language does not matter: the profile's does
        email_send(template=BID_TEMPLATE, user=buyer, key="bid-cancelled:1",
                   context={"bid": {"gpus": 1}, "price": "0,79 $US", "top_up_url": "x"})

    row = OutboxEmail.objects.get()
    assert (row.language, row.subject, row.html) == ("fr", expected, "")


# --- the sender ------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_two_senders_at_once_send_each_row_once(monkeypatch):
    monkeypatch.setattr(emails, "_outbox_nudge", lambda: None)  # rows pending, as with a broker down
    for n in range(30):
        bid_email(key=f"bid-cancelled:{n}", email=f"buyer{n}@example.com")
    real = EmailBackend.send_messages

    def slow(backend, messages):
        time.sleep(0.01)  # a mail server takes its time: the two senders overlap
        return real(backend, messages)

    monkeypatch.setattr(EmailBackend, "send_messages", slow)
    results, errors = run_together(2, lambda _index: outbox_send_pending(limit=100))

    assert errors == []
    assert sum(result["sent"] for result in results) == 30
    assert all(result["sent"] > 0 for result in results)  # both did part of the work
    sent_to = sorted(message.to[0] for message in mail.outbox)
    assert sent_to == sorted(f"buyer{n}@example.com" for n in range(30))
    assert not OutboxEmail.objects.filter(sent_at__isnull=True).exists()
    assert outbox_send_pending(limit=100) == {"sent": 0, "failed": 0}  # a redelivered run sends nothing


@pytest.mark.django_db
def test_a_refused_email_stays_pending_with_its_error_and_goes_once_on_a_later_run(
    refusing_mail_server, time_machine
):
    time_machine.move_to(START, tick=False)
    for n in range(3):
        bid_email(key=f"bid-cancelled:{n}", email=f"buyer{n}@example.com")

    # A refusal ends the run: the mail server is likely down for the next rows too.
    assert outbox_send_pending(limit=10) == {"sent": 0, "failed": 1}
    first = OutboxEmail.objects.order_by("id").first()
    assert (first.sent_at, first.attempts, first.next_attempt_at) == (None, 1, START + RETRY_FIRST)
    assert first.last_error == "SMTPException: 451 4.3.0 try again later"
    assert first.status == OutboxStatus.FAILED

    # The next run, the server still down: the first waits out its delay, the second is tried.
    assert outbox_send_pending(limit=10) == {"sent": 0, "failed": 1}
    time_machine.move_to(START + RETRY_FIRST, tick=False)
    assert outbox_send_pending(limit=10) == {"sent": 0, "failed": 1}
    first.refresh_from_db()
    assert (first.attempts, first.next_attempt_at) == (2, START + 3 * RETRY_FIRST)  # the delay doubles

    refusing_mail_server.accept()
    time_machine.move_to(START + RETRY_LONGEST, tick=False)
    assert outbox_send_pending(limit=10) == {"sent": 3, "failed": 0}
    assert outbox_send_pending(limit=10) == {"sent": 0, "failed": 0}
    assert sorted(message.to[0] for message in mail.outbox) == [f"buyer{n}@example.com" for n in range(3)]
    assert {row.status for row in OutboxEmail.objects.all()} == {OutboxStatus.SENT}


@pytest.mark.django_db
def test_the_delay_after_refusals_grows_to_an_hour_and_never_gives_up(refusing_mail_server, time_machine):
    time_machine.move_to(START, tick=False)
    bid_email(key="bid-cancelled:1")
    delays = []
    for _attempt in range(10):
        row = OutboxEmail.objects.get()
        time_machine.move_to(row.next_attempt_at, tick=False)
        outbox_send_pending(limit=1)
        row.refresh_from_db()
        delays.append(row.next_attempt_at - timezone.now())

    assert delays[:3] == [RETRY_FIRST, 2 * RETRY_FIRST, 4 * RETRY_FIRST]
    assert delays[-1] == RETRY_LONGEST
    assert (row.attempts, row.sent_at) == (10, None)


@pytest.mark.django_db
def test_a_nudge_with_the_broker_down_is_logged_and_ignored(
    broker_down, caplog, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        bid_email(key="bid-cancelled:1")

    assert len(broker_down) == 1 and mail.outbox == []
    assert "The broker is unreachable" in caplog.text
    assert OutboxEmail.objects.get().status == OutboxStatus.PENDING
    assert tasks.outbox_send.apply().result == {"sent": 1, "failed": 0}  # the beat's run
    assert len(mail.outbox) == 1


def test_the_beat_sends_the_outbox_every_few_seconds_on_the_default_queue():
    schedule = app.conf.beat_schedule.values()
    [entry] = [entry for entry in schedule if entry["task"] == "marketplace.outbox_send"]
    assert entry["schedule"] <= 15
    assert entry["options"]["expires"] > entry["schedule"]
    assert app.amqp.router.route({}, "marketplace.outbox_send")["queue"].name == "default"


@pytest.mark.django_db
def test_pruning_deletes_only_emails_sent_longer_ago_than_kept(time_machine):
    time_machine.move_to(START, tick=False)
    for key in ("old-sent", "old-pending", "recent-sent"):
        bid_email(key=f"bid-cancelled:{key}")
    OutboxEmail.objects.filter(key="bid-cancelled:old-sent").update(
        sent_at=START - tasks.OUTBOX_KEEP_SENT, attempts=1
    )
    OutboxEmail.objects.filter(key="bid-cancelled:recent-sent").update(
        sent_at=START - timedelta(days=1), attempts=1
    )
    OutboxEmail.objects.filter(key="bid-cancelled:old-pending").update(created_at=START - timedelta(days=400))
    time_machine.move_to(START + timedelta(seconds=1), tick=False)

    assert tasks.outbox_prune.apply().result == 1
    assert sorted(OutboxEmail.objects.values_list("key", flat=True)) == [
        "bid-cancelled:old-pending", "bid-cancelled:recent-sent",
    ]
    assert tasks.outbox_prune.apply().result == 0  # again: nothing more


# --- the admin -------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("language", ["en", "pt", "fr"])
def test_operators_read_the_outbox_by_status_and_change_nothing(client, refusing_mail_server, language):
    bid_email(key="bid-cancelled:failed", email="failed@example.com")
    outbox_send_pending(limit=10)  # refused
    bid_email(key="bid-cancelled:pending", email="pending@example.com")
    refusing_mail_server.accept()
    OutboxEmail.objects.create(key="sent", recipient="sent@example.com", language="en", subject="s",
                               body="b", attempts=1, sent_at=timezone.now())
    operator_client(client, "support")
    with translation.override(language):
        changelist = reverse("admin:marketplace_outboxemail_changelist")
        labels = {status: str(status.label) for status in OutboxStatus}

    for status, label in labels.items():
        response = client.get(changelist, {"status": status})
        assert response.status_code == 200
        html = response.content.decode()
        assert [row.key for row in response.context["cl"].result_list] == [
            {"failed": "bid-cancelled:failed", "pending": "bid-cancelled:pending", "sent": "sent"}[status]
        ]
        assert label in html
    row = OutboxEmail.objects.get(key="sent")
    with translation.override(language):
        change = reverse("admin:marketplace_outboxemail_change", args=[row.pk])
    assert client.get(change).status_code == 200
    assert client.post(change, {"key": "edited"}).status_code == 403
    assert OutboxEmail.objects.get(pk=row.pk).key == "sent"


@pytest.mark.django_db
def test_a_user_who_is_not_an_operator_sees_no_outbox(client):
    client.force_login(UserFactory(is_staff=False))
    response = client.get(reverse("admin:marketplace_outboxemail_changelist"))
    assert response.status_code == 302  # to the admin's login


@pytest.mark.django_db
@pytest.mark.parametrize("rows", [2, 60])
def test_the_outbox_admin_runs_a_fixed_number_of_queries(client, rows, django_assert_max_num_queries):
    for number in range(rows):
        bid_email(key=f"bid-cancelled:{number}", email=f"buyer{number}@example.com")
    operator_client(client, "support")
    with django_assert_max_num_queries(14):
        assert client.get(reverse("admin:marketplace_outboxemail_changelist")).status_code == 200
