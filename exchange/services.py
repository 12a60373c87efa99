"""Every write to the order book."""

from decimal import Decimal

from django.db import transaction
from django.utils.translation import gettext_lazy as _

from sellers.models import Server

from .exceptions import OfferRejected
from .models import Offer

PRICE_TICK_USD = Decimal("0.01")
PRICE_CAP_USD = Decimal("100.00")


def _offer_validate(*, server: Server, gpus: int, price_usd: Decimal) -> None:
    if not 1 <= gpus <= server.gpu_count:
        raise OfferRejected(
            _("A server with %(count)d GPUs can offer from 1 to %(count)d of them.")
            % {"count": server.gpu_count},
            code="gpus_out_of_range",
        )
    if price_usd <= 0 or price_usd > PRICE_CAP_USD:
        raise OfferRejected(
            _("The price per GPU-hour must be above US$ 0 and at most US$ 100."),
            code="price_out_of_range",
        )
    if price_usd % PRICE_TICK_USD:
        raise OfferRejected(
            _("Prices move in steps of one US cent."), code="price_off_tick"
        )


@transaction.atomic
def offer_post(*, server: Server, gpus: int, price_usd: Decimal) -> Offer:
    _offer_validate(server=server, gpus=gpus, price_usd=price_usd)
    return Offer.objects.create(server=server, gpus_offered=gpus, price_usd=price_usd)
