"""Charging the next hour of a rental: exact amounts, one ledger transaction per hour, and what
happens when the wallet cannot pay. Rentals are built directly, without the matching engine."""

from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core import mail
from django.core.management import call_command
from django.db import IntegrityError, transaction
from django.utils import translation
from django.utils.formats import date_format
from django.utils.translation import gettext

from billing.models import LedgerAccount, RentalCharge
from billing.selectors import rental_first_hour_payable
from billing.services import ChargeStatus, rental_charge_next_hour, rentals_charge_due
from billing.services.charging import _Books, _next_hour_charge
from billing.tasks import rentals_charge_due as charge_task
from exchange.models import EndReason, Rental, RentalState
from exchange.payments import first_hour_payable
from tests.billing.support import (
    HOUR,
    START,
    assert_books_consistent,
    books,
    buyer_with,
    entries_by_code,
    rental_for,
    totals_by_currency,
)
from tests.factories import (
    ExchangeRateFactory,
    ProfileFactory,
)

pytestmark = pytest.mark.django_db

Kind = LedgerAccount.Kind


# --- helpers, shared with the other test_charging_* modules ----------------------------------


@pytest.fixture(autouse=True)
def _books_consistent_after_each_test():
    yield
    assert_books_consistent()


@pytest.fixture
def rates(db):
    return {
        "EUR": ExchangeRateFactory(currency="EUR", rate=Decimal("0.92000000")),
        "GBP": ExchangeRateFactory(currency="GBP", rate=Decimal("0.79000000")),
    }


@pytest.fixture(autouse=True)
def _clock(time_machine):
    time_machine.move_to(START + timedelta(minutes=1), tick=False)


# --- the first hour ----------------------------------------------------------------------------


class TestFirstHour:
    def test_usd_wallet_pays_the_price_the_seller_earns_it_less_the_fee(self, rates):
        buyer = buyer_with("USD", "100.00")
        rental = rental_for(buyer)

        outcome = rental_charge_next_hour(rental_id=rental.pk, now=START)

        assert outcome.status == ChargeStatus.CHARGED == "charged"
        charge = outcome.charge
        assert (charge.period_start, charge.period_end) == (START, START + HOUR)
        assert (charge.cost_usd, charge.amount, charge.currency, charge.fx_rate) == (
            Decimal("2.88"), Decimal("2.88"), "USD", None
        )
        assert (charge.fee_usd, charge.seller_earnings_usd) == (Decimal("0.29"), Decimal("2.59"))
        posted = charge.ledger_transaction
        assert posted.idempotency_key == f"rental:{rental.pk}:hour:2026-12-01T10:00:00Z"
        assert posted.fx_rate is None
        seller = rental.server.seller
        assert entries_by_code(posted) == {
            f"wallet:{buyer.wallet.pk}": Decimal("-2.88"),
            f"seller_earnings:{seller.pk}:USD": Decimal("2.59"),
            "platform_revenue:USD": Decimal("0.29"),
        }
        assert totals_by_currency(posted) == {"USD": Decimal("0.00")}
        buyer.wallet.refresh_from_db()
        assert buyer.wallet.balance == Decimal("97.12")
        rental.refresh_from_db()
        assert (rental.state, rental.paid_through) == (RentalState.RUNNING, START + HOUR)
        rental.server.refresh_from_db()
        assert rental.server.gpus_rented == 1

    @pytest.mark.parametrize(
        ("currency", "amount", "balance_after"),
        [("EUR", "2.65", "47.35"), ("GBP", "2.28", "47.72")],  # 2.88 x 0.92 = 2.6496; x 0.79 = 2.2752
    )
    def test_wallet_in_another_currency_pays_through_the_fx_accounts(
        self, rates, currency, amount, balance_after
    ):
        buyer = buyer_with(currency, "50.00")
        rental = rental_for(buyer)

        charge = rental_charge_next_hour(rental_id=rental.pk, now=START).charge

        assert (charge.cost_usd, charge.amount, charge.currency) == (
            Decimal("2.88"), Decimal(amount), currency
        )
        assert (charge.fee_usd, charge.seller_earnings_usd) == (Decimal("0.29"), Decimal("2.59"))
        assert charge.fx_rate == rates[currency]
        posted = charge.ledger_transaction
        assert posted.fx_rate == rates[currency]
        assert entries_by_code(posted) == {
            f"wallet:{buyer.wallet.pk}": -Decimal(amount),
            f"fx:{currency}": Decimal(amount),
            "fx:USD": Decimal("-2.88"),
            f"seller_earnings:{rental.server.seller.pk}:USD": Decimal("2.59"),
            "platform_revenue:USD": Decimal("0.29"),
        }
        assert totals_by_currency(posted) == {currency: Decimal("0.00"), "USD": Decimal("0.00")}
        buyer.wallet.refresh_from_db()
        assert buyer.wallet.balance == Decimal(balance_after)

    def test_several_gpus_cost_price_times_gpus_rounded_once(self, rates):
        buyer = buyer_with("EUR", "50.00")
        rental = rental_for(buyer, gpus=4)

        charge = rental_charge_next_hour(rental_id=rental.pk, now=START).charge

        # 4 x 2.88 = 11.52 USD -> 10.5984 EUR; fee 1.152 -> 1.15.
        assert (charge.cost_usd, charge.amount) == (Decimal("11.52"), Decimal("10.60"))
        assert (charge.fee_usd, charge.seller_earnings_usd) == (Decimal("1.15"), Decimal("10.37"))

    def test_the_newest_valid_rate_is_used_and_kept(self, rates):
        newer = ExchangeRateFactory(currency="EUR", rate=Decimal("0.95000000"), valid_from=START - HOUR)
        ExchangeRateFactory(currency="EUR", rate=Decimal("0.50000000"), valid_from=START + HOUR)
        rental = rental_for(buyer_with("EUR", "50.00"))

        charge = rental_charge_next_hour(rental_id=rental.pk, now=START).charge

        assert (charge.amount, charge.fx_rate) == (Decimal("2.74"), newer)  # 2.88 x 0.95 = 2.736

    def test_fee_percentage_comes_from_the_settings(self, rates, settings):
        settings.PLATFORM_FEE_PERCENT = Decimal("12.5")
        rental = rental_for(buyer_with("USD", "50.00"), price="2.85")

        charge = rental_charge_next_hour(rental_id=rental.pk, now=START).charge

        # 2.85 x 12.5 % = 0.35625 -> 0.36, half-up.
        assert (charge.fee_usd, charge.seller_earnings_usd) == (Decimal("0.36"), Decimal("2.49"))

    def test_no_fee_means_no_revenue_line(self, rates, settings):
        settings.PLATFORM_FEE_PERCENT = Decimal("0")
        rental = rental_for(buyer_with("USD", "50.00"))

        charge = rental_charge_next_hour(rental_id=rental.pk, now=START).charge

        assert (charge.fee_usd, charge.seller_earnings_usd) == (Decimal("0.00"), Decimal("2.88"))
        assert set(entries_by_code(charge.ledger_transaction)) == {
            f"wallet:{rental.buyer.wallet.pk}", f"seller_earnings:{rental.server.seller.pk}:USD"
        }

    def test_a_rental_that_has_not_started_is_not_due(self, rates):
        rental = rental_for(buyer_with("USD", "50.00"), started_at=START + HOUR)
        before = books()

        assert rental_charge_next_hour(rental_id=rental.pk, now=START).status == ChargeStatus.NOT_DUE
        assert books() == before

    def test_without_now_the_clock_decides(self, rates):
        rental = rental_for(buyer_with("USD", "50.00"))

        assert rental_charge_next_hour(rental_id=rental.pk).status == ChargeStatus.CHARGED
        assert rental_charge_next_hour(rental_id=rental.pk).status == ChargeStatus.NOT_DUE


# --- later hours -------------------------------------------------------------------------------


class TestLaterHours:
    def test_charging_again_within_the_paid_hour_moves_nothing(self, rates):
        rental = rental_for(buyer_with("EUR", "50.00"))
        rental_charge_next_hour(rental_id=rental.pk, now=START)
        before = books()

        for minutes in (0, 10, 59):
            outcome = rental_charge_next_hour(rental_id=rental.pk, now=START + timedelta(minutes=minutes))
            assert outcome == type(outcome)(status=ChargeStatus.NOT_DUE, charge=None)
        assert books() == before

    def test_an_hour_already_charged_returns_its_charge_and_moves_nothing(self, rates):
        rental = rental_for(buyer_with("EUR", "50.00"))
        first = rental_charge_next_hour(rental_id=rental.pk, now=START).charge
        # As if the rental row had lost its paid_through: the charge row still says the hour is paid.
        Rental.objects.filter(pk=rental.pk).update(state=RentalState.STARTING, paid_through=None)
        before = books()

        outcome = rental_charge_next_hour(rental_id=rental.pk, now=START)

        assert (outcome.status, outcome.charge) == (ChargeStatus.ALREADY_CHARGED, first)
        assert books() == before

    def test_the_database_refuses_a_second_charge_row_for_the_same_hour(self, rates):
        rental = rental_for(buyer_with("USD", "50.00"))
        first = rental_charge_next_hour(rental_id=rental.pk, now=START).charge
        other = rental_charge_next_hour(rental_id=rental.pk, now=START + HOUR).charge

        with pytest.raises(IntegrityError), transaction.atomic():
            RentalCharge.objects.create(
                rental=rental, period_start=START, period_end=START + HOUR,
                ledger_transaction=other.ledger_transaction, cost_usd=first.cost_usd, amount=first.amount,
                currency="USD", seller_earnings_usd=first.seller_earnings_usd, fee_usd=first.fee_usd,
            )

    def test_a_rental_that_missed_three_hours_pays_each_in_order(self, rates):
        buyer = buyer_with("EUR", "50.00")
        rental = rental_for(buyer)
        rental_charge_next_hour(rental_id=rental.pk, now=START)

        counts = rentals_charge_due(now=START + 3 * HOUR + timedelta(minutes=5))

        assert counts["charged"] == 3
        charges = list(RentalCharge.objects.filter(rental=rental).order_by("id"))
        assert [charge.period_start for charge in charges] == [START + n * HOUR for n in range(4)]
        assert [charge.amount for charge in charges] == [Decimal("2.65")] * 4
        rental.refresh_from_db()
        assert (rental.state, rental.paid_through) == (RentalState.RUNNING, START + 4 * HOUR)
        buyer.wallet.refresh_from_db()
        assert buyer.wallet.balance == Decimal("39.40")

    def test_booked_hours_used_ends_the_rental_without_a_further_charge(self, rates):
        rental = rental_for(buyer_with("USD", "50.00"), hours=2, gpus=2)
        rental.server.refresh_from_db()
        assert rental.server.gpus_rented == 2
        rental_charge_next_hour(rental_id=rental.pk, now=START)

        counts = rentals_charge_due(now=START + 2 * HOUR + timedelta(minutes=1))

        assert (counts["charged"], counts["hours used"]) == (1, 1)
        assert RentalCharge.objects.filter(rental=rental).count() == 2
        rental.refresh_from_db()
        assert (rental.state, rental.end_reason, rental.ended_at) == (
            RentalState.ENDED, EndReason.HOURS_USED, START + 2 * HOUR
        )
        assert rental.paid_through == START + 2 * HOUR
        rental.server.refresh_from_db()
        assert rental.server.gpus_rented == 0

    def test_the_last_booked_hour_keeps_its_gpus_until_it_is_over(self, rates):
        rental = rental_for(buyer_with("USD", "50.00"), hours=1)
        rental_charge_next_hour(rental_id=rental.pk, now=START)

        assert rental_charge_next_hour(rental_id=rental.pk, now=START + timedelta(minutes=59)).status == (
            ChargeStatus.NOT_DUE
        )
        rental.refresh_from_db()
        assert rental.state == RentalState.RUNNING
        outcome = rental_charge_next_hour(rental_id=rental.pk, now=START + HOUR)
        assert outcome.status == ChargeStatus.HOURS_USED

    def test_an_ended_rental_is_never_charged(self, rates):
        rental = rental_for(
            buyer_with("USD", "50.00"), state=RentalState.ENDED, ended_at=START,
            end_reason=EndReason.STOPPED_BY_BUYER,
        )
        before = books()

        assert rental_charge_next_hour(rental_id=rental.pk, now=START + HOUR).status == ChargeStatus.ENDED
        assert books() == before


# --- the wallet cannot pay ---------------------------------------------------------------------


class TestCannotPay:
    def test_first_hour_unpaid_ends_the_rental_and_frees_its_gpus(
        self, rates, django_capture_on_commit_callbacks
    ):
        buyer = buyer_with("EUR", "2.64", preferred_language="fr")  # one cent short of 2.65
        rental = rental_for(buyer, gpus=2, price="1.44")
        before = books()

        with django_capture_on_commit_callbacks(execute=True):
            outcome = rental_charge_next_hour(rental_id=rental.pk, now=START + timedelta(seconds=30))

        assert (outcome.status, outcome.charge) == (ChargeStatus.PAYMENT_FAILED, None)
        assert books() == before
        rental.refresh_from_db()
        assert (rental.state, rental.end_reason, rental.ended_at, rental.paid_through) == (
            RentalState.ENDED, EndReason.PAYMENT_FAILED, START + timedelta(seconds=30), None
        )
        rental.server.refresh_from_db()
        assert rental.server.gpus_rented == 0
        assert len(mail.outbox) == 1
        email = mail.outbox[0]
        assert email.to == [buyer.email]
        with translation.override("fr"):  # the buyer's language
            assert email.subject == gettext("Your EverXCloud rental %(number)s has ended") % {
                "number": rental.pk
            }
            assert gettext(
                "Your rental %(number)s of %(gpus)s × %(gpu)s did not start: your balance could not "
                "pay its first hour. Its GPUs have gone back to the market."
            ) % {"number": rental.pk, "gpus": 2, "gpu": rental.gpu_model.name} in email.body
        assert "http://testserver/fr/account/top-up/" in email.body

    def test_no_wallet_is_a_failed_first_hour(self, rates, django_capture_on_commit_callbacks):
        buyer = ProfileFactory(preferred_language="en").user
        rental = rental_for(buyer)
        before = books()

        with django_capture_on_commit_callbacks(execute=True):
            outcome = rental_charge_next_hour(rental_id=rental.pk, now=START)

        assert outcome.status == ChargeStatus.PAYMENT_FAILED
        assert books() == before
        rental.refresh_from_db()
        assert rental.end_reason == EndReason.PAYMENT_FAILED
        assert [email.to for email in mail.outbox] == [[buyer.email]]
        assert "http://testserver/en/account/top-up/" in mail.outbox[0].body

    def test_no_rate_for_the_wallets_currency_is_a_failed_first_hour(
        self, django_capture_on_commit_callbacks
    ):
        rental = rental_for(buyer_with("GBP", "500.00"))
        before = books()

        with django_capture_on_commit_callbacks(execute=True):
            outcome = rental_charge_next_hour(rental_id=rental.pk, now=START)

        assert outcome.status == ChargeStatus.PAYMENT_FAILED
        assert books() == before
        assert len(mail.outbox) == 1

    def test_an_exact_balance_pays_and_leaves_zero(self, rates):
        buyer = buyer_with("EUR", "2.65")
        rental = rental_for(buyer)

        assert rental_charge_next_hour(rental_id=rental.pk, now=START).status == ChargeStatus.CHARGED
        buyer.wallet.refresh_from_db()
        assert buyer.wallet.balance == Decimal("0.00")

    def test_a_later_hour_unpaid_ends_the_rental_at_its_paid_boundary(
        self, rates, django_capture_on_commit_callbacks
    ):
        buyer = buyer_with("EUR", "5.30", preferred_language="pt")  # two hours at 2.65
        rental = rental_for(buyer, hours=10)
        rental_charge_next_hour(rental_id=rental.pk, now=START)
        before = books()

        with django_capture_on_commit_callbacks(execute=True):
            counts = rentals_charge_due(now=START + 2 * HOUR + timedelta(minutes=20))

        assert (counts["charged"], counts["balance exhausted"]) == (1, 1)
        assert books()[3] == before[3] + 1
        rental.refresh_from_db()
        assert (rental.state, rental.end_reason, rental.ended_at, rental.paid_through) == (
            RentalState.ENDED, EndReason.BALANCE_EXHAUSTED, START + 2 * HOUR, START + 2 * HOUR
        )
        rental.server.refresh_from_db()
        assert rental.server.gpus_rented == 0
        buyer.wallet.refresh_from_db()
        assert buyer.wallet.balance == Decimal("0.00")
        assert len(mail.outbox) == 1
        with translation.override("pt"):  # the buyer's language
            assert gettext("Top up your balance to rent GPUs again: %(url)s") % {
                "url": "http://testserver/pt/account/top-up/"
            } in mail.outbox[0].body
            assert gettext("Your EverXCloud rental %(number)s has ended") % {"number": rental.pk} == (
                mail.outbox[0].subject
            )
            assert gettext(
                "Your rental %(number)s of %(gpus)s × %(gpu)s ended on %(ended_at)s (UTC) because "
                "your balance could not pay its next hour. Its GPUs have gone back to the market."
            ) % {
                "number": rental.pk, "gpus": 1, "gpu": rental.gpu_model.name,
                "ended_at": date_format(rental.ended_at, "DATETIME_FORMAT"),
            } in mail.outbox[0].body
        assert "http://testserver/pt/account/top-up/" in mail.outbox[0].body

    def test_nothing_is_emailed_before_the_transaction_commits(
        self, rates, django_capture_on_commit_callbacks
    ):
        rental = rental_for(buyer_with("EUR", "1.00"))

        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            rental_charge_next_hour(rental_id=rental.pk, now=START)
        assert len(callbacks) == 1
        assert mail.outbox == []


# --- the charging run ------------------------------------------------------------------------


class TestChargingRun:
    def test_charges_starting_and_due_rentals_only_a_buyers_oldest_started_first(self, rates):
        buyer = buyer_with("USD", "100.00")
        starting = rental_for(buyer)
        due = rental_for(buyer, started_at=START - HOUR)
        rental_charge_next_hour(rental_id=due.pk, now=START - HOUR)
        not_due = rental_for(buyer, started_at=START - timedelta(minutes=30))
        rental_charge_next_hour(rental_id=not_due.pk, now=START - timedelta(minutes=30))
        rental_for(buyer, state=RentalState.ENDED, ended_at=START, end_reason=EndReason.OPERATOR)
        already = RentalCharge.objects.count()

        counts = rentals_charge_due(now=START)

        assert counts == {"rentals": 2, "charged": 2, "errors": 0}
        new = RentalCharge.objects.order_by("id")[already:]
        assert [(charge.rental_id, charge.period_start) for charge in new] == [
            (due.pk, START), (starting.pk, START)
        ]
        assert rentals_charge_due(now=START) == {"rentals": 0, "charged": 0, "errors": 0}

    def test_limit_takes_the_lowest_ids_and_the_next_run_resumes(self, rates):
        buyer = buyer_with("USD", "100.00")
        rentals = [rental_for(buyer) for _ in range(3)]

        assert rentals_charge_due(now=START, limit=2)["charged"] == 2
        assert set(RentalCharge.objects.values_list("rental_id", flat=True)) == {r.pk for r in rentals[:2]}
        assert rentals_charge_due(now=START, limit=2)["charged"] == 1
        assert RentalCharge.objects.count() == 3

    def test_the_command_prints_the_counts(self, rates):
        rental_for(buyer_with("USD", "100.00"))
        rental_for(buyer_with("USD", "1.00"))
        out = StringIO()

        call_command("charge_rentals", stdout=out)

        assert out.getvalue().strip() == "rentals: 2, charged: 1, errors: 0, payment failed: 1"

    def test_the_celery_task_returns_the_counts(self, rates):
        rental_for(buyer_with("GBP", "100.00"))

        assert charge_task.delay().get() == {"rentals": 1, "charged": 1, "errors": 0}
        assert charge_task.name == "billing.rentals_charge_due"


# --- can the buyer pay a first hour? ---------------------------------------------------------


class TestFirstHourPayable:
    @pytest.mark.parametrize(
        ("currency", "balance", "price", "gpus", "payable"),
        [
            ("USD", "2.88", "2.88", 1, True),
            ("USD", "2.87", "2.88", 1, False),
            ("EUR", "2.65", "2.88", 1, True),  # 2.6496 -> 2.65
            ("EUR", "2.64", "2.88", 1, False),
            ("GBP", "9.10", "2.88", 4, True),  # 11.52 x 0.79 = 9.1008 -> 9.10
            ("GBP", "9.09", "2.88", 4, False),
        ],
    )
    def test_balance_against_the_first_hour_in_the_wallets_currency(
        self, rates, currency, balance, price, gpus, payable
    ):
        buyer = buyer_with(currency, balance)
        before = books()

        assert rental_first_hour_payable(buyer_id=buyer.pk, price_usd=Decimal(price), gpus=gpus) is payable
        assert books() == before

    def test_no_wallet(self, rates):
        buyer = ProfileFactory().user
        assert rental_first_hour_payable(buyer_id=buyer.pk, price_usd=Decimal("0.01"), gpus=1) is False

    def test_no_rate(self):
        buyer = buyer_with("EUR", "1000.00")
        assert rental_first_hour_payable(buyer_id=buyer.pk, price_usd=Decimal("0.01"), gpus=1) is False

    def test_billing_registers_it_with_the_exchange(self, rates):
        buyer = buyer_with("EUR", "2.65")
        assert first_hour_payable(buyer_id=buyer.pk, price_usd=Decimal("2.88"), gpus=1) is True
        assert first_hour_payable(buyer_id=buyer.pk, price_usd=Decimal("2.89"), gpus=1) is False


# --- the money rules decide against the books they are given ----------------------------------------


class TestNextHourChargeWithExplicitBooks:
    def test_each_hour_decided_leaves_the_books_as_the_next_decision_reads_them(self, rates):
        buyer = buyer_with("EUR", "2.65")  # one hour at 2.88 USD, not two
        first = rental_for(buyer)
        second = rental_for(buyer, started_at=START + timedelta(seconds=30))
        before = books()

        with transaction.atomic():
            decided = _Books(rental_ids=[first.pk, second.pk])
            paid, no_ending = _next_hour_charge(books=decided, rental_id=first.pk, now=START + HOUR / 2)
            unpaid, ending = _next_hour_charge(books=decided, rental_id=second.pk, now=START + HOUR / 2)
            assert books() == before  # decided in the books, nothing written yet
            assert decided.balances[buyer.wallet.pk] == Decimal("0.00")
            assert (decided.rental(first.pk).paid_through, decided.rental(first.pk).state) == (
                START + HOUR, RentalState.RUNNING
            )
            decided.write()

        assert (paid.status, paid.charge.amount, paid.charge.period_start, no_ending) == (
            ChargeStatus.CHARGED, Decimal("2.65"), START, None
        )
        assert unpaid.status == ChargeStatus.PAYMENT_FAILED and unpaid.charge is None
        assert (ending.reason, ending.at, ending.notify) == (EndReason.PAYMENT_FAILED, START + HOUR / 2, True)
        assert list(RentalCharge.objects.values_list("rental_id", "amount")) == [(first.pk, Decimal("2.65"))]
        buyer.wallet.refresh_from_db()
        assert buyer.wallet.balance == Decimal("0.00")
        second.refresh_from_db()
        assert second.state == RentalState.STARTING  # the caller ends it, not the money rules

    def test_an_hour_the_books_hold_as_charged_is_not_charged_again(self, rates):
        rental = rental_for(buyer_with("USD", "100.00"))
        charged = rental_charge_next_hour(rental_id=rental.pk, now=START).charge
        before = books()

        with transaction.atomic():
            decided = _Books(rental_ids=[rental.pk])
            decided.rental(rental.pk).paid_through = START  # as if that hour were still to pay
            decided.charged[rental.pk, START] = charged
            outcome, ending = _next_hour_charge(books=decided, rental_id=rental.pk, now=START)
            decided.write()

        assert (outcome.status, outcome.charge, ending) == (ChargeStatus.ALREADY_CHARGED, charged, None)
        assert books() == before

    def test_a_rental_outside_the_books_is_not_decided(self, rates):
        buyer = buyer_with("USD", "100.00")
        inside, outside = rental_for(buyer), rental_for(buyer)

        with transaction.atomic():
            decided = _Books(rental_ids=[inside.pk])
            with pytest.raises(Rental.DoesNotExist):
                _next_hour_charge(books=decided, rental_id=outside.pk, now=START)
            assert decided.charges == []
