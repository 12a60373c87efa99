"""Low-balance warnings: one email when the balance covers fewer than LOW_BALANCE_WARNING_HOURS hours
of the buyer's running rentals, not one per run, and a new one only after the balance recovered."""

from datetime import timedelta
from decimal import Decimal
from smtplib import SMTPException

import pytest
from django.core import mail
from django.core.mail import EmailMessage
from django.test import Client
from django.utils import translation
from django.utils.translation import gettext

from accounts.models import Wallet
from billing.selectors import wallet_runway, wallets_runway
from billing.services import low_balance_warnings_send, rental_charge_next_hour
from billing.tasks import low_balance_warnings_send as warnings_task
from exchange.models import EndReason, RentalState
from marketplace import formatting
from marketplace.emails import outbox_send_pending
from marketplace.models import OutboxEmail
from marketplace.tasks import outbox_send
from tests.billing.support import HOUR, START, assert_books_consistent, buyer_with, fund, rental_for
from tests.factories import ExchangeRateFactory, WalletFactory

pytestmark = pytest.mark.django_db

NOW = START + timedelta(minutes=1)


@pytest.fixture(autouse=True)
def _setup(time_machine, settings):
    time_machine.move_to(NOW, tick=False)
    settings.LOW_BALANCE_WARNING_HOURS = 3
    ExchangeRateFactory(currency="EUR", rate=Decimal("0.92000000"))
    yield
    assert_books_consistent()


@pytest.fixture
def send(django_capture_on_commit_callbacks):
    """Run the check as the beat task does, emails sent after commit."""

    def run(**kwargs) -> int:
        with django_capture_on_commit_callbacks(execute=True):
            return low_balance_warnings_send(**kwargs)

    return run


def warned_at(user):
    return Wallet.objects.get(user=user).low_balance_warned_at


# --- the runway the warning reads ------------------------------------------------------------------


def test_runway_sums_the_burn_rate_in_dollars_and_in_the_wallets_currency(django_assert_max_num_queries):
    buyer = buyer_with("EUR", "20.00")
    rental_for(buyer)  # 2.88 USD -> 2.65 EUR an hour
    rental_for(buyer, gpus=2, price="1.00")  # 2.00 USD -> 1.84 EUR an hour
    rental_for(buyer, gpus=2, price="1.00")  # the same again
    rental_for(buyer, state=RentalState.ENDED, ended_at=START, end_reason=EndReason.STOPPED_BY_BUYER)

    with django_assert_max_num_queries(2):
        runway = wallet_runway(wallet=buyer.wallet)

    assert (runway.rentals, runway.per_hour_usd, runway.per_hour, runway.hours) == (
        3, Decimal("6.88"), Decimal("6.33"), 3  # 20.00 / 6.33 = 3.16
    )
    assert runway.currency == "EUR" and runway.balance == Decimal("20.00")
    assert not runway.is_low


def test_runway_of_many_wallets_in_a_constant_number_of_queries(django_assert_num_queries):
    wallets = []
    for index in range(6):
        buyer = buyer_with(("EUR", "USD")[index % 2], "10.00")
        rental_for(buyer)
        wallets.append(buyer.wallet)
    idle = buyer_with("USD", "10.00").wallet

    with django_assert_num_queries(2):  # the rentals, the euro rate
        runways = wallets_runway(wallets=[*wallets, idle])

    assert idle.pk not in runways
    assert {runway.hours for runway in runways.values()} == {3}  # 10.00 / 2.65 and 10.00 / 2.88


# --- one email -------------------------------------------------------------------------------------


def test_one_email_when_the_balance_falls_below_the_threshold_not_one_per_run(send):
    buyer = buyer_with("EUR", "10.60", preferred_language="en")  # 4 hours of 2.65
    rental = rental_for(buyer)
    rental_charge_next_hour(rental_id=rental.pk, now=START)  # 7.95 left: 3 hours

    assert send() == 0
    assert mail.outbox == [] and warned_at(buyer) is None

    rental_charge_next_hour(rental_id=rental.pk, now=START + HOUR)  # 5.30 left: 2 hours
    assert send() == 1
    assert len(mail.outbox) == 1 and warned_at(buyer) == NOW

    for _ in range(3):
        assert send() == 0
    rental_charge_next_hour(rental_id=rental.pk, now=START + 2 * HOUR)  # 2.65 left: 1 hour
    assert send() == 0
    assert len(mail.outbox) == 1 and warned_at(buyer) == NOW


def test_the_threshold_itself_is_covered(send, settings):
    settings.LOW_BALANCE_WARNING_HOURS = 2
    covered = buyer_with("USD", "5.76")  # exactly 2 hours of 2.88
    rental_for(covered)
    short = buyer_with("USD", "5.75")  # one cent short
    rental_for(short)

    assert send() == 1
    assert [message.to for message in mail.outbox] == [[short.email]]
    assert warned_at(covered) is None


def test_email_in_the_buyers_language_with_runway_money_and_top_up_link(send):
    buyer = buyer_with("EUR", "5.30", preferred_language="fr")
    rental_for(buyer)  # 2 hours of 2.65 EUR (2.88 USD)

    assert send() == 1

    email = mail.outbox[0]
    assert email.to == [buyer.email]
    with translation.override("fr"):
        assert email.subject == gettext("Your EverXCloud balance is running low")
    body = email.body
    assert formatting.money(Decimal("5.30"), "EUR", language="fr") in body  # 5,30 €
    assert formatting.usd(Decimal("2.88"), language="fr") in body  # 2,88 $US
    assert formatting.money(Decimal("2.65"), "EUR", language="fr") in body
    assert "http://testserver/fr/account/top-up/" in body
    assert "2,88\u00a0$US" in body


def test_email_in_english_reads_as_a_sentence(send):
    buyer = buyer_with("USD", "5.76", preferred_language="en")
    rental_for(buyer)

    send()

    email = mail.outbox[0]
    assert email.subject == "Your EverXCloud balance is running low"
    assert (
        "Your EverXCloud balance of $5.76 covers about 2 more hours of your running rentals, "
        "which cost $2.88 per hour together."
    ) in email.body
    assert "At the current exchange rate" not in email.body  # a dollar wallet needs no conversion
    assert "http://testserver/en/account/top-up/" in email.body


def test_a_balance_that_no_longer_pays_the_next_hour(send):
    buyer = buyer_with("USD", "1.00", preferred_language="en")
    rental_for(buyer)

    send()

    assert "no longer covers the next hour" in mail.outbox[0].body


# --- again after the balance recovered ------------------------------------------------------------


def test_reset_after_a_top_up_then_warned_again_when_it_falls_again(send, time_machine):
    buyer = buyer_with("EUR", "5.30")
    rental = rental_for(buyer)
    assert send() == 1

    fund(buyer.wallet, "2.65")  # 7.95: 3 hours, the threshold is covered again
    assert send() == 0
    assert warned_at(buyer) is None
    assert len(mail.outbox) == 1

    rental_charge_next_hour(rental_id=rental.pk, now=START)  # 5.30: 2 hours
    later = NOW + timedelta(minutes=5)
    time_machine.move_to(later, tick=False)
    assert send() == 1
    assert len(mail.outbox) == 2 and warned_at(buyer) == later


def test_a_top_up_that_does_not_reach_the_threshold_keeps_the_single_warning(send):
    buyer = buyer_with("EUR", "2.65")
    rental_for(buyer)
    assert send() == 1

    fund(buyer.wallet, "2.65")  # 5.30: still only 2 hours

    assert send() == 0
    assert len(mail.outbox) == 1 and warned_at(buyer) == NOW


def test_reset_when_nothing_burns_the_balance_any_more(send):
    buyer = buyer_with("USD", "1.00")
    rental = rental_for(buyer)
    assert send() == 1

    rental.state, rental.ended_at, rental.end_reason = RentalState.ENDED, NOW, EndReason.STOPPED_BY_BUYER
    rental.save()

    assert send() == 0
    assert warned_at(buyer) is None


def test_wallets_without_rentals_or_without_a_rate_are_left_alone(send):
    idle = buyer_with("USD", "1.00")
    no_rate = WalletFactory(currency="GBP")  # no GBP rate: the burn in pounds is unknown
    rental_for(no_rate.user)
    Wallet.objects.filter(pk=no_rate.pk).update(low_balance_warned_at=NOW - HOUR)

    assert send() == 0

    assert mail.outbox == []
    assert warned_at(idle) is None
    assert warned_at(no_rate.user) == NOW - HOUR


def test_a_refused_warning_keeps_the_mark_and_the_outbox_retries(send, monkeypatch, time_machine):
    """The mark and the email are one transaction: a refusal leaves the email pending in the outbox
    (not the mark cleared), the next check warns no one again, and a later run of the sender sends
    it once."""
    buyer = buyer_with("USD", "1.00")
    rental_for(buyer)

    def refuse(self, fail_silently=False):
        raise SMTPException("451 try again later")

    with monkeypatch.context() as patched:
        patched.setattr(EmailMessage, "send", refuse)
        assert send() == 1
    assert warned_at(buyer) == NOW and mail.outbox == []
    [pending] = OutboxEmail.objects.all()
    assert (pending.sent_at, pending.attempts) == (None, 1)
    assert pending.last_error == "SMTPException: 451 try again later"

    assert send() == 0
    time_machine.move_to(NOW + timedelta(minutes=1), tick=False)
    assert outbox_send_pending(limit=10) == {"sent": 1, "failed": 0}
    assert outbox_send_pending(limit=10) == {"sent": 0, "failed": 0}
    assert [message.to for message in mail.outbox] == [[buyer.email]] and warned_at(buyer) == NOW


@pytest.mark.django_db(transaction=True)
def test_a_mail_server_refusing_the_warning_after_commit_leaves_it_to_the_beat(monkeypatch, time_machine):
    """As in production: the check commits the mark with its email, the nudge after commit finds the
    mail server refusing, and the beat's run of the sender, once the retry time has come, sends it
    once; checks in between warn no one again."""
    buyer = buyer_with("USD", "1.00")
    rental_for(buyer)

    def refuse(self, fail_silently=False):
        raise SMTPException("451 try again later")

    with monkeypatch.context() as patched:
        patched.setattr(EmailMessage, "send", refuse)
        assert low_balance_warnings_send() == 1
    assert warned_at(buyer) == NOW and mail.outbox == []

    assert low_balance_warnings_send() == 0
    time_machine.move_to(NOW + timedelta(minutes=1), tick=False)
    assert outbox_send.delay().result == {"sent": 1, "failed": 0}
    assert low_balance_warnings_send() == 0
    assert [message.to for message in mail.outbox] == [[buyer.email]] and warned_at(buyer) == NOW


def test_several_buyers_each_warned_once_in_a_constant_number_of_queries(send, django_assert_num_queries):
    buyers = []
    for _ in range(5):
        buyer = buyer_with("EUR", "1.00")
        rental_for(buyer)
        buyers.append(buyer)
    assert send() == 5
    assert sorted(message.to[0] for message in mail.outbox) == sorted(buyer.email for buyer in buyers)

    # Everyone already warned: wallets, rentals, the euro rate, whatever the number of buyers.
    with django_assert_num_queries(3):
        assert low_balance_warnings_send() == 0


def test_the_beat_task(settings):
    buyer = buyer_with("USD", "1.00")
    rental_for(buyer)

    assert warnings_task.delay().get() == 1  # eager in the tests; the email goes after commit
    assert warned_at(buyer) == NOW


# --- the runway on the account page -----------------------------------------------------------------


def account_page(user, language: str = "en") -> str:
    client = Client()
    client.force_login(user)
    return client.get(f"/{language}/account/").content.decode()


def test_account_page_shows_the_runway_and_the_burn_rate_in_dollars():
    buyer = buyer_with("EUR", "20.00")
    rental_for(buyer)  # 2.88 USD (2.65 EUR) an hour
    rental_for(buyer, gpus=2, price="1.00")  # 2.00 USD (1.84 EUR) an hour

    html = account_page(buyer)

    assert "Your balance covers about 4 h at $4.88/h." in html  # 20.00 / 4.49 = 4.45
    assert 'data-testid="runway-low"' not in html
    assert 'href="/en/account/top-up/"' in html


def test_account_page_urges_a_top_up_below_the_threshold():
    buyer = buyer_with("USD", "5.76")
    rental_for(buyer)

    html = account_page(buyer)

    assert "Your balance covers about 2 h at $2.88/h." in html
    assert 'data-testid="runway-low"' in html and "Top up now" in html


def test_account_page_when_the_balance_does_not_pay_the_next_hour():
    buyer = buyer_with("USD", "1.00")
    rental_for(buyer)
    assert "Your balance does not cover the next hour at $2.88/h." in account_page(buyer)


def test_account_page_without_running_rentals_shows_no_runway():
    buyer = buyer_with("USD", "10.00")
    rental_for(buyer, state=RentalState.ENDED, ended_at=START, end_reason=EndReason.STOPPED_BY_BUYER)
    assert 'data-testid="runway"' not in account_page(buyer)


def test_account_page_without_a_rate_shows_the_burn_rate_only():
    gbp = WalletFactory(currency="GBP")
    rental_for(gbp.user)
    assert "Your running rentals cost $2.88/h." in account_page(gbp.user)


def test_account_page_formats_the_runway_for_the_language():
    buyer = buyer_with("EUR", "3000.00")
    rental_for(buyer)  # 3000.00 / 2.65 = 1132.08
    html = account_page(buyer, "fr")
    assert "1\u202f132" in html and "2,88\u00a0$US" in html


@pytest.mark.parametrize("rentals", [1, 8])
def test_account_page_queries_do_not_grow_with_the_rentals(rentals, django_assert_max_num_queries):
    buyer = buyer_with("EUR", "500.00")
    for _ in range(rentals):
        rental = rental_for(buyer)
        rental_charge_next_hour(rental_id=rental.pk, now=START)
    client = Client()
    client.force_login(buyer)
    client.get("/en/account/")
    # The session, the user, the profile, MFA, the wallet, its entries, the top-ups, the rentals'
    # burn and the euro rate.
    with django_assert_max_num_queries(9):
        assert client.get("/en/account/").status_code == 200
