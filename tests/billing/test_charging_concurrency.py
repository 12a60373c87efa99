"""Charging from real threads, each with its own connection, committing for real: an hour is
charged once however many processes try at the same moment."""

from collections import Counter
from datetime import timedelta
from decimal import Decimal

import pytest

from billing.models import LedgerTransaction, RentalCharge
from billing.services import ChargeStatus, rental_charge_next_hour, rentals_charge_due
from exchange.models import EndReason, Rental, RentalState
from tests.billing.support import (
    HOUR,
    START,
    assert_books_consistent,
    buyer_with,
    rental_for,
)
from tests.factories import ExchangeRateFactory
from tests.threads import run_together

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _setup(time_machine):
    time_machine.move_to(START + timedelta(minutes=1), tick=False)
    ExchangeRateFactory(currency="EUR", rate=Decimal("0.92000000"))
    ExchangeRateFactory(currency="GBP", rate=Decimal("0.79000000"))
    yield
    assert_books_consistent()


def test_five_threads_charging_the_same_rental_charge_its_first_hour_once():
    buyer = buyer_with("EUR", "50.00")
    rental = rental_for(buyer)

    results, errors = run_together(5, lambda _: rental_charge_next_hour(rental_id=rental.pk, now=START))

    assert errors == []
    assert Counter(outcome.status for outcome in results) == {
        ChargeStatus.CHARGED: 1, ChargeStatus.NOT_DUE: 4
    }
    charge = RentalCharge.objects.get()
    assert (charge.rental_id, charge.period_start, charge.amount) == (rental.pk, START, Decimal("2.65"))
    assert LedgerTransaction.objects.filter(kind="charge").count() == 1
    buyer.wallet.refresh_from_db()
    assert buyer.wallet.balance == Decimal("47.35")
    rental.refresh_from_db()
    assert (rental.state, rental.paid_through) == (RentalState.RUNNING, START + HOUR)


def test_five_threads_catching_up_missed_hours_charge_each_hour_once():
    buyer = buyer_with("USD", "50.00")
    rental = rental_for(buyer)
    now = START + 3 * HOUR + timedelta(minutes=2)

    def catch_up(_: int) -> list[str]:
        statuses = []
        while True:
            outcome = rental_charge_next_hour(rental_id=rental.pk, now=now)
            statuses.append(outcome.status)
            if outcome.status != ChargeStatus.CHARGED:
                return statuses

    results, errors = run_together(5, catch_up)

    assert errors == []
    assert sum(statuses.count(ChargeStatus.CHARGED) for statuses in results) == 4
    assert list(RentalCharge.objects.order_by("id").values_list("period_start", flat=True)) == [
        START + n * HOUR for n in range(4)
    ]
    buyer.wallet.refresh_from_db()
    assert buyer.wallet.balance == Decimal("50.00") - 4 * Decimal("2.88")


def test_two_charging_runs_at_once_charge_every_rental_hour_once():
    eur = buyer_with("EUR", "100.00")
    usd = buyer_with("USD", "100.00")
    gbp = buyer_with("GBP", "3.00")  # pays one hour of 2.28, not two
    poor = buyer_with("EUR", "1.00")
    fresh = [rental_for(buyer) for buyer in (eur, usd, eur, gbp)]
    unpaid = rental_for(poor)
    late = rental_for(usd, gpus=2)
    rental_charge_next_hour(rental_id=late.pk, now=START)
    booked = rental_for(eur, hours=1)
    rental_charge_next_hour(rental_id=booked.pk, now=START)
    charges_before = RentalCharge.objects.count()
    now = START + 2 * HOUR + timedelta(minutes=30)

    results, errors = run_together(2, lambda _: rentals_charge_due(now=now))

    assert errors == []
    assert sum(counts["errors"] for counts in results) == 0
    charged = Counter(RentalCharge.objects.values_list("rental_id", flat=True))
    assert charged == {
        fresh[0].pk: 3, fresh[1].pk: 3, fresh[2].pk: 3, fresh[3].pk: 1, late.pk: 3, booked.pk: 1
    }
    assert sum(counts["charged"] for counts in results) == RentalCharge.objects.count() - charges_before
    hours = RentalCharge.objects.values("rental_id", "period_start").distinct().count()
    assert hours == sum(charged.values())
    assert LedgerTransaction.objects.filter(kind="charge").count() == sum(charged.values())
    ends = dict(Rental.objects.filter(state=RentalState.ENDED).values_list("pk", "end_reason"))
    assert ends == {
        fresh[3].pk: EndReason.BALANCE_EXHAUSTED, unpaid.pk: EndReason.PAYMENT_FAILED,
        booked.pk: EndReason.HOURS_USED,
    }
    for rental in Rental.objects.exclude(state=RentalState.ENDED):
        assert rental.paid_through == START + 3 * HOUR
    eur.wallet.refresh_from_db()
    assert eur.wallet.balance == Decimal("100.00") - 7 * Decimal("2.65")
