from decimal import Decimal

import pytest
from django.utils import translation

from exchange.exceptions import OfferRejected
from exchange.models import Offer
from exchange.services import offer_post
from tests.factories import ServerFactory

pytestmark = pytest.mark.django_db


def test_offer_post_creates_an_active_ask():
    server = ServerFactory(gpu_count=8)
    offer = offer_post(server=server, gpus=4, price_usd=Decimal("1.79"))
    assert (offer.gpus_offered, offer.price_usd, offer.state) == (4, Decimal("1.79"), "active")


@pytest.mark.parametrize(
    ("gpus", "price", "code"),
    [
        (0, "1.00", "gpus_out_of_range"),
        (9, "1.00", "gpus_out_of_range"),
        (1, "0", "price_out_of_range"),
        (1, "-1.00", "price_out_of_range"),
        (1, "100.01", "price_out_of_range"),
        (1, "1.005", "price_off_tick"),
    ],
)
def test_bad_offers_are_refused_and_write_nothing(gpus, price, code):
    server = ServerFactory(gpu_count=8)
    with pytest.raises(OfferRejected) as refused:
        offer_post(server=server, gpus=gpus, price_usd=Decimal(price))
    assert refused.value.code == code
    assert Offer.objects.count() == 0


def test_refusals_are_translated():
    server = ServerFactory(gpu_count=8)
    with translation.override("fr"), pytest.raises(OfferRejected) as refused:
        offer_post(server=server, gpus=1, price_usd=Decimal("1.005"))
    with translation.override("fr"):
        assert str(refused.value.message) == "Les prix évoluent par paliers d'un cent américain."
