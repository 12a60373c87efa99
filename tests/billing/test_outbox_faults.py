"""Issue 14, item 15: the broker goes away while hourly charging ends rentals for lack of money,
and the mail server refuses too. The money was always right; the emails now are too: each "rental
ended" email was written in the batch that ended its rental, and once the broker and the mail
server are back one run of the sender delivers every one of them, exactly once.

Real commits (each batch of the charging run is its own transaction) and a real dead broker: the
Celery app is pointed at a port nobody listens on, not eager, so each nudge after commit fails as
it does when Redis is down. The clock runs while the broker is away: kombu gives up connecting
after a timeout measured on it."""

import socket
from collections import Counter
from contextlib import contextmanager
from datetime import timedelta
from smtplib import SMTPServerDisconnected

import pytest
from django.core import mail
from django.core.mail.backends.locmem import EmailBackend

from billing.services import rentals_charge_due
from exchange.models import EndReason, Rental, RentalState
from marketplace.models import OutboxEmail
from marketplace.tasks import outbox_send
from tests.billing.support import (
    HOUR,
    START,
    assert_books_consistent,
    buyer_with,
    celery_app_configured,
    rental_for,
)

pytestmark = pytest.mark.django_db(transaction=True)

RENTALS = 30


def dead_port() -> int:
    """A local port with nobody listening: connecting is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def broker_unreachable(settings):
    """Point the app at a dead Redis, not eager, as tests/billing/test_celery_worker.py points it at
    a live one, and put everything back afterwards."""
    overrides = {
        "broker_url": f"redis://127.0.0.1:{dead_port()}/0",
        "broker_connection_timeout": 1,  # each failed nudge gives up after a second, not four
    }
    with celery_app_configured(settings, overrides):
        yield

@pytest.fixture
def mail_server(monkeypatch):
    """A mail server that can be down: while `down`, every message is refused."""

    class Server:
        down = False

    server = Server()
    real = EmailBackend.send_messages

    def send_messages(backend, messages):
        if server.down:
            raise SMTPServerDisconnected("Connection unexpectedly closed")
        return real(backend, messages)

    monkeypatch.setattr(EmailBackend, "send_messages", send_messages)
    return server


def test_every_rental_ended_email_arrives_exactly_once_after_the_broker_and_the_mail_server_return(
    settings, mail_server, time_machine, caplog
):
    time_machine.move_to(START, tick=False)
    buyers = [buyer_with("USD", "2.88", preferred_language=("en", "pt", "fr")[n % 3]) for n in range(RENTALS)]
    rentals = [rental_for(buyer) for buyer in buyers]
    assert rentals_charge_due(now=START)["charged"] == RENTALS  # each wallet pays its first hour, no more
    assert not OutboxEmail.objects.exists()

    time_machine.move_to(START + HOUR, tick=True)
    with broker_unreachable(settings):
        mail_server.down = True
        counts = rentals_charge_due(batch_size=10)  # three batches, three commits, three failed nudges
        assert outbox_send.apply().result == {"sent": 0, "failed": 1}  # the beat's run, mail server down

    assert counts == {"rentals": RENTALS, "charged": 0, "errors": 0, "balance exhausted": RENTALS}
    ended = Rental.objects.filter(state=RentalState.ENDED, end_reason=EndReason.BALANCE_EXHAUSTED)
    assert ended.count() == RENTALS
    assert mail.outbox == []
    nudges = [record for record in caplog.records if "The broker is unreachable" in record.getMessage()]
    assert len(nudges) == 3  # one per batch that ended rentals, not one per email
    assert OutboxEmail.objects.filter(sent_at__isnull=True).count() == RENTALS

    # Both are back; the beat's next run, after the refused row's retry delay, sends everything.
    mail_server.down = False
    time_machine.move_to(START + 2 * HOUR, tick=False)
    assert outbox_send.apply().result == {"sent": RENTALS, "failed": 0}
    assert outbox_send.apply().result == {"sent": 0, "failed": 0}  # a second run, or a redelivery

    assert len(mail.outbox) == RENTALS
    assert Counter(message.to[0] for message in mail.outbox) == Counter(buyer.email for buyer in buyers)
    subjects = Counter(message.subject for message in mail.outbox)
    assert max(subjects.values()) == 1  # no duplicates
    for rental in rentals:
        assert any(f" {rental.pk} " in subject for subject in subjects), rental.pk
    assert set(OutboxEmail.objects.values_list("key", flat=True)) == {f"rental-ended:{r.pk}" for r in rentals}
    assert not OutboxEmail.objects.filter(sent_at__isnull=True).exists()
    assert_books_consistent()


def test_a_charging_run_with_the_broker_down_charges_and_ends_as_it_would_with_it_up(settings, time_machine):
    """The nudge after each batch's commit used to be a plain on_commit `.delay()`: a broker down
    raised there, out of the charging run, after its first batch. Now the run carries on."""
    time_machine.move_to(START, tick=False)
    paying = [rental_for(buyer_with("USD", "100.00")) for _ in range(4)]
    broke = [rental_for(buyer_with("USD", "1.00")) for _ in range(4)]
    time_machine.move_to(START + timedelta(minutes=1), tick=True)

    with broker_unreachable(settings):
        counts = rentals_charge_due(batch_size=4)

    assert counts == {"rentals": 8, "charged": 4, "errors": 0, "payment failed": 4}
    assert OutboxEmail.objects.count() == len(broke) and mail.outbox == []
    assert outbox_send.apply().result == {"sent": len(broke), "failed": 0}
    assert sorted(message.to[0] for message in mail.outbox) == sorted(r.buyer.email for r in broke)
    for rental in paying:
        rental.refresh_from_db()
        assert rental.state == RentalState.RUNNING
    assert_books_consistent()
