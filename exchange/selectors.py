"""Reads of the order book that the public pages show on every request."""

from dataclasses import dataclass
from decimal import Decimal

from django.db.models import F, Min, Sum
from django.db.models.functions import Least

from sellers.models import ServerStatus

from .models import Market, Offer, OfferState


@dataclass(frozen=True)
class GpuPrice:
    """The best live ask of one GPU model and how many GPUs are on offer."""

    lowest_usd: Decimal
    gpus_on_offer: int


def offers_available():
    """Active offers of active servers, annotated with `available`: the GPUs they can sell now."""
    return (
        Offer.objects.filter(state=OfferState.ACTIVE, server__status=ServerStatus.ACTIVE)
        .annotate(available=Least("gpus_offered", "server__gpu_count") - F("server__gpus_rented"))
        .filter(available__gt=0)
    )


def gpu_prices() -> dict[int, GpuPrice]:
    """Lowest active ask with free GPUs per GPU model id, in one query for all models."""
    rows = (
        offers_available()
        .values("server__gpu_model_id")
        .annotate(lowest=Min("price_usd"), gpus=Sum("available"))
        .order_by()
    )
    return {
        row["server__gpu_model_id"]: GpuPrice(lowest_usd=row["lowest"], gpus_on_offer=row["gpus"])
        for row in rows
    }


def market_is_open() -> bool:
    return Market.objects.filter(pk=Market.SINGLETON_ID, is_open=True).exists()
