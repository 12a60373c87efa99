"""What the buyer's pages read about charges: cost so far per rental, and the wallet's runway."""

from datetime import timedelta
from decimal import Decimal

import pytest

from billing.selectors import rental_costs, wallet_runway
from billing.services import rental_charge_next_hour
from exchange.models import EndReason, RentalState
from tests.billing.support import HOUR, START, assert_books_consistent, buyer_with, rental_for
from tests.factories import ExchangeRateFactory, WalletFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _setup(time_machine):
    time_machine.move_to(START + timedelta(minutes=1), tick=False)
    ExchangeRateFactory(currency="EUR", rate=Decimal("0.92000000"))
    yield
    assert_books_consistent()


def test_rental_costs_sums_each_rentals_charges_in_one_query(django_assert_num_queries):
    eur = buyer_with("EUR", "100.00")
    usd = buyer_with("USD", "100.00")
    three_hours = rental_for(eur)
    for hour in range(3):
        rental_charge_next_hour(rental_id=three_hours.pk, now=START + hour * HOUR)
    one_hour = rental_for(usd, gpus=2)
    rental_charge_next_hour(rental_id=one_hour.pk, now=START)
    not_charged = rental_for(usd, started_at=START + HOUR)

    with django_assert_num_queries(1):
        costs = rental_costs(rental_ids=[three_hours.pk, one_hour.pk, not_charged.pk])

    assert costs == {
        three_hours.pk: (Decimal("7.95"), "EUR"),
        one_hour.pk: (Decimal("5.76"), "USD"),
    }


def test_rental_costs_of_nothing():
    assert rental_costs(rental_ids=[]) == {}


def test_runway_counts_the_full_hours_the_balance_pays_for_the_running_rentals(django_assert_num_queries):
    buyer = buyer_with("EUR", "20.00")
    rental_for(buyer)  # 2.88 USD -> 2.65 EUR an hour
    rental_for(buyer, gpus=2, price="1.00")  # 2.00 USD -> 1.84 EUR an hour
    rental_for(buyer, state=RentalState.ENDED, ended_at=START, end_reason=EndReason.STOPPED_BY_BUYER)

    with django_assert_num_queries(2):
        runway = wallet_runway(wallet=buyer.wallet)

    assert runway.hours == 4  # 20.00 / 4.49 = 4.45


def test_runway_without_rentals_or_without_a_rate_is_unknown():
    buyer = buyer_with("USD", "20.00")
    assert wallet_runway(wallet=buyer.wallet) is None
    gbp = WalletFactory(currency="GBP")
    rental_for(gbp.user)
    assert wallet_runway(wallet=gbp).hours is None


def test_runway_of_an_empty_wallet_is_zero():
    buyer = buyer_with("USD")
    rental_for(buyer)
    assert wallet_runway(wallet=buyer.wallet).hours == 0
