"""Reads of sellers, their members, applications and the server registry, each scoped to one seller
or one user. A seller's offers and rentals are the exchange's (`exchange.selectors`)."""

from dataclasses import dataclass

from allauth.account.models import EmailAddress
from allauth.mfa.utils import is_mfa_enabled
from django.db.models import Q

from accounts.tokens import token_secret_hash

from .models import (
    OPEN_APPLICATION_STATUSES,
    AgentToken,
    ApplicationStatus,
    MemberRole,
    Seller,
    SellerApplication,
    SellerInvitation,
    SellerMembership,
    Server,
)


def seller_for_member(*, user) -> Seller | None:
    """The seller the user works for (the oldest membership), or None."""
    if not user.is_authenticated:
        return None
    return Seller.objects.filter(memberships__user=user).order_by("memberships__created_at").first()


def seller_for_api_token_user(*, user) -> Seller | None:
    """The seller a `sell` token of this user acts for: theirs while they are a member with
    two-factor authentication, else None."""
    if not is_mfa_enabled(user):
        return None
    return seller_for_member(user=user)


def seller_api_token_allowed(*, token) -> bool:
    """A `sell` token acts only while its user is still a member of its seller with two-factor
    authentication."""
    if not token.can_sell or token.seller_id is None or not is_mfa_enabled(token.user):
        return False
    return SellerMembership.objects.filter(seller_id=token.seller_id, user_id=token.user_id).exists()


def servers_for_seller(*, seller: Seller):
    """The seller's servers (retired ones too), newest first, with their GPU model loaded."""
    return Server.objects.filter(seller=seller).select_related("gpu_model").order_by("-pk")


def server_get_for_seller(*, seller: Seller, server_id: int) -> Server | None:
    return servers_for_seller(seller=seller).filter(pk=server_id).first()


def application_latest_for(*, applicant) -> SellerApplication | None:
    """The user's open application, or else their latest decided one: never anyone else's."""
    applications = SellerApplication.objects.filter(applicant=applicant)
    return (
        applications.filter(status__in=OPEN_APPLICATION_STATUSES).first()
        or applications.order_by("-created_at").first()
    )


@dataclass(frozen=True)
class ApplicationState:
    """What the applicant's page shows and lets them do."""

    application: SellerApplication | None  # the open application, else the latest decided one
    draft: SellerApplication | None  # the application the form edits; None: a new one
    editable: bool  # whether the applicant may save (and submit) now


def application_state_for(*, applicant) -> ApplicationState:
    """A first-time or rejected applicant starts a new application; a draft, or one an operator
    asked about, is edited; a submitted or approved one is read-only."""
    application = application_latest_for(applicant=applicant)
    draft = application if application is not None and application.is_editable else None
    editable = (
        application is None or draft is not None or application.status == ApplicationStatus.REJECTED
    )
    return ApplicationState(application=application, draft=draft, editable=editable)


def is_owner(*, seller: Seller, user) -> bool:
    return SellerMembership.objects.filter(seller=seller, user=user, role=MemberRole.OWNER).exists()


def members_for_seller(*, seller: Seller):
    return SellerMembership.objects.filter(seller=seller).select_related("user").order_by("created_at")


def invitations_open_for_seller(*, seller: Seller):
    return SellerInvitation.objects.filter(seller=seller, accepted_at__isnull=True).order_by("created_at")


def invitations_for_user(*, user):
    """Invitations to one of the user's verified email addresses (open or accepted), oldest first,
    with their seller. None at all for an address the user has not confirmed."""
    if not user.is_authenticated:
        return SellerInvitation.objects.none()
    emails = EmailAddress.objects.filter(user=user, verified=True).values_list("email", flat=True)
    query = Q(pk__in=[])
    for email in emails:
        query |= Q(email__iexact=email)
    return SellerInvitation.objects.filter(query).select_related("seller").order_by("created_at")


def invitation_open_for_user(*, user, invitation_id: int | None = None) -> SellerInvitation | None:
    """The user's open invitation (this one when `invitation_id` is given, else the oldest), or
    None: unknown, accepted, or sent to an address the user has not confirmed."""
    invitations = invitations_for_user(user=user).filter(accepted_at__isnull=True)
    if invitation_id is not None:
        invitations = invitations.filter(pk=invitation_id)
    return invitations.first()


def agent_token_find(*, secret: str) -> AgentToken | None:
    """The live agent token with this secret, with its server (and the server's GPU model and
    agent row, when it has one), or None: unknown, revoked, or not an agent token at all. One query."""
    if not secret.startswith("evxa_") or len(secret) > 100:
        return None
    return (
        AgentToken.objects.filter(key_hash=token_secret_hash(secret), revoked_at__isnull=True)
        .select_related("server__gpu_model", "server__agent")
        .first()
    )
