"""A buyer's own crossing order is one transaction: the bid, its match and the first hour's charge
happen together or not at all."""

import uuid
from datetime import timedelta
from decimal import Decimal

import pytest

from billing.models import RentalCharge
from billing.services import ChargeStatus, first_hour, order_place
from exchange.models import Bid, Market, Rental, RentalState, TimeInForce
from exchange.services import offer_post
from sellers.models import Server
from tests.factories import ExchangeRateFactory, ServerFactory

from .support import assert_books_consistent, books, buyer_with

pytestmark = pytest.mark.django_db


@pytest.fixture
def order(gpu_catalog, ed25519_public_key):
    Market.objects.update_or_create(pk=1, defaults={"is_open": True})
    ExchangeRateFactory(currency="EUR", rate=Decimal("0.92000000"))
    h100 = gpu_catalog["h100-sxm"]
    offer_post(server=ServerFactory(gpu_model=h100, gpu_count=8, status="active"), gpus=8,
               price_usd=Decimal("2.50"))
    return {"buyer": buyer_with("EUR", "100.00"), "gpu_model_id": h100.pk, "gpus": 2,
            "ssh_public_key": ed25519_public_key, "max_price_usd": Decimal("3.00"),
            "time_in_force": TimeInForce.BUY_NOW, "form_token": uuid.uuid4()}


def test_a_crossing_order_is_matched_and_its_first_hour_charged(order):
    placed = order_place(**order)

    assert placed.charge.status == ChargeStatus.CHARGED
    rental = Rental.objects.get(pk=placed.rental.pk)
    assert (rental.state, rental.paid_through) == (RentalState.STARTING, placed.rental.paid_through)
    assert rental.paid_through == rental.started_at + timedelta(hours=1)
    order["buyer"].wallet.refresh_from_db()
    assert order["buyer"].wallet.balance == Decimal("100.00") - Decimal("4.60")  # 2 x 2.50 USD at 0.92
    assert_books_consistent()


def test_the_same_form_again_places_one_order_and_one_charge(order):
    first = order_place(**order)
    again = order_place(**order)

    assert (again.bid.pk, again.rental.pk) == (first.bid.pk, first.rental.pk)
    assert again.charge.status == ChargeStatus.NOT_DUE  # paid through the hour that has begun
    assert Bid.objects.count() == 1 and Rental.objects.count() == 1 and RentalCharge.objects.count() == 1


def test_a_first_hour_that_fails_to_write_rolls_back_the_whole_order(order, monkeypatch):
    before = books()

    def broken(**_posting):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(first_hour, "ledger_post_locked", broken)
    with pytest.raises(RuntimeError):
        order_place(**order)

    assert books() == before
    assert not Bid.objects.exists() and not Rental.objects.exists()
    assert Server.objects.get().gpus_rented == 0
    assert_books_consistent()
