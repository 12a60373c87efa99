"""Sellers' asks (offers) and the price rules asks and bids share."""

from decimal import Decimal

from django.db import IntegrityError, transaction
from django.utils.translation import gettext_lazy as _

from marketplace import formatting
from sellers.isolation import IsolationLevel
from sellers.models import Seller, Server, ServerStatus

from ..exceptions import OfferNotFound, OfferRejected
from ..matching import market_lock
from ..models import Offer, OfferState
from .market import market_match_notify

PRICE_TICK_USD = Decimal("0.01")
PRICE_CAP_USD = Decimal("100.00")  # the sanity cap of both asks and bids, per GPU-hour


def price_problem(price_usd) -> str | None:
    """None when the price is acceptable, else the code of what is wrong with it."""
    if isinstance(price_usd, float | bool) or not isinstance(price_usd, Decimal | int):
        raise TypeError(f"Prices are Decimal, not {type(price_usd).__name__}.")
    price_usd = Decimal(price_usd)
    if not price_usd.is_finite() or price_usd <= 0 or price_usd > PRICE_CAP_USD:
        return "price_out_of_range"
    if price_usd % PRICE_TICK_USD:
        return "price_off_tick"
    return None


def price_message(problem: str) -> str:
    """The refusal of a price, with the cap written by the formatting module."""
    if problem == "price_off_tick":
        return _("Prices move in steps of one US cent.")
    return _("The price per GPU-hour must be above zero and at most %(cap)s.") % {
        "cap": formatting.usd(PRICE_CAP_USD)
    }


def _offer_validate(*, server: Server, gpus: int, price_usd: Decimal) -> None:
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= server.gpu_count:
        raise OfferRejected(
            _("A server with %(count)d GPUs can offer from 1 to %(count)d of them.")
            % {"count": server.gpu_count},
            code="gpus_out_of_range",
        )
    if server.isolation_level == IsolationLevel.WHOLE and gpus != server.gpu_count:
        # Sold one rental at a time: an offer of part of it would leave the rest unsellable.
        raise OfferRejected(
            # Only reached with two GPUs or more (one GPU of one is all of them): always plural.
            _("This server is sold as a whole server, one rental at a time: offer all its %(count)d GPUs.")
            % {"count": server.gpu_count},
            code="whole_server_all_gpus",
        )
    problem = price_problem(price_usd)
    if problem:
        raise OfferRejected(price_message(problem), code=problem)


def _seller_not_suspended(seller_id: int) -> None:
    if Seller.objects.filter(pk=seller_id, suspended_at__isnull=False).exists():
        raise OfferRejected(
            _("Your seller account is suspended: you cannot post or change offers until EverXCloud "
              "reinstates it. Write to us to know more."),
            code="seller_suspended",
        )


def _server_not_retired(server_id: int) -> None:
    if Server.objects.filter(pk=server_id, status=ServerStatus.RETIRED).exists():
        raise OfferRejected(
            _("This server is retired: it can no longer offer GPUs."), code="server_retired"
        )


@transaction.atomic
def offer_post(*, server: Server, gpus: int, price_usd: Decimal) -> Offer:
    """Post an ask of `gpus` GPUs of `server` at `price_usd` per GPU-hour, then match it against
    resting bids (it trades at their prices). A server has one active offer at most: change it
    with `offer_update` or withdraw it first; a retired server offers nothing. Raises
    `OfferRejected`."""
    _offer_validate(server=server, gpus=gpus, price_usd=price_usd)
    market_lock(gpu_model_id=server.gpu_model_id)
    # After the lock: a suspension or a retirement withdraws offers under it.
    _seller_not_suspended(server.seller_id)
    _server_not_retired(server.pk)
    already = OfferRejected(
        _("This server already has an active offer. Change that offer or withdraw it first."),
        code="offer_exists",
    )
    if Offer.objects.filter(server_id=server.pk, state=OfferState.ACTIVE).exists():
        raise already
    try:
        with transaction.atomic():
            offer = Offer.objects.create(server=server, gpus_offered=gpus, price_usd=price_usd)
    except IntegrityError:
        raise already from None
    market_match_notify(gpu_model_id=server.gpu_model_id, incoming_offer_id=offer.pk)
    return offer


def _offer_get(offer_id: int) -> Offer:
    offer = Offer.objects.select_related("server").filter(pk=offer_id).first()
    if offer is None:
        raise OfferNotFound(_("We could not find this offer."), code="offer_not_found")
    return offer


@transaction.atomic
def offer_update(*, offer_id: int, gpus: int | None = None, price_usd: Decimal | None = None) -> Offer:
    """Change the GPUs or the price of an active offer. Running rentals keep their price. When the
    offer grows or gets cheaper it is matched again, as the taker (it gets the bids' prices); it
    keeps its place in time. Raises `OfferNotFound`, `OfferRejected`."""
    gpu_model_id = _offer_get(offer_id).server.gpu_model_id
    market_lock(gpu_model_id=gpu_model_id)
    offer = _offer_get(offer_id)
    if offer.state != OfferState.ACTIVE:
        raise OfferRejected(_("This offer has been withdrawn."), code="offer_not_active")
    new_gpus = offer.gpus_offered if gpus is None else gpus
    new_price = offer.price_usd if price_usd is None else price_usd
    _offer_validate(server=offer.server, gpus=new_gpus, price_usd=new_price)
    _seller_not_suspended(offer.server.seller_id)
    grew, cheaper = new_gpus > offer.gpus_offered, new_price < offer.price_usd
    if new_gpus == offer.gpus_offered and new_price == offer.price_usd:
        return offer
    Server.objects.select_for_update().filter(pk=offer.server_id).first()  # lock order: server, offer
    offer.gpus_offered, offer.price_usd = new_gpus, new_price
    offer.save(update_fields=["gpus_offered", "price_usd", "updated_at"])
    if grew or cheaper:
        market_match_notify(gpu_model_id=gpu_model_id, incoming_offer_id=offer.pk)
    return offer


@transaction.atomic
def offer_withdraw(*, offer_id: int) -> Offer:
    """Take an offer out of the book. Rentals made from it run on at their price. Withdrawing
    again changes nothing. Raises `OfferNotFound`."""
    market_lock(gpu_model_id=_offer_get(offer_id).server.gpu_model_id)
    offer = _offer_get(offer_id)
    if offer.state == OfferState.ACTIVE:
        offer.state = OfferState.WITHDRAWN
        offer.save(update_fields=["state", "updated_at"])
    return offer
