"""Every write to the order book, the market and the life of a rental.

Each service owns its transaction and takes the market lock of the GPU model before touching
servers, offers or bids (lock order in `exchange.matching`). Matching runs after every change
that can make a trade possible: a bid placed, an offer posted, grown or made cheaper, GPUs freed
by a rental that ends, the market opening.
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from uuid import UUID

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import F, Max, Q
from django.db.models.functions import Coalesce
from django.urls import NoReverseMatch, reverse
from django.utils import timezone, translation
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from accounts.models import AuditAction
from accounts.roles import DECIDE_SELLER, OPERATE_MARKET
from accounts.services import audit_record, operator_require, reason_require
from catalog.models import GpuModel
from marketplace import formatting
from sellers.exceptions import SellerStateInvalid
from sellers.models import Region, Seller, Server, ServerStatus
from sellers.tasks import seller_status_email_send

from .exceptions import (
    BidNotFound,
    BidNotOpen,
    BidRejected,
    OfferNotFound,
    OfferRejected,
    RentalEnded,
    RentalNotFound,
    SshKeyInvalid,
)
from .matching import market_lock, market_match
from .models import (
    BID_GPU_COUNTS,
    Bid,
    BidCancelReason,
    BidState,
    EndReason,
    Market,
    Offer,
    OfferState,
    Rental,
    RentalState,
    TimeInForce,
)
from .payments import first_hour_payable
from .selectors import market_is_open
from .ssh_keys import ssh_public_key_validate

logger = logging.getLogger(__name__)

PRICE_TICK_USD = Decimal("0.01")
PRICE_CAP_USD = Decimal("100.00")  # the sanity cap of both asks and bids, per GPU-hour
MAX_BID_HOURS = 24 * 366
HOUR = timedelta(hours=1)


def _price_valid(price_usd) -> str | None:
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


# --- offers (asks) -------------------------------------------------------------------------------


def _offer_validate(*, server: Server, gpus: int, price_usd: Decimal) -> None:
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= server.gpu_count:
        raise OfferRejected(
            _("A server with %(count)d GPUs can offer from 1 to %(count)d of them.")
            % {"count": server.gpu_count},
            code="gpus_out_of_range",
        )
    problem = _price_valid(price_usd)
    if problem:
        raise OfferRejected(price_message(problem), code=problem)


def _seller_not_suspended(seller_id: int) -> None:
    if Seller.objects.filter(pk=seller_id, suspended_at__isnull=False).exists():
        raise OfferRejected(
            _("Your seller account is suspended: you cannot post or change offers until EverXCloud "
              "reinstates it. Write to us to know more."),
            code="seller_suspended",
        )


@transaction.atomic
def offer_post(*, server: Server, gpus: int, price_usd: Decimal) -> Offer:
    """Post an ask of `gpus` GPUs of `server` at `price_usd` per GPU-hour, then match it against
    resting bids (it trades at their prices). A server has one active offer at most: change it
    with `offer_update` or withdraw it first. Raises `OfferRejected`."""
    _offer_validate(server=server, gpus=gpus, price_usd=price_usd)
    market_lock(gpu_model_id=server.gpu_model_id)
    _seller_not_suspended(server.seller_id)  # after the lock: a suspension withdraws under it
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
    market_match(gpu_model_id=server.gpu_model_id, incoming_offer_id=offer.pk)
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
        market_match(gpu_model_id=gpu_model_id, incoming_offer_id=offer.pk)
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


# --- bids ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BidPlaced:
    """The bid as it stands after placing it, and the rental when it matched at once."""

    bid: Bid
    rental: Rental | None


def _placed(bid: Bid) -> BidPlaced:
    rental = Rental.objects.filter(bid=bid).first() if bid.state == BidState.FILLED else None
    return BidPlaced(bid=bid, rental=rental)


def _bid_validate(
    *, buyer, gpu_model_id: int, gpus: int, max_price_usd: Decimal, region: str, hours: int | None,
    time_in_force: str, expires_at: datetime | None, ssh_public_key: str, now: datetime,
) -> str:
    """Refuse a bid that cannot be placed, before anything is written; returns the normalised key."""
    if time_in_force not in TimeInForce.values:
        raise BidRejected(_("Choose how long the order stays in the book."), code="time_in_force_unknown")
    problem = _price_valid(max_price_usd)
    if problem:
        raise BidRejected(price_message(problem), code=problem)
    if isinstance(gpus, bool) or gpus not in BID_GPU_COUNTS:
        raise BidRejected(
            _("A bid asks for 1, 2, 4 or 8 GPUs on one server."), code="gpus_not_allowed"
        )
    if hours is not None and (
        isinstance(hours, bool) or not isinstance(hours, int) or not 1 <= hours <= MAX_BID_HOURS
    ):
        raise BidRejected(
            _("The number of hours must be a whole number from 1 to %(max)d, or empty to run until "
              "you stop it.") % {"max": MAX_BID_HOURS},
            code="hours_invalid",
        )
    if region and region not in Region.values:
        raise BidRejected(_("Choose one of the regions listed."), code="region_unknown")
    if expires_at is not None:
        if time_in_force != TimeInForce.BID:
            raise BidRejected(
                _("Only a bid that rests in the book can have an expiry."), code="expiry_not_allowed"
            )
        if timezone.is_naive(expires_at):
            expires_at = timezone.make_aware(expires_at)
        if expires_at <= now:
            raise BidRejected(_("The expiry must be in the future."), code="expiry_in_past")
    try:
        key = ssh_public_key_validate(ssh_public_key)
    except SshKeyInvalid as invalid:
        raise BidRejected(invalid.message, code=invalid.code) from None
    if not GpuModel.objects.filter(pk=gpu_model_id).exists():
        raise BidRejected(_("We do not list this GPU."), code="gpu_model_unknown")
    largest = Server.objects.filter(gpu_model_id=gpu_model_id, status=ServerStatus.ACTIVE).aggregate(
        largest=Max("gpu_count")
    )["largest"]
    if largest is None:
        raise BidRejected(
            _("No server on the exchange has this GPU yet, so there is nothing to bid on."),
            code="gpus_unavailable",
        )
    if gpus > largest:
        raise BidRejected(
            ngettext(
                "No server on the exchange has %(gpus)d GPUs of this model: the largest has %(max)d GPU.",
                "No server on the exchange has %(gpus)d GPUs of this model: the largest has %(max)d GPUs.",
                largest,
            ) % {"gpus": gpus, "max": largest},
            code="gpus_unavailable",
        )
    if not first_hour_payable(buyer_id=buyer.pk, price_usd=Decimal(max_price_usd), gpus=gpus):
        raise BidRejected(
            _("Your balance does not cover the first hour of this order at your maximum price. "
              "Top up your balance, or ask for fewer GPUs or a lower price."),
            code="insufficient_balance",
        )
    return key


def bid_place(
    *,
    buyer,
    gpu_model_id: int,
    gpus: int,
    max_price_usd: Decimal,
    region: str = "",
    hours: int | None = None,
    time_in_force: str,
    expires_at: datetime | None = None,
    ssh_public_key: str,
    form_token: UUID,
) -> BidPlaced:
    """Place a bid for `gpus` GPUs of one model on one server at up to `max_price_usd` per GPU-hour,
    and match it at once if the market is open (it pays the offer's price).

    BUY_NOW fills at once or is cancelled (NOT_FILLED) and is refused while the market is closed;
    BID rests in the book until filled, cancelled or `expires_at`. The same `form_token` again (also
    at the same moment) returns the first bid and its rental. Returns `BidPlaced(bid, rental)`, the
    rental when this bid matched (billing then charges its first hour). Raises `BidRejected`
    (nothing written)."""
    earlier = Bid.objects.filter(buyer=buyer, form_token=form_token).first()
    if earlier is not None:
        return _placed(earlier)
    now = timezone.now()
    key = _bid_validate(
        buyer=buyer, gpu_model_id=gpu_model_id, gpus=gpus, max_price_usd=max_price_usd, region=region,
        hours=hours, time_in_force=time_in_force, expires_at=expires_at, ssh_public_key=ssh_public_key,
        now=now,
    )
    if expires_at is not None and timezone.is_naive(expires_at):
        expires_at = timezone.make_aware(expires_at)
    with transaction.atomic():
        # Under the market lock, so that a market opening at this moment sees this bid (see
        # `market_open`).
        market_lock(gpu_model_id=gpu_model_id)
        is_open = market_is_open()
        if time_in_force == TimeInForce.BUY_NOW and not is_open:
            raise BidRejected(
                _("The market is closed: nothing can be bought now. You can place a bid that waits "
                  "in the book until the market opens."),
                code="market_closed",
            )
        try:
            with transaction.atomic():
                bid = Bid.objects.create(
                    buyer=buyer, gpu_model_id=gpu_model_id, gpus=gpus, max_price_usd=max_price_usd,
                    region=region or "", hours=hours, time_in_force=time_in_force, expires_at=expires_at,
                    ssh_public_key=key, form_token=form_token,
                )
        except IntegrityError:
            earlier = Bid.objects.filter(buyer=buyer, form_token=form_token).first()
            if earlier is None:
                raise
            return _placed(earlier)
        if is_open:
            market_match(gpu_model_id=gpu_model_id, incoming_bid_id=bid.pk)
            bid.refresh_from_db()
        if bid.state == BidState.OPEN and time_in_force == TimeInForce.BUY_NOW:
            bid.state, bid.cancel_reason = BidState.CANCELLED, BidCancelReason.NOT_FILLED
            bid.save(update_fields=["state", "cancel_reason", "updated_at"])
        return _placed(bid)


@transaction.atomic
def bid_cancel(*, buyer, bid_id: int) -> Bid:
    """Cancel the buyer's own open bid. Raises `BidNotFound` (unknown, or someone else's) and
    `BidNotOpen` (already filled, cancelled or expired)."""
    bid = Bid.objects.filter(pk=bid_id, buyer=buyer).first()
    if bid is None:
        raise BidNotFound(_("We could not find this order."), code="bid_not_found")
    market_lock(gpu_model_id=bid.gpu_model_id)
    cancelled = Bid.objects.filter(pk=bid.pk, state=BidState.OPEN).update(
        state=BidState.CANCELLED, cancel_reason=BidCancelReason.BUYER, updated_at=timezone.now()
    )
    bid.refresh_from_db()
    if not cancelled:
        raise BidNotOpen(
            _("This order is no longer open: it has been filled, cancelled or has expired."),
            code="bid_not_open",
        )
    return bid


def bids_expire(*, now: datetime | None = None) -> int:
    """Mark EXPIRED every open bid whose `expires_at` has passed; returns how many. Bids that a
    matching pass holds at this moment are skipped (that pass expires or fills them)."""
    now = now or timezone.now()
    with transaction.atomic():
        ids = list(
            Bid.objects.select_for_update(skip_locked=True)
            .filter(state=BidState.OPEN, expires_at__lte=now)
            .order_by("id")
            .values_list("id", flat=True)
        )
        return Bid.objects.filter(pk__in=ids, state=BidState.OPEN).update(
            state=BidState.EXPIRED, updated_at=timezone.now()
        )


def bid_cancelled_notify(bid_id: int) -> bool:
    """Email the buyer, in their language, that their bid was cancelled because their balance no
    longer covered its first hour. Queued with `transaction.on_commit` by the matching engine."""
    bid = (
        Bid.objects.select_related("buyer", "gpu_model")
        .filter(pk=bid_id, state=BidState.CANCELLED, cancel_reason=BidCancelReason.INSUFFICIENT_BALANCE)
        .first()
    )
    if bid is None:
        return False
    try:
        language = bid.buyer.profile.preferred_language or settings.LANGUAGE_CODE
    except ObjectDoesNotExist:
        language = settings.LANGUAGE_CODE
    with translation.override(language):
        try:
            path = reverse("billing:top-up")
        except NoReverseMatch:
            path = ""
        site = getattr(settings, "SITE_URL", "")
        values = {
            "gpus": bid.gpus,
            "gpu": bid.gpu_model.name,
            "price": formatting.usd(bid.max_price_usd, language=language),
            "url": site + path if path else site,
        }
        subject = gettext("Your EverXCloud bid was cancelled")
        paragraphs = [
            gettext("Hello,"),
            ngettext(
                "Your bid for %(gpus)d × %(gpu)s at up to %(price)s per GPU-hour was about to match, "
                "but your balance no longer covers its first hour, so we cancelled it.",
                "Your bid for %(gpus)d × %(gpu)s at up to %(price)s per GPU-hour was about to match, "
                "but your balance no longer covers its first hour, so we cancelled it.",
                bid.gpus,
            ) % values,
        ]
        if values["url"]:
            paragraphs.append(gettext("Top up your balance and place your bid again: %(url)s") % values)
        paragraphs.append(gettext("Thank you for using EverXCloud."))
        body = "\n\n".join(paragraphs) + "\n"
    send_mail(subject, body, None, [bid.buyer.email])
    return True


# --- the market ----------------------------------------------------------------------------------


def _market_state_set(*, is_open: bool, operator, reason: str) -> None:
    """Set the state; an operator's change is checked against their role and audited with it."""
    if operator is not None:
        operator_require(operator=operator, permission=OPERATE_MARKET)
    market = Market.objects.select_for_update().filter(pk=Market.SINGLETON_ID).first()
    was_open = bool(market and market.is_open)
    market, _created = Market.objects.update_or_create(pk=Market.SINGLETON_ID, defaults={"is_open": is_open})
    if operator is not None and was_open != is_open:
        audit_record(
            actor=operator, action=AuditAction.MARKET_OPEN if is_open else AuditAction.MARKET_CLOSE,
            target=market, reason=(reason or "").strip(),
            before={"is_open": was_open}, after={"is_open": is_open},
        )


def market_open(*, by=None, operator=None, reason: str = "") -> list[Rental]:
    """Open the market and run one matching pass for every GPU model; returns the rentals made.
    With `operator`, only one allowed to operate the market may (`OperatorNotAllowed`), and the
    audit log records it.

    Each model's pass is its own transaction, after the market is open for everyone: a bid being
    placed at this very moment holds its model's lock while it reads the market state, so that
    model's pass waits for it and sees it (which is also why every model gets a pass, not only
    those with open bids a moment ago)."""
    with transaction.atomic():
        _market_state_set(is_open=True, operator=operator, reason=reason)
    logger.info("Market opened by %s", operator or by or "the system")
    rentals: list[Rental] = []
    for gpu_model_id in GpuModel.objects.order_by("id").values_list("id", flat=True):
        with transaction.atomic():
            rentals.extend(market_match(gpu_model_id=gpu_model_id).rentals)
    return rentals


@transaction.atomic
def market_close(*, by=None, operator=None, reason: str = "") -> None:
    """Close the market: from now on nothing matches, bids and offers rest. With `operator`, as
    `market_open`."""
    _market_state_set(is_open=False, operator=operator, reason=reason)
    logger.info("Market closed by %s", operator or by or "the system")


@dataclass(frozen=True)
class OpeningTrade:
    gpu_model: str
    rentals: int
    gpus: int
    hourly_usd: Decimal  # what these rentals cost together per hour


@dataclass(frozen=True)
class OpeningPreview:
    trades: list[OpeningTrade]
    bids_cancelled: int  # bids whose buyers cannot pay the first hour


class _DryRun(Exception):
    pass


def market_open_preview() -> OpeningPreview:
    """What opening the market now would match, GPU model by GPU model: the real matching pass,
    run in a transaction that is rolled back, so the answer follows the market rules exactly and
    nothing is kept (emails are queued on commit, so none leave). Bids placed after the preview
    can change the outcome; the confirmation page says so."""
    per_model: dict[str, list[Rental]] = {}
    cancelled = 0
    try:
        with transaction.atomic():
            Market.objects.update_or_create(pk=Market.SINGLETON_ID, defaults={"is_open": True})
            for gpu_model in GpuModel.objects.order_by("position", "id"):
                result = market_match(gpu_model_id=gpu_model.pk)
                cancelled += len(result.cancelled_bid_ids)
                if result.rentals:
                    per_model[gpu_model.name] = result.rentals
            raise _DryRun
    except _DryRun:
        pass
    trades = [
        OpeningTrade(
            gpu_model=name, rentals=len(rentals), gpus=sum(rental.gpus for rental in rentals),
            hourly_usd=sum((rental.price_usd * rental.gpus for rental in rentals), Decimal("0.00")),
        )
        for name, rentals in per_model.items()
    ]
    return OpeningPreview(trades=trades, bids_cancelled=cancelled)


# --- sellers, as operators decide ----------------------------------------------------------------


@transaction.atomic
def seller_suspend(*, seller_id: int, operator, reason: str) -> Seller:
    """Suspend a seller: every active offer of its servers is withdrawn and it can post none until
    reinstated; rentals already running continue and are charged as usual. Raises
    `OperatorNotAllowed`, `ReasonRequired`, `SellerStateInvalid` (already suspended)."""
    operator_require(operator=operator, permission=DECIDE_SELLER)
    reason = reason_require(reason)
    seller = Seller.objects.select_for_update().get(pk=seller_id)
    if seller.suspended_at is not None:
        raise SellerStateInvalid(_("This seller is already suspended."), code="already_suspended")
    model_ids = sorted(set(Server.objects.filter(seller=seller).values_list("gpu_model_id", flat=True)))
    for gpu_model_id in model_ids:  # lock order: markets in ascending id, then offers
        market_lock(gpu_model_id=gpu_model_id)
    offer_ids = list(
        Offer.objects.filter(server__seller=seller, state=OfferState.ACTIVE).order_by("pk").values_list(
            "pk", flat=True
        )
    )
    for offer_id in offer_ids:
        offer_withdraw(offer_id=offer_id)
    seller.suspended_at = timezone.now()
    seller.suspension_reason = reason
    seller.save(update_fields=["suspended_at", "suspension_reason"])
    transaction.on_commit(lambda: seller_status_email_send.delay(seller.pk))
    audit_record(
        actor=operator, action=AuditAction.SELLER_SUSPEND, target=seller, reason=reason,
        before={"suspended": False, "active_offers": offer_ids},
        after={"suspended": True, "active_offers": [], "withdrawn_offers": offer_ids},
    )
    return seller


@transaction.atomic
def seller_reinstate(*, seller_id: int, operator, reason: str) -> Seller:
    """Lift a suspension: the seller may post offers again (withdrawn ones are not restored).
    Raises `OperatorNotAllowed`, `ReasonRequired`, `SellerStateInvalid` (not suspended)."""
    operator_require(operator=operator, permission=DECIDE_SELLER)
    reason = reason_require(reason)
    seller = Seller.objects.select_for_update().get(pk=seller_id)
    if seller.suspended_at is None:
        raise SellerStateInvalid(_("This seller is not suspended."), code="not_suspended")
    suspended_at = seller.suspended_at
    seller.suspended_at = None
    seller.suspension_reason = ""
    seller.save(update_fields=["suspended_at", "suspension_reason"])
    transaction.on_commit(lambda: seller_status_email_send.delay(seller.pk))
    audit_record(
        actor=operator, action=AuditAction.SELLER_REINSTATE, target=seller, reason=reason,
        before={"suspended": True, "suspended_at": suspended_at}, after={"suspended": False},
    )
    return seller


# --- the life of a rental, as billing drives it --------------------------------------------------
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
def rentals_mark_paid(*, hours: dict[int, int]) -> None:
    """Billing charged `hours[rental_id]` more hours of each of these rentals, in one transaction
    holding their row locks (the charging run's batches): each is paid that many hours further
    than it was (than its start, the first time) and runs. One statement per number of hours,
    whatever the number of rentals. Raises `RentalEnded` (nothing marked) when one of them has
    ended or does not exist."""
    by_count: dict[int, list[int]] = {}
    for rental_id, count in hours.items():
        by_count.setdefault(count, []).append(rental_id)
    marked = 0
    for count, rental_ids in sorted(by_count.items()):
        marked += Rental.objects.filter(pk__in=rental_ids).exclude(state=RentalState.ENDED).update(
            paid_through=Coalesce("paid_through", "started_at") + count * HOUR, state=RentalState.RUNNING
        )
    if marked != len(hours):
        raise RentalEnded(_("This rental has ended."), code="rental_ended")


@transaction.atomic
def rental_end(*, rental_id: int, reason: str, at=None) -> Rental:
    """End a rental (once), give its GPUs back to its server and match the freed GPUs against
    resting bids, in one transaction. Ending again changes nothing."""
    if reason not in EndReason.values:
        raise ValueError(f"Unknown end reason {reason!r}.")
    rental = Rental.objects.select_for_update().get(pk=rental_id)
    if rental.state == RentalState.ENDED:
        return rental
    market_lock(gpu_model_id=rental.gpu_model_id)
    rental.state = RentalState.ENDED
    rental.end_reason = reason
    rental.ended_at = at or timezone.now()
    rental.save(update_fields=["state", "end_reason", "ended_at"])
    Server.objects.filter(pk=rental.server_id).update(gpus_rented=F("gpus_rented") - rental.gpus)
    market_match(gpu_model_id=rental.gpu_model_id)
    return rental


@transaction.atomic
def rental_stop(*, buyer, rental_id: int) -> Rental:
    """The buyer stops their own rental now: it ends STOPPED_BY_BUYER and its GPUs go back to the
    book at once (the hour already paid is not refunded). Raises `RentalNotFound` when the rental
    is unknown, someone else's or already ended."""
    owned = Rental.objects.filter(pk=rental_id, buyer=buyer).exclude(state=RentalState.ENDED).exists()
    if not owned:
        raise RentalNotFound(_("We could not find this rental."), code="rental_not_found")
    return rental_end(rental_id=rental_id, reason=EndReason.STOPPED_BY_BUYER)


def rentals_due(*, now: datetime):
    """Rentals billing must charge at `now`: starting ones (first hour) and running ones paid up to
    `now` or before, in id order."""
    return Rental.objects.filter(
        Q(state=RentalState.STARTING) | Q(state=RentalState.RUNNING, paid_through__lte=now)
    ).order_by("id")


def rental_hours_used(rental: Rental, now: datetime) -> int:
    """Hours of the rental begun by `now` (a begun hour counts in full): 1 from its start, 2 one
    hour later...; for an ended rental, those begun before it ended; 0 before it starts."""
    until = min(now, rental.ended_at) if rental.ended_at else now
    if until < rental.started_at:
        return 0
    used = (until - rental.started_at) // HOUR + 1
    if rental.ended_at and until == rental.ended_at and (until - rental.started_at) % HOUR == timedelta(0):
        used -= 1  # ended exactly on an hour boundary: the next hour never began
    return max(used, 0)
