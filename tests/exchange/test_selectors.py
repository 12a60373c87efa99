from decimal import Decimal

import pytest

from exchange.models import Market
from exchange.selectors import gpu_prices, market_is_open, order_total_usd
from tests.factories import GpuModelFactory, OfferFactory, ServerFactory

pytestmark = pytest.mark.django_db


def test_lowest_active_ask_with_free_gpus_per_model(django_assert_num_queries):
    gpu = GpuModelFactory()
    other = GpuModelFactory()
    OfferFactory(server__gpu_model=gpu, price_usd=Decimal("2.50"), gpus_offered=2)
    OfferFactory(server__gpu_model=gpu, price_usd=Decimal("2.10"), gpus_offered=3)
    OfferFactory(server__gpu_model=gpu, price_usd=Decimal("1.00"), state="withdrawn")
    OfferFactory(server__gpu_model=gpu, server__status="pending", price_usd=Decimal("1.01"))
    full = ServerFactory(gpu_model=gpu, gpu_count=4, gpus_rented=4)
    OfferFactory(server=full, price_usd=Decimal("0.90"))
    partly = ServerFactory(gpu_model=other, gpu_count=8, gpus_rented=6)
    OfferFactory(server=partly, price_usd=Decimal("3.00"), gpus_offered=8)

    with django_assert_num_queries(1):
        prices = gpu_prices()

    assert prices[gpu.pk].lowest_usd == Decimal("2.10")
    assert prices[gpu.pk].gpus_on_offer == 5
    # Only the 2 free GPUs of a server count, however many its ask offers.
    assert prices[other.pk].gpus_on_offer == 2


def test_a_gpu_without_offers_has_no_price():
    gpu = GpuModelFactory()
    assert gpu.pk not in gpu_prices()


def test_the_market_starts_closed_and_opens():
    assert market_is_open() is False
    Market.objects.update_or_create(pk=1, defaults={"is_open": True})
    assert market_is_open() is True


@pytest.mark.parametrize("hours, total", [(2, Decimal("11.52")), (None, Decimal("5.76"))])
def test_an_order_total_in_dollars_is_for_its_hours_or_one_hour_when_open_ended(hours, total):
    assert order_total_usd(price_usd=Decimal("2.88"), gpus=2, hours=hours) == total
