"""Reads of the order book that the public pages show on every request."""

from dataclasses import dataclass
from decimal import Decimal

from django.db.models import F, Min, Q, Sum
from django.db.models.functions import Least

from .models import Market, Offer


@dataclass(frozen=True)
class GpuPrice:
    """The best live ask of one GPU model and how many GPUs are on offer."""

    lowest_usd: Decimal
    gpus_on_offer: int


def gpu_prices() -> dict[int, GpuPrice]:
    """Lowest active ask with free GPUs per GPU model id, in one query for all models."""
    free_gpus = F("server__gpu_count") - F("server__gpus_rented")
    rows = (
        Offer.objects.filter(active=True)
        .filter(Q(server__gpus_rented__lt=F("server__gpu_count")))
        .values("server__gpu_model_id")
        .annotate(lowest=Min("price_usd"), gpus=Sum(Least("gpus_offered", free_gpus)))
        .order_by()
    )
    return {
        row["server__gpu_model_id"]: GpuPrice(lowest_usd=row["lowest"], gpus_on_offer=row["gpus"])
        for row in rows
    }


def market_is_open() -> bool:
    return Market.objects.filter(pk=Market.SINGLETON_ID, is_open=True).exists()
