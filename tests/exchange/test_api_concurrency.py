"""Ten POST /bids at the same moment with one Idempotency-Key (real threads, real commits): the
exchange places one bid, charges its first hour once, and every answer is the same."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.test import Client

from billing.models import RentalCharge
from billing.services import fx_rates_load
from exchange.models import Bid, Rental
from tests.api_tokens import post_json
from tests.exchange.support import buyer_with, market_set
from tests.threads import run_together

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("time_in_force", ["buy_now", "bid"])
def test_ten_posts_with_one_key_place_one_bid(demo_book, ed25519_public_key, time_in_force):
    from accounts.services import api_token_create

    fx_rates_load(rates={"EUR": Decimal("0.92")}, valid_from=datetime(2026, 1, 1, tzinfo=UTC), source="test")
    market_set(True)
    buyer = buyer_with()
    _token, secret = api_token_create(user=buyer, name="race", scopes=["trade"])
    body = {"gpu_model": "h100-sxm", "gpus": 1, "max_price": "3.00", "time_in_force": time_in_force,
            "ssh_public_key": ed25519_public_key}

    def send(_index):
        client = Client(headers={"Authorization": f"Bearer {secret}"})
        response = post_json(client, "/api/v1/bids", body, **{"Idempotency-Key": "order-2026-12-01"})
        return response.status_code, response.json()

    results, errors = run_together(10, send)

    assert errors == []
    assert {status for status, _ in results} == {201}
    answers = [answer for _, answer in results]
    assert all(answer == answers[0] for answer in answers), answers
    assert Bid.objects.filter(buyer=buyer).count() == 1
    assert Rental.objects.filter(buyer=buyer).count() == 1
    assert RentalCharge.objects.filter(rental__buyer=buyer).count() == 1
    assert answers[0]["rental"]["state"] == "starting"  # paid; runs once the agent made the login
