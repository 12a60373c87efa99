"""Reads of sellers, their members, applications and the server registry, each scoped to one seller
or one user. A seller's offers and rentals are the exchange's (`exchange.selectors`)."""

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from allauth.account.models import EmailAddress
from allauth.mfa.utils import is_mfa_enabled
from django.conf import settings
from django.db import models
from django.db.models import Count, OuterRef, Q, Subquery
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from accounts.models import User
from accounts.tokens import token_secret_hash

from .isolation import FACTS, LEVELS_BY_STRENGTH, IsolationLevel, Reserves, level_shortfall
from .models import (
    OPEN_APPLICATION_STATUSES,
    AgentToken,
    ApplicationStatus,
    ContainerTemplate,
    MemberRole,
    Seller,
    SellerApplication,
    SellerInvitation,
    SellerMembership,
    Server,
    ServerAgent,
    ServerAvailabilityDay,
    ServerEvent,
    ServerEventKind,
    ServerIsolationReport,
    ServerStatus,
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


def seller_owners(*, seller_id: int):
    """The users who own a seller, with their profiles (their language, for what they are told)."""
    return User.objects.filter(
        seller_memberships__seller_id=seller_id, seller_memberships__role=MemberRole.OWNER
    ).select_related("profile").order_by("pk")


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


# --- the host agent, as the seller portal shows it ------------------------------------------------

EVENTS_SHOWN = 20


class AgentState(models.TextChoices):
    """What the seller's portal says about a server's agent, from its last heartbeat."""

    NEVER = "never", _("No agent yet")
    ONLINE = "online", _("Online")
    UNREACHABLE = "unreachable", _("Unreachable")
    SILENT = "silent", _("Not heard from lately")


def agent_state_of(*, agent: ServerAgent | None, now: datetime) -> AgentState:
    """Never enrolled (no heartbeat ever); unreachable once the failure check judged it so (the
    next heartbeat clears that); online while its last heartbeat is recent; else silent (no
    rental was at stake, so nobody judged it, but it has not been heard from)."""
    if agent is None:
        return AgentState.NEVER
    if agent.unreachable_since is not None:
        return AgentState.UNREACHABLE
    if now - agent.last_heartbeat_at <= timedelta(seconds=settings.AGENT_UNREACHABLE_SECONDS):
        return AgentState.ONLINE
    return AgentState.SILENT


def server_agents_for_seller(*, seller_id: int) -> dict[int, ServerAgent]:
    """The agents of the seller's servers that ever reported, by server id. One query."""
    return {
        agent.server_id: agent
        for agent in ServerAgent.objects.filter(server__seller_id=seller_id).only(
            "server_id", "last_heartbeat_at", "unreachable_since", "mismatch"
        )
    }


@dataclass(frozen=True)
class AvailabilityDay:
    day: date
    listed_minutes: int
    heard_minutes: int

    @property
    def share(self) -> Decimal | None:
        """Of the minutes listed, the share with heartbeats; None on a day it was not listed."""
        if not self.listed_minutes:
            return None
        return (Decimal(self.heard_minutes) / Decimal(self.listed_minutes)).quantize(Decimal("0.001"))


def server_availability_days(*, server_id: int, today: date, days: int) -> list[AvailabilityDay]:
    """The server's last `days` days, newest first, every day present (zero minutes on a day the
    failure check counted nothing). One query."""
    first = today - timedelta(days=days - 1)
    counted = {
        row.day: row
        for row in ServerAvailabilityDay.objects.filter(server_id=server_id, day__gte=first, day__lte=today)
    }
    result = []
    for offset in range(days):
        day = today - timedelta(days=offset)
        row = counted.get(day)
        listed, heard = (row.listed_minutes, row.heard_minutes) if row else (0, 0)
        result.append(AvailabilityDay(day=day, listed_minutes=listed, heard_minutes=heard))
    return result


@dataclass(frozen=True)
class ServerAgentView:
    """Everything the server's agent page shows."""

    server: Server  # with its GPU model
    agent: ServerAgent | None
    state: AgentState
    token: AgentToken | None  # the live one
    events: list[ServerEvent]  # newest first, EVENTS_SHOWN at most
    availability: list[AvailabilityDay]  # newest first

    @property
    def clock_skewed(self) -> bool:
        limit = settings.AGENT_CLOCK_SKEW_SECONDS
        return self.agent is not None and abs(self.agent.clock_skew_seconds) > limit


def server_agent_view(*, seller: Seller, server_id: int, now: datetime) -> ServerAgentView | None:
    """The agent of one of the seller's servers, or None when the server is not the seller's.
    Four queries, whatever the number of events, GPUs or days."""
    server = servers_for_seller(seller=seller).select_related("agent").filter(pk=server_id).first()
    if server is None:
        return None
    agent = getattr(server, "agent", None)  # the reverse one-to-one raises when there is none
    return ServerAgentView(
        server=server,
        agent=agent,
        state=agent_state_of(agent=agent, now=now),
        token=agent_token_live(server_id=server.pk),
        events=list(ServerEvent.objects.filter(server=server)[:EVENTS_SHOWN]),
        availability=server_availability_days(
            server_id=server.pk, today=timezone.localdate(now), days=settings.RELIABILITY_DAYS
        ),
    )


def agent_token_live(*, server_id: int) -> AgentToken | None:
    """The server's live agent token (one at most), or None."""
    return AgentToken.objects.filter(server_id=server_id, revoked_at__isnull=True).first()


@dataclass(frozen=True)
class AgentTrouble:
    """For the operations page: servers whose agent went silent with rentals at stake, and servers
    whose agent sees something other than the registration; the oldest first, `limit` of each."""

    unreachable: list[ServerAgent]  # with server, seller and GPU model
    mismatched: list[ServerAgent]
    unreachable_count: int
    mismatched_count: int


def agents_in_trouble(*, limit: int = 50) -> AgentTrouble:
    """Retired servers are left out: nothing is sold on them any more. Three queries."""
    live = ServerAgent.objects.exclude(server__status=ServerStatus.RETIRED)
    silent, differs = Q(unreachable_since__isnull=False), ~Q(mismatch=[])
    counts = live.aggregate(unreachable=Count("pk", filter=silent), mismatched=Count("pk", filter=differs))
    shown = live.select_related("server__seller", "server__gpu_model")
    return AgentTrouble(
        unreachable=list(shown.filter(silent).order_by("unreachable_since", "server_id")[:limit]),
        mismatched=list(shown.filter(differs).order_by("last_heartbeat_at", "server_id")[:limit]),
        unreachable_count=counts["unreachable"], mismatched_count=counts["mismatched"],
    )


# How far back the operations page looks for servers whose isolation level fell.
ISOLATION_DROP_DAYS = 7
# An ISOLATION_CHANGED event from a stronger level to a weaker one (sellers.isolation's order).
ISOLATION_DROPPED = Q()
for _position, _stronger in enumerate(LEVELS_BY_STRENGTH):
    for _weaker in LEVELS_BY_STRENGTH[_position + 1:]:
        ISOLATION_DROPPED |= Q(detail__from=_stronger.value, detail__to=_weaker.value)


@dataclass(frozen=True)
class IsolationTrouble:
    """For the operations page: servers whose isolation level fell in the last ISOLATION_DROP_DAYS
    (`dropped_at`, `dropped_from` and its `dropped_from_label`: the latest fall; `dropped_why`:
    what the report in force lacks for that level) or whose device locks are distrusted until an
    operator trusts them again (`devices_held_at`); the newest first, `limit` of them."""

    servers: list[Server]  # with seller
    count: int


def isolation_in_trouble(*, now: datetime | None = None, limit: int = 50) -> IsolationTrouble:
    """Retired servers are left out. Two queries."""
    now = now or timezone.now()
    drops = ServerEvent.objects.filter(
        ISOLATION_DROPPED, server=OuterRef("pk"), kind=ServerEventKind.ISOLATION_CHANGED,
        at__gte=now - timedelta(days=ISOLATION_DROP_DAYS),
    ).order_by("-at", "-id")
    servers = Server.objects.exclude(status=ServerStatus.RETIRED).annotate(
        dropped_at=Subquery(drops.values("at")[:1]),
    ).filter(Q(dropped_at__isnull=False) | Q(devices_held_at__isnull=False))
    in_force = ServerIsolationReport.objects.filter(
        server=OuterRef("pk"), digest=OuterRef("agent__isolation_digest")
    ).order_by("-received_at", "-id")
    shown = servers.select_related("seller").annotate(
        dropped_from=Subquery(drops.values("detail__from")[:1]),
        report_in_force=Subquery(in_force.values("report")[:1], output_field=models.JSONField()),
    ).order_by(models.F("dropped_at").desc(nulls_last=True), "-devices_held_at", "pk")
    listed = list(shown[:limit])
    reserves = Reserves.of_settings()
    for server in listed:
        server.dropped_from_label = IsolationLevel(server.dropped_from).label if server.dropped_from else ""
        server.dropped_why = level_shortfall(
            server.dropped_from, report=server.report_in_force, server_id=server.pk,
            gpu_count=server.gpu_count, reserves=reserves, toolkit_minimum=settings.CONTAINER_TOOLKIT_MINIMUM,
            devices_held=server.devices_held_at is not None,
        ) if server.dropped_from and server.report_in_force is not None else []
    return IsolationTrouble(servers=listed, count=servers.count())


# --- a server's isolation, as its seller reads it -------------------------------------------------

# What a seller's admin runs on the server for a fact its agent did not measure to hold: the agent's
# `harden` prints why and the fix, `--apply` writes what it can (the driver's modprobe options,
# the sshd drop-in, cron.deny and at.deny). MIG is turned off with the driver's own tool.
HARDEN = "sudo everx-agent harden"
HARDEN_APPLY = "sudo everx-agent harden --apply"
HARDEN_COMMANDS = {
    "driver_keeps_permissions": HARDEN_APPLY,
    "host_login_closed": HARDEN_APPLY,
    "mig_enabled": "sudo nvidia-smi -mig 0",
}


@dataclass(frozen=True)
class IsolationFact:
    name: str
    label: str
    holds: bool  # as a buyer wants it: MIG holds when it is off
    command: str  # what fixes it; "" when it holds


@dataclass(frozen=True)
class IsolationChecklist:
    """The latest isolation report of a server, fact by fact (sellers.isolation.FACTS' order)."""

    received_at: datetime
    facts: list[IsolationFact]


def server_isolation_checklist(*, seller: Seller, server_id: int) -> IsolationChecklist | None:
    """The seller's server's isolation report in force (the one its agent's digest names), or
    None when its agent sends none. One query."""
    report = (
        ServerIsolationReport.objects.filter(
            server_id=server_id, server__seller=seller, server__agent__isolation_digest=models.F("digest")
        )
        .order_by("-received_at", "-id").only("received_at", "report").first()
    )
    if report is None:
        return None
    facts = []
    for name, label in FACTS.items():
        measured = bool(report.report["facts"].get(name))
        holds = not measured if name == "mig_enabled" else measured
        facts.append(IsolationFact(name=name, label=label, holds=holds,
                                   command="" if holds else HARDEN_COMMANDS.get(name, HARDEN)))
    return IsolationChecklist(received_at=report.received_at, facts=facts)


def container_templates_published() -> list[ContainerTemplate]:
    """The container templates buyers may choose, in the operators' order, the default first
    among equals. One query."""
    return list(ContainerTemplate.objects.filter(published=True).order_by("position", "-is_default", "slug"))


def container_template_default(templates: list[ContainerTemplate]) -> ContainerTemplate | None:
    """Of the published templates, the one an order runs when it names none: the operators'
    default, else the first; None when none is published."""
    first = templates[0] if templates else None
    return next((template for template in templates if template.is_default), first)
