from decimal import Decimal

import pytest

from accounts.models import Wallet
from billing.demo import DEMO_EMAIL, demo_buyer_load
from billing.services import fx_rates_load, fx_rates_read
from exchange.models import Market, Rental

pytestmark = pytest.mark.django_db


def test_demo_buyer_has_a_running_rental_once(demo_book):
    rates = fx_rates_read()
    fx_rates_load(rates=rates.rates, valid_from=rates.valid_from, source=rates.source)
    Market.objects.update_or_create(pk=1, defaults={"is_open": True})
    assert demo_buyer_load() is not None
    assert demo_buyer_load() is None
    rental = Rental.objects.get(buyer__email=DEMO_EMAIL)
    assert (rental.state, rental.price_usd) == ("running", Decimal("0.33"))
    # 100 EUR topped up, less the first hour: 0.33 USD at the demo rate of 0.92.
    assert Wallet.objects.get(user__email=DEMO_EMAIL).balance == Decimal("99.70")
