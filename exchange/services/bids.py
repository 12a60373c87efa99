"""Buyers' bids: placing (with every rule a bid must meet), cancelling and expiring."""

import functools
import re
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from uuid import UUID

from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from catalog.models import GpuModel
from marketplace.sql import ModelColumns, instance_insert, prepared_cursor
from sellers.isolation import ANY_LEVEL, LEVEL_SETS, IsolationLevel, levels_text
from sellers.models import ContainerTemplate, Region, Server, ServerStatus
from sellers.selectors import container_template_default, container_templates_published

from .. import payments
from ..exceptions import BidNotFound, BidNotOpen, BidRejected, SshKeyInvalid
from ..matching import market_lock
from ..models import BID_GPU_COUNTS, Bid, BidCancelReason, BidState, Rental, TimeInForce
from ..payments import FirstHourCheck
from ..selectors import market_is_open
from ..ssh_keys import ssh_public_key_validate
from .market import market_match_notify
from .offers import price_message, price_problem

MAX_BID_HOURS = 24 * 366
# A bid's minimum reliability is a share from 0 to 1 with the places servers' scores have.
RELIABILITY_PLACES = Decimal("0.001")
SHARE_TEXT = re.compile(r"[0-9]{1,4}(\.[0-9]{1,8})?", re.ASCII)


@dataclass(frozen=True)
class BidPlaced:
    """The bid as it stands after placing it, and the rental when it matched at once."""

    bid: Bid
    rental: Rental | None
    earlier: bool = False  # the bid of an earlier sending of the same form: nothing placed now


def _placed(bid: Bid) -> BidPlaced:
    rental = Rental.objects.filter(bid=bid).first() if bid.state == BidState.FILLED else None
    return BidPlaced(bid=bid, rental=rental, earlier=True)


def bid_placed_for_form(*, buyer, form_token: UUID) -> BidPlaced | None:
    """The buyer's bid of this form, as `bid_place` returns it for a second sending; None if none."""
    earlier = Bid.objects.filter(buyer=buyer, form_token=form_token).first()
    return _placed(earlier) if earlier is not None else None


def bid_terms_check(
    *, gpus: int, max_price_usd: Decimal, hours: int | None, min_reliability: Decimal | None = None
) -> None:
    """The rules of a bid's own terms, which need nothing from the database: the price (tick and
    range), the GPUs (1, 2, 4 or 8), the hours and the minimum reliability. Raises `BidRejected`.
    The trade page's cost preview asks this before it shows a cost; `bid_place` checks it with the
    rest."""
    problem = price_problem(max_price_usd)
    if problem:
        raise BidRejected(price_message(problem), code=problem)
    order_terms_check(gpus=gpus, hours=hours, min_reliability=min_reliability)


def min_reliability_message() -> str:
    """What a minimum reliability must be: the refusal of any other value, also of text that is
    no number at all (the forms and the API say it the same way)."""
    return _("The minimum reliability must be a share from 0 to 1 with at most 3 decimals, "
             "such as 0.95, or empty for any server.")


def min_reliability_check(min_reliability: Decimal | None) -> None:
    """A bid's minimum reliability: None (any server), or a share from 0 to 1 with at most three
    decimals (0.95 for 95 %). Raises `BidRejected` (`min_reliability_invalid`)."""
    if min_reliability is None:
        return
    value = min_reliability
    if (
        not isinstance(value, Decimal) or not value.is_finite() or not 0 <= value <= 1
        or value != value.quantize(RELIABILITY_PLACES)
    ):
        raise BidRejected(min_reliability_message(), code="min_reliability_invalid")


def min_reliability_parse(text: str | None) -> Decimal | None:
    """A minimum reliability sent as text ("0.95"; empty or None for any server), checked
    (`min_reliability_check`). Raises `BidRejected` (`min_reliability_invalid`), also for text
    that is no number."""
    if text is None or not text.strip():
        return None
    if not SHARE_TEXT.fullmatch(text.strip()):  # no sign, exponent, NaN or digits of other scripts
        raise BidRejected(min_reliability_message(), code="min_reliability_invalid")
    value = Decimal(text.strip())
    min_reliability_check(value)
    return value


def order_terms_check(
    *, gpus: int, hours: int | None, region: str = "", min_reliability: Decimal | None = None
) -> None:
    """The rules of an order's terms before it has a price (a quote asks them): the GPUs (1, 2, 4
    or 8), the hours, the region and the minimum reliability. Raises `BidRejected`."""
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
    min_reliability_check(min_reliability)


def isolation_levels_message() -> str:
    """What a bid's accepted isolation levels must be: the refusal of anything else."""
    return _("Choose at least one isolation level: container, shared server or whole server.")


def isolation_levels_parse(values) -> str:
    """The isolation levels a bid accepts, from a list of level values ("container", "shared",
    "whole"; None for all of them), as stored on the bid (`sellers.isolation.levels_text`). Raises
    `BidRejected` (`isolation_levels_invalid`) for an empty list, an unknown value or anything that
    is not a list of texts."""
    if values is None:
        return ANY_LEVEL
    if (
        isinstance(values, str) or not isinstance(values, list | tuple) or not values
        or len(values) > len(IsolationLevel.values)
        or not all(isinstance(value, str) and value in IsolationLevel.values for value in values)
    ):
        raise BidRejected(isolation_levels_message(), code="isolation_levels_invalid")
    return levels_text(values)


def container_template_message() -> str:
    return _("Choose one of the container templates listed.")


def container_template_choose(slug: str | None) -> ContainerTemplate | None:
    """The published template an order names by its short name, the operators' default when it
    names none (None: none is published). Raises `BidRejected` (`template_invalid`) for a name
    no published template has."""
    templates = container_templates_published()
    if slug is None or slug == "":
        return container_template_default(templates)
    chosen = next((template for template in templates if template.slug == slug), None)
    if chosen is None:
        raise BidRejected(container_template_message(), code="template_invalid")
    return chosen


# Longer than any list of the levels, commas and repeats included: a filter beyond it is refused unread.
ISOLATION_FILTER_MAX = 64


def isolation_filter_parse(values: list[str]) -> str | None:
    """The levels a page or a list filters offers by, from the values of its `isolation` query
    parameter (`?isolation=container&isolation=whole` or `?isolation=container,whole`): None when
    it has none (no filter), else as `isolation_levels_parse` returns them. Raises `BidRejected`
    (`isolation_levels_invalid`) for an empty value, an unknown level or a value too long."""
    if not values:
        return None
    if sum(len(value) for value in values) > ISOLATION_FILTER_MAX:
        raise BidRejected(isolation_levels_message(), code="isolation_levels_invalid")
    return isolation_levels_parse(sorted({part for value in values for part in value.split(",")}))


@dataclass(frozen=True)
class _Context:
    """What placing a bid reads first, in one query: the GPU model (None if unknown), its largest
    active server's GPU count (None without one) and the id of the buyer's bid of the same form."""

    gpu_model: GpuModel | None
    largest: int | None
    earlier_id: int | None


_GPU_MODEL = ModelColumns(GpuModel, "g")


@functools.cache
def _context_sql() -> str:
    """Written once per process from the models' metadata: the ORM compiled this query afresh on
    every order, which cost several times more than running it."""
    server, bid = Server._meta.db_table, Bid._meta.db_table
    return (
        f"SELECT {_GPU_MODEL.select()}, "  # noqa: S608 (table and column names from the models)
        f"(SELECT max(s.gpu_count) FROM {server} s WHERE s.gpu_model_id = g.id AND s.status = %s), "
        f"(SELECT b.id FROM {bid} b WHERE b.buyer_id = %s AND b.form_token = %s LIMIT 1) "
        f"FROM (SELECT %s AS id) asked LEFT JOIN {GpuModel._meta.db_table} g ON g.id = asked.id"
    )


def _context_read(*, buyer, gpu_model_id: int, form_token: UUID) -> _Context:
    token = Bid._meta.get_field("form_token").get_db_prep_value(form_token, connection)
    with prepared_cursor() as cursor:
        cursor.execute(_context_sql(), [ServerStatus.ACTIVE, buyer.pk, token, int(gpu_model_id)])
        row = cursor.fetchone()
    gpu_model = _GPU_MODEL.instance(row[: len(_GPU_MODEL)])
    largest, earlier_id = row[len(_GPU_MODEL):]
    return _Context(gpu_model=gpu_model, largest=largest, earlier_id=earlier_id)


def _gpus_available_check(*, context: _Context, gpus: int) -> None:
    if context.gpu_model is None:
        raise BidRejected(_("We do not list this GPU."), code="gpu_model_unknown")
    largest = context.largest
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


def _bid_validate(
    *, context: _Context, payable: FirstHourCheck, gpus: int, max_price_usd: Decimal, region: str,
    hours: int | None, time_in_force: str, expires_at: datetime | None, ssh_public_key: str, now: datetime,
    min_reliability: Decimal | None,
) -> str:
    """Refuse a bid that cannot be placed, before anything is written; returns the normalised key."""
    if time_in_force not in TimeInForce.values:
        raise BidRejected(_("Choose how long the order stays in the book."), code="time_in_force_unknown")
    bid_terms_check(gpus=gpus, max_price_usd=max_price_usd, hours=hours, min_reliability=min_reliability)
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
    _gpus_available_check(context=context, gpus=gpus)
    if not payable(price_usd=Decimal(max_price_usd), gpus=gpus):
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
    min_reliability: Decimal | None = None,
    isolation_levels: str = ANY_LEVEL,
    container_template: ContainerTemplate | None = None,
    first_hour_payable: FirstHourCheck | None = None,
) -> BidPlaced:
    """Place a bid for `gpus` GPUs of one model on one server at up to `max_price_usd` per GPU-hour,
    and match it at once if the market is open (it pays the offer's price).

    BUY_NOW fills at once or is cancelled (NOT_FILLED) and is refused while the market is closed;
    BID rests in the book until filled, cancelled or `expires_at`. The same `form_token` again (also
    at the same moment) returns the first bid and its rental (`earlier`). Returns
    `BidPlaced(bid, rental)`, the rental when this bid matched (billing then charges its first
    hour), with its server and GPU model. With `min_reliability` (a share from 0 to 1), it matches
    only offers of servers at least that reliable; "new" servers, without a score yet, do not
    qualify. `isolation_levels` (as `isolation_levels_parse` returns them): only servers sold at
    one of these levels fill it; `container_template` (`container_template_choose`'s): at a server
    sold as "container", only one whose agent holds it, and the rental's container runs it.
    Raises `BidRejected` (nothing written).

    `first_hour_payable(price_usd=, gpus=)`: the caller's own answer to whether the buyer can pay
    the first hour (billing's order, which locked the buyer's wallet in its transaction), asked
    instead of the registered check. The bid is then written in the caller's transaction without
    a savepoint of its own, and a second bid of the same form at the same moment raises the
    `IntegrityError` of its unique constraint to the caller, whose transaction is lost."""
    in_callers = first_hour_payable is not None
    context = _context_read(buyer=buyer, gpu_model_id=gpu_model_id, form_token=form_token)
    if context.earlier_id is not None:
        return _placed(Bid.objects.get(pk=context.earlier_id))
    now = timezone.now()
    payable = first_hour_payable or functools.partial(payments.first_hour_payable, buyer_id=buyer.pk)
    if isolation_levels not in LEVEL_SETS:
        raise BidRejected(isolation_levels_message(), code="isolation_levels_invalid")
    if IsolationLevel.CONTAINER not in isolation_levels.split(","):
        container_template = None  # it runs in no container
    key = _bid_validate(
        context=context, payable=payable, gpus=gpus, max_price_usd=max_price_usd, region=region, hours=hours,
        time_in_force=time_in_force, expires_at=expires_at, ssh_public_key=ssh_public_key, now=now,
        min_reliability=min_reliability,
    )
    if expires_at is not None and timezone.is_naive(expires_at):
        expires_at = timezone.make_aware(expires_at)
    fields = {
        "buyer": buyer, "gpus": gpus, "max_price_usd": max_price_usd, "region": region or "", "hours": hours,
        "expires_at": expires_at, "ssh_public_key": key, "form_token": form_token,
        "min_reliability": min_reliability, "isolation_levels": isolation_levels,
        "container_template": container_template,
    }
    if in_callers:
        with transaction.atomic(savepoint=False):
            return _bid_write(gpu_model=context.gpu_model, time_in_force=time_in_force, **fields)
    try:
        with transaction.atomic():
            return _bid_write(gpu_model=context.gpu_model, time_in_force=time_in_force, **fields)
    except IntegrityError:
        # The same form at the same moment: its transaction rolled back whole, the first one stands.
        placed = bid_placed_for_form(buyer=buyer, form_token=form_token)
        if placed is None:
            raise
        return placed


def _bid_write(*, gpu_model: GpuModel, time_in_force: str, max_price_usd: Decimal, **fields) -> BidPlaced:
    """Write the validated bid and match it, in the caller's transaction (no savepoint: a second
    bid of the same form fails on its unique constraint and `bid_place` reads the first)."""
    # Under the market lock, so that a market opening at this moment sees this bid (see
    # `market_open`).
    market_lock(gpu_model_id=gpu_model.pk)
    is_open = market_is_open()
    if time_in_force == TimeInForce.BUY_NOW and not is_open:
        raise BidRejected(
            _("The market is closed: nothing can be bought now. You can place a bid that waits "
              "in the book until the market opens."),
            code="market_closed",
        )
    bid = Bid(gpu_model=gpu_model, time_in_force=time_in_force, max_price_usd=max_price_usd, **fields)
    instance_insert(bid)
    rental = None
    if is_open:
        # The lock is held and the market open; the buyer was found able to pay the first hour at
        # the bid's maximum price a moment ago (`_bid_validate`).
        result = market_match_notify(
            gpu_model_id=gpu_model.pk, incoming_bid_id=bid.pk, locked_open=True,
            taker_payable_usd=Decimal(max_price_usd),
        )
        rental = next((made for made in result.rentals if made.bid_id == bid.pk), None)
        if rental is not None:
            bid.state = BidState.FILLED
            rental.gpu_model = gpu_model
        elif bid.pk in result.cancelled_bid_ids:
            bid.refresh_from_db()
    if bid.state == BidState.OPEN and time_in_force == TimeInForce.BUY_NOW:
        bid.state, bid.cancel_reason = BidState.CANCELLED, BidCancelReason.NOT_FILLED
        bid.save(update_fields=["state", "cancel_reason", "updated_at"])
    return BidPlaced(bid=bid, rental=rental)


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
