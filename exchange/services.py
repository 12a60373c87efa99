"""Every write to the order book."""

from decimal import Decimal

from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from sellers.models import Server

from .exceptions import OfferRejected, RentalEnded
from .models import Offer, Rental, RentalState

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


# --- the life of a rental, as billing drives it --------------------------------------------
# Lock order everywhere: rental row, then wallets (billing), then the market lock of the GPU
# model, then server rows by id, then offers and bids. Keeping one order means no deadlocks.


def rental_mark_paid(*, rental_id: int, paid_through) -> Rental:
    """Billing charged an hour: the rental is paid up to `paid_through` and runs.
    Called inside billing's transaction, which holds the rental's row lock."""
    rental = Rental.objects.select_for_update().get(pk=rental_id)
    if rental.state == RentalState.ENDED:
        raise RentalEnded(_("This rental has ended."), code="rental_ended")
    rental.paid_through = paid_through
    rental.state = RentalState.RUNNING
    rental.save(update_fields=["paid_through", "state"])
    return rental


@transaction.atomic
def rental_end(*, rental_id: int, reason: str, at=None) -> Rental:
    """End a rental (once) and give its GPUs back to its server. Ending again changes nothing."""
    rental = Rental.objects.select_for_update().get(pk=rental_id)
    if rental.state == RentalState.ENDED:
        return rental
    rental.state = RentalState.ENDED
    rental.end_reason = reason
    rental.ended_at = at or timezone.now()
    rental.save(update_fields=["state", "end_reason", "ended_at"])
    Server.objects.filter(pk=rental.server_id).update(gpus_rented=F("gpus_rented") - rental.gpus)
    return rental
