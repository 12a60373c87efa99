"""What changes a server or a seller and the book together: an operator activating a server, its
seller editing it (a change of what the operator verified sends it back to review) or retiring it,
an operator suspending or reinstating a seller (and the email that tells its owners). The registry
of servers itself (registering, the fields and their rules) is the sellers app's."""

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from accounts.models import AuditAction, User
from accounts.roles import DECIDE_SELLER
from accounts.services import audit_record, operator_require, reason_require
from marketplace.emails import email_send
from sellers.exceptions import SellerStateInvalid, ServerLocked, ServerNotFound
from sellers.models import Seller, Server, ServerStatus
from sellers.selectors import seller_owners
from sellers.services import server_update

from ..matching import market_lock
from ..models import EndReason, Offer, OfferState, Rental, RentalState
from .market import market_match_notify
from .offers import offer_withdraw
from .rentals import rental_end


def _server_locked(*, server_id: int, seller_id: int | None = None) -> Server:
    """The server's row, locked, after the market lock of its GPU model (the lock order); only
    the seller's own server when `seller_id` is given. Raises ServerNotFound."""
    servers = Server.objects.filter(pk=server_id)
    if seller_id is not None:
        servers = servers.filter(seller_id=seller_id)
    gpu_model_id = servers.values_list("gpu_model_id", flat=True).first()
    if gpu_model_id is None:
        raise ServerNotFound(_("We could not find this server."))
    market_lock(gpu_model_id=gpu_model_id)
    return servers.select_for_update().get()


@transaction.atomic
def server_activate(*, server_id: int, operator: User) -> Server:
    """An operator has verified a pending server: it goes live, and its offer (if any) is matched
    against resting bids. Raises OperatorNotAllowed, ServerNotFound, ServerLocked."""
    operator_require(operator=operator, permission=DECIDE_SELLER)
    server = _server_locked(server_id=server_id)
    if server.status == ServerStatus.ACTIVE:
        return server
    if server.status != ServerStatus.PENDING:
        raise ServerLocked(
            _("Only a server pending verification can be activated."), code="server_not_pending"
        )
    server.status = ServerStatus.ACTIVE
    server.save(update_fields=["status"])
    audit_record(
        actor=operator, action=AuditAction.SERVER_ACTIVATE, target=server,
        before={"status": ServerStatus.PENDING}, after={"status": ServerStatus.ACTIVE},
    )
    market_match_notify(gpu_model_id=server.gpu_model_id)
    return server


# What the operator checked before activating a server: changing one of these needs a new review.
REVIEWED_FIELDS = ("host", "ssh_port", "region", "gpu_model_id")


@transaction.atomic
def server_edit(*, seller: Seller, server_id: int, gpu_model_id: int | None = None, **fields) -> Server:
    """The seller changes one of its servers (`sellers.services.server_update`, same fields and
    errors). When an active server's host, SSH port, region or GPU model changes, it goes back to
    pending review: its active offer is withdrawn until an operator activates it again, and its
    running rentals go on untouched. Raises ServerNotFound, ServerLocked, ServerInvalid."""
    servers = Server.objects.filter(pk=server_id, seller=seller)
    current = servers.values_list("gpu_model_id", flat=True).first()
    if current is None:
        raise ServerNotFound(_("We could not find this server."))
    for model_id in sorted({current, gpu_model_id or current}):  # lock order: markets by ascending id
        market_lock(gpu_model_id=model_id)
    locked = servers.select_for_update().get()
    before = {name: getattr(locked, name) for name in REVIEWED_FIELDS}
    server = server_update(seller=seller, server_id=server_id, gpu_model_id=gpu_model_id, **fields)
    changed = any(getattr(server, name) != value for name, value in before.items())
    if server.status == ServerStatus.ACTIVE and changed:
        offers = Offer.objects.filter(server=server, state=OfferState.ACTIVE)
        for offer_id in offers.values_list("pk", flat=True):
            offer_withdraw(offer_id=offer_id)
        server.status = ServerStatus.PENDING
        server.save(update_fields=["status"])
    return server


@transaction.atomic
def server_retire(*, seller_id: int, server_id: int) -> Server:
    """Take a server of the seller off the exchange for good: its active offer is withdrawn. Only
    a server without starting or running rentals can be retired. Retiring again changes nothing.
    Raises ServerNotFound (also for another seller's server), ServerLocked."""
    server = _server_locked(server_id=server_id, seller_id=seller_id)
    if server.status == ServerStatus.RETIRED:
        return server
    if server.gpus_rented or Rental.objects.filter(
        server=server, state__in=(RentalState.STARTING, RentalState.RUNNING)
    ).exists():
        raise ServerLocked(
            _("This server has running rentals. You can retire it once they have ended."),
            code="server_has_rentals",
        )
    for offer_id in Offer.objects.filter(server=server, state=OfferState.ACTIVE).values_list("pk", flat=True):
        offer_withdraw(offer_id=offer_id)
    server.status = ServerStatus.RETIRED
    server.save(update_fields=["status"])
    return server


@transaction.atomic
def server_retire_by_operator(*, server_id: int, operator: User, reason: str = "") -> Server:
    """An operator takes a server off the exchange, as its seller could (`server_retire`), and the
    audit log records it. Raises OperatorNotAllowed, ServerNotFound, ServerLocked."""
    operator_require(operator=operator, permission=DECIDE_SELLER)
    server = Server.objects.filter(pk=server_id).first()
    if server is None:
        raise ServerNotFound(_("We could not find this server."))
    before = server.status
    server = server_retire(seller_id=server.seller_id, server_id=server_id)
    if before != server.status:
        audit_record(
            actor=operator, action=AuditAction.SERVER_RETIRE, target=server, reason=(reason or "").strip(),
            before={"status": before}, after={"status": server.status},
        )
    return server


@dataclass(frozen=True)
class ServerFailed:
    """What a server failure changed in the book: the offer withdrawn, the rentals ended."""

    withdrawn_offer_id: int | None
    ended_rental_ids: list[int]


@transaction.atomic
def server_failure_apply(*, server_id: int, rentals: list[Rental], at: datetime) -> ServerFailed:
    """The market side of a server that failed at `at`: its active offer is withdrawn, then each
    of `rentals` (its starting or running rentals, locked by the caller, which refunds them) ends
    with reason "server failure". The server's status is left to operators."""
    # The offer goes first: ending the rentals frees their GPUs and matches them against resting
    # bids, which must not find this server any more.
    offer = Offer.objects.filter(server_id=server_id, state=OfferState.ACTIVE).only("id").first()
    if offer is not None:
        offer_withdraw(offer_id=offer.pk)
    for rental in rentals:
        rental_end(rental_id=rental.pk, reason=EndReason.SERVER_FAILURE, at=max(at, rental.started_at))
    return ServerFailed(
        withdrawn_offer_id=offer.pk if offer is not None else None,
        ended_rental_ids=[rental.pk for rental in rentals],
    )


# --- sellers, as operators decide ----------------------------------------------------------------


@transaction.atomic
def seller_suspend(*, seller_id: int, operator: User, reason: str) -> Seller:
    """Suspend a seller: every active offer of its servers is withdrawn and it can post none until
    reinstated; rentals already running continue and are charged as usual. Its owners are told by
    email. Raises `OperatorNotAllowed`, `ReasonRequired`, `SellerStateInvalid` (already
    suspended)."""
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
    _seller_status_email(seller=seller, event="seller-suspended", suspended_at=seller.suspended_at)
    audit_record(
        actor=operator, action=AuditAction.SELLER_SUSPEND, target=seller, reason=reason,
        before={"suspended": False, "active_offers": offer_ids},
        after={"suspended": True, "active_offers": [], "withdrawn_offers": offer_ids},
    )
    return seller


@transaction.atomic
def seller_reinstate(*, seller_id: int, operator: User, reason: str) -> Seller:
    """Lift a suspension: the seller may post offers again (withdrawn ones are not restored). Its
    owners are told by email. Raises `OperatorNotAllowed`, `ReasonRequired`, `SellerStateInvalid`
    (not suspended)."""
    operator_require(operator=operator, permission=DECIDE_SELLER)
    reason = reason_require(reason)
    seller = Seller.objects.select_for_update().get(pk=seller_id)
    if seller.suspended_at is None:
        raise SellerStateInvalid(_("This seller is not suspended."), code="not_suspended")
    suspended_at = seller.suspended_at
    seller.suspended_at = None
    seller.suspension_reason = ""
    seller.save(update_fields=["suspended_at", "suspension_reason"])
    _seller_status_email(seller=seller, event="seller-reinstated", suspended_at=suspended_at)
    audit_record(
        actor=operator, action=AuditAction.SELLER_REINSTATE, target=seller, reason=reason,
        before={"suspended": True, "suspended_at": suspended_at}, after={"suspended": False},
    )
    return seller


def _seller_status_email(*, seller: Seller, event: str, suspended_at: datetime) -> None:
    """Tell the seller's owners, each in their language, that EverXCloud suspended or reinstated the
    account, in the transaction that did it. One key per owner and per suspension (its start), so
    each suspension and its lifting is told once."""
    for owner in seller_owners(seller_id=seller.pk):
        email_send(
            template="exchange/email/seller_status", user=owner, context={"seller": seller},
            key=f"{event}:{seller.pk}:{suspended_at.isoformat()}:{owner.pk}",
        )
