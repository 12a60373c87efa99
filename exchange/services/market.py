"""The market: the matching pass every change of the book runs, opening and closing, and the
preview of what opening would trade."""

import logging
from dataclasses import dataclass
from decimal import Decimal

from django.db import transaction
from django.db.models import F
from django.urls import reverse

from accounts.models import AuditAction
from accounts.roles import OPERATE_MARKET
from accounts.services import audit_record, operator_require
from catalog.models import GpuModel
from marketplace import formatting
from marketplace.emails import absolute_url, email_send

from ..matching import MatchResult, market_match
from ..models import Bid, Market, Rental

logger = logging.getLogger(__name__)


def market_match_notify(
    *, gpu_model_id: int, incoming_bid_id: int | None = None, incoming_offer_id: int | None = None,
    **known,
) -> MatchResult:
    """Run one matching pass (`exchange.matching.market_match`, which `known` is passed to) and, in
    the same transaction, write the email of each buyer whose bid it cancelled because they could
    not pay the first hour. The taker's buyer is not emailed: they hear it in the answer to their
    own order."""
    result = market_match(
        gpu_model_id=gpu_model_id, incoming_bid_id=incoming_bid_id, incoming_offer_id=incoming_offer_id,
        **known,
    )
    told = [bid_id for bid_id in result.cancelled_bid_ids if bid_id != incoming_bid_id]
    if not told:
        return result
    for bid in Bid.objects.filter(pk__in=told).select_related("buyer__profile", "gpu_model").order_by("id"):
        _bid_cancelled_email(bid=bid)
    return result


def _bid_cancelled_email(*, bid: Bid) -> None:
    """Tell the buyer, in their language, that their bid was cancelled because their balance no
    longer covered its first hour."""
    email_send(
        template="exchange/email/bid_cancelled", user=bid.buyer, key=f"bid-cancelled:{bid.pk}",
        context=lambda: {
            "bid": bid, "price": formatting.usd(bid.max_price_usd),
            "top_up_url": absolute_url(reverse("billing:top-up")),
        },
    )


def _market_state_set(*, is_open: bool, operator, reason: str) -> None:
    """Set the state; an operator's change is checked against their role and audited with it."""
    if operator is not None:
        operator_require(operator=operator, permission=OPERATE_MARKET)
    market = Market.objects.select_for_update().filter(pk=Market.SINGLETON_ID).first()
    was_open = bool(market and market.is_open)
    market, _created = Market.objects.update_or_create(
        pk=Market.SINGLETON_ID, defaults={"is_open": is_open, "version": F("version") + 1},
        create_defaults={"is_open": is_open, "version": 1},
    )
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
            rentals.extend(market_match_notify(gpu_model_id=gpu_model_id).rentals)
    return rentals


def market_reliability_changed(*, gpu_model_ids) -> list[Rental]:
    """After the reliability of servers of these GPU models changed (`reliability_refresh`, once its
    scores are committed): run a matching pass for each model, so that a resting bid whose minimum
    a server now meets can trade, and so bump each book's version, so that no cached page shows
    the old scores. Each model in its own transaction, by ascending id, after the scores' commit:
    the scores are written under server rows, which come after the market lock in the lock order,
    and a page cached between that commit and this bump is dropped by it. Returns the rentals made
    (billing charges their first hour in its next run)."""
    rentals: list[Rental] = []
    for gpu_model_id in sorted({int(model_id) for model_id in gpu_model_ids}):
        with transaction.atomic():
            rentals.extend(market_match_notify(gpu_model_id=gpu_model_id).rentals)
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
    nothing is kept (and no email is queued). Bids placed after the preview can change the
    outcome; the confirmation page says so."""
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
