"""The exchange's side of the agents' isolation reports (sellers.isolation, docs/agent.md): a
changed report stored and its server's level derived again, a report refused, the device locks the
agent repaired, an operator trusting them again, and what a level change does to the book.

A report is stored only when its digest changes: an unchanged one costs the heartbeat nothing.
Lock order of a change, as exchange.services.agent_watch's: the agent's row (its digest), then the
market lock of the server's GPU model, then the server's row. A level that falls to "whole server"
withdraws the server's offers of fewer than all its GPUs; rentals sold with a stronger level than
their server now has, and sharing it, are ended by billing's agents check (`rentals_isolation_lost`),
which refunds them.
"""

import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from accounts.models import User
from accounts.roles import DECIDE_SELLER
from accounts.services import operator_require
from marketplace.emails import absolute_url, email_send
from sellers.isolation import (
    LEVELS_BY_STRENGTH,
    REPORT_REFUSED,
    IsolationLevel,
    RentalLimits,
    ReportInvalid,
    Reserves,
    Sellable,
    containers_paused,
    isolation_level_of,
    isolation_report_check,
    isolation_report_digest,
    level_shortfall,
)
from sellers.models import (
    ContainerTemplate,
    Server,
    ServerAgent,
    ServerEvent,
    ServerEventKind,
    ServerIsolationReport,
    ServerTemplate,
)
from sellers.selectors import seller_owners

from ..exceptions import DevicesNotHeld, IsolationInvalid
from ..matching import market_lock
from ..models import Offer, OfferState
from .market import market_match_notify
from .offers import offer_withdraw

logger = logging.getLogger(__name__)

# jsonb refuses NUL: a field the agent named, kept in an event, keeps only its printable part.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")
SELLABLE_FIELDS = ("sellable_cpu_cores", "sellable_memory_mib", "sellable_disk_gb")


def isolation_digest_of(report) -> str:
    """The digest ServerAgent keeps of a heartbeat's report; "" when it sent none."""
    return "" if report is None else isolation_report_digest(report)


def isolation_invalid_message():
    return _("This isolation report does not follow the agent protocol: see the field it names. "
             "The server is sold as a whole server until its agent sends a sound one.")


def isolation_check(*, report, server_id: int) -> None:
    """Raise `IsolationInvalid` naming the field (`isolation.facts.cpu_limited`) unless `report` is
    None or a sound report of server `server_id`."""
    if report is None:
        return
    try:
        isolation_report_check(report, server_id=server_id)
    except ReportInvalid as error:
        where = f"isolation.{error.field}" if error.field else "isolation"
        raise IsolationInvalid(isolation_invalid_message(), errors=[
            {"field": where, "code": "isolation_invalid", "detail": error.detail}
        ]) from None


def rental_limits_of(*, server: Server, gpus: int) -> dict | None:
    """What a rental of `gpus` of the server's GPUs may use (the desired state's `limits`); None
    while the server has no sellable share (no sound report yet)."""
    if any(getattr(server, name) is None for name in SELLABLE_FIELDS):
        return None
    sellable = Sellable(cpu_cores=server.sellable_cpu_cores, memory_mib=server.sellable_memory_mib,
                        disk_gb=server.sellable_disk_gb)
    return RentalLimits.of(
        sellable=sellable, gpus=gpus, gpu_count=server.gpu_count,
        processes_per_gpu=settings.ISOLATION_PROCESSES_PER_GPU,
    ).as_dict()


def level_is_lower(level: str, than: str) -> bool:
    """Whether `level` is weaker than `than` (container > shared > whole)."""
    return LEVELS_BY_STRENGTH.index(level) > LEVELS_BY_STRENGTH.index(than)


# --- a report received -----------------------------------------------------------------------------


def isolation_apply(*, server: Server, agent: ServerAgent, report, digest: str, now: datetime) -> None:
    """A heartbeat brought a checked report whose digest differs from the last one (or none, after
    one): the report is stored and the server's level and share derived from it, in one
    transaction. `server` and `agent` are the heartbeat's objects, brought up to date."""
    with transaction.atomic():
        # The change's claim: of two heartbeats bringing it at once, the second waits on the row and
        # then finds the digest written (READ COMMITTED re-reads it), and stores nothing again.
        claimed = ServerAgent.objects.filter(pk=agent.pk).exclude(isolation_digest=digest).update(
            isolation_digest=digest
        )
        market_lock(gpu_model_id=server.gpu_model_id)
        locked = Server.objects.select_for_update().get(pk=server.pk)
        if not claimed:
            agent.isolation_digest = digest
            _copy_level(source=locked, target=server)
            return
        level, sellable = _derived(server=locked, report=report)
        if report is not None:
            ServerIsolationReport.objects.create(
                server=locked, received_at=now, digest=digest, report=report, level=level
            )
        _level_set(server=locked, level=level, sellable=sellable, now=now, report=report)
        _templates_held_set(server=locked, report=report, now=now)
    agent.isolation_digest = digest
    _copy_level(source=locked, target=server)


def isolation_refuse(
    *, server: Server, agent: ServerAgent | None, error: IsolationInvalid, now: datetime
) -> None:
    """A report that does not hold: the event says which field, the server falls to "whole server"
    without a share, and its digest is forgotten (the next sound report is a change)."""
    with transaction.atomic():
        if agent is not None:
            ServerAgent.objects.filter(pk=agent.pk).update(isolation_digest="")
            agent.isolation_digest = ""
        market_lock(gpu_model_id=server.gpu_model_id)
        locked = Server.objects.select_for_update().get(pk=server.pk)
        [problem] = error.field_errors
        ServerEvent.objects.create(server=locked, at=now, kind=ServerEventKind.ISOLATION_REFUSED,
                                   detail={"field": CONTROL_CHARACTERS.sub("", problem["field"])[:100],
                                           "detail": problem["detail"]})
        _level_set(server=locked, level=IsolationLevel.WHOLE, sellable=None, now=now, refused=True)
    _copy_level(source=locked, target=server)


def _derived(*, server: Server, report) -> tuple[str, Sellable | None]:
    """The level and share of `server` (its row locked) from `report` (None: an agent without one)."""
    if report is None:
        return IsolationLevel.WHOLE, None
    reserves = Reserves.of_settings()
    level = isolation_level_of(report, **_level_arguments(server=server, reserves=reserves))
    return level, Sellable.of(hardware=report["hardware"], reserves=reserves)


def _level_arguments(*, server: Server, reserves: Reserves) -> dict:
    return {"server_id": server.pk, "gpu_count": server.gpu_count, "reserves": reserves,
            "toolkit_minimum": settings.CONTAINER_TOOLKIT_MINIMUM,
            "devices_held": server.devices_held_at is not None}


def _copy_level(*, source: Server, target: Server) -> None:
    for name in ("isolation_level", "containers_paused", "devices_held_at", *SELLABLE_FIELDS):
        setattr(target, name, getattr(source, name))


def _level_set(*, server: Server, level: str, sellable: Sellable | None, now: datetime, report=None,
               refused: bool = False) -> None:
    """Write the server's level and share (its row locked, after the market lock) and, when the
    level changed, what follows: the event, offers a whole server cannot keep withdrawn, the book
    matched again, the seller told of a fall and why (`report`, the one that made it; `refused`:
    the report did not hold)."""
    before = server.isolation_level
    fields = {
        "isolation_level": level,
        "containers_paused": report is not None and containers_paused(
            report, **_level_arguments(server=server, reserves=Reserves.of_settings())),
        "sellable_cpu_cores": sellable.cpu_cores if sellable else None,
        "sellable_memory_mib": sellable.memory_mib if sellable else None,
        "sellable_disk_gb": sellable.disk_gb if sellable else None,
    }
    Server.objects.filter(pk=server.pk).update(**fields)
    for name, value in fields.items():
        setattr(server, name, value)
    if level == before:
        return
    ServerEvent.objects.create(server=server, at=now, kind=ServerEventKind.ISOLATION_CHANGED,
                               detail={"from": before, "to": level})
    withdrawn = _partial_offers_withdraw(server=server) if level == IsolationLevel.WHOLE else []
    market_match_notify(gpu_model_id=server.gpu_model_id)
    if level_is_lower(level, than=before):
        logger.warning("Server %s: isolation level fell from %s to %s; offers withdrawn: %s.",
                       server.pk, before, level, withdrawn)
        _level_fell_email(server=server, before=before, withdrawn=len(withdrawn), now=now,
                          why=lambda: _shortfall(server=server, level=before, report=report, refused=refused))


def _templates_held_set(*, server: Server, report, now: datetime) -> bool:
    """The published templates the report says the server holds and whose disk its share per GPU
    can give: what a container rental there may run. Resting bids for a template it now holds may
    fill, so the book is matched again when the set changes. Whether it changed."""
    container = (report or {}).get("container") or {}
    digests = set(container.get("templates") or ())
    share = (server.sellable_disk_gb or 0) // server.gpu_count
    wanted = {template.pk for template in ContainerTemplate.objects.filter(published=True, disk_gb__lte=share)
              if template.digest in digests}
    held = set(ServerTemplate.objects.filter(server=server).values_list("template_id", flat=True))
    if wanted == held:
        return False
    ServerTemplate.objects.filter(server=server).exclude(template_id__in=wanted).delete()
    ServerTemplate.objects.bulk_create(
        [ServerTemplate(server=server, template_id=pk, since=now) for pk in sorted(wanted - held)]
    )
    market_match_notify(gpu_model_id=server.gpu_model_id)
    return True


def _partial_offers_withdraw(*, server: Server) -> list[int]:
    """A whole server is sold only whole: its active offers of fewer GPUs leave the book."""
    offer_ids = list(
        Offer.objects.filter(server=server, state=OfferState.ACTIVE, gpus_offered__lt=server.gpu_count)
        .order_by("pk").values_list("pk", flat=True)
    )
    for offer_id in offer_ids:
        offer_withdraw(offer_id=offer_id)
    return offer_ids


def _shortfall(*, server: Server, level: str, report, refused: bool) -> list[str]:
    """Why the server's report no longer reaches `level`, in the active language."""
    if refused:
        return [str(REPORT_REFUSED)]
    return level_shortfall(level, report=report,
                           **_level_arguments(server=server, reserves=Reserves.of_settings()))


def _level_fell_email(*, server: Server, before: str, withdrawn: int, now: datetime, why) -> None:
    """Each owner of the server's seller is told, in their language, the level it is now sold at
    and why (`why()`, in the owner's language; sent after commit, once per change)."""
    for owner in seller_owners(seller_id=server.seller_id):
        email_send(
            template="exchange/email/isolation_fell", user=owner,
            key=f"isolation-fell:{server.pk}:{now.isoformat()}:{owner.pk}",
            context=lambda: {
                "server": server.name,
                "before": IsolationLevel(before).label,
                "level": IsolationLevel(server.isolation_level).label,
                "whole": server.isolation_level == IsolationLevel.WHOLE,
                "withdrawn": withdrawn, "reasons": why(),
                "url": absolute_url(reverse("sellers:portal-server", args=[server.pk])),
            },
        )


# --- device drifts and their hold ------------------------------------------------------------------


def device_drifts_record(*, server: Server, drifts, now: datetime) -> None:
    """Each device node the agent repaired is an event; ISOLATION_DRIFT_LIMIT of them within
    ISOLATION_DRIFT_HOURS and its device locks count as not holding (the level derived again)
    until an operator trusts them (`server_devices_trust`)."""
    with transaction.atomic():
        market_lock(gpu_model_id=server.gpu_model_id)
        locked = Server.objects.select_for_update().get(pk=server.pk)
        ServerEvent.objects.bulk_create([
            ServerEvent(server=locked, at=now, kind=ServerEventKind.DEVICE_DRIFT,
                        detail={"at": drift.at, "node": drift.node, "found": drift.found})
            for drift in drifts
        ])
        held = locked.devices_held_at is not None
        if not held and _drifts_within(server=locked, now=now) >= settings.ISOLATION_DRIFT_LIMIT:
            locked.devices_held_at = now
            Server.objects.filter(pk=locked.pk).update(devices_held_at=now)
            ServerEvent.objects.create(server=locked, at=now, kind=ServerEventKind.DEVICES_HELD)
            _level_derive_again(server=locked, now=now)
    _copy_level(source=locked, target=server)


def _drifts_within(*, server: Server, now: datetime) -> int:
    since = now - timedelta(hours=settings.ISOLATION_DRIFT_HOURS)
    return ServerEvent.objects.filter(server=server, kind=ServerEventKind.DEVICE_DRIFT, at__gte=since).count()


def _latest_report(*, server: Server):
    """The agent's latest report as it stands (its digest the agent's), None without one."""
    digest = ServerAgent.objects.filter(pk=server.pk).values_list("isolation_digest", flat=True).first()
    if not digest:
        return None
    return (
        ServerIsolationReport.objects.filter(server=server, digest=digest).order_by("-received_at", "-id")
        .values_list("report", flat=True).first()
    )


def _level_derive_again(*, server: Server, now: datetime) -> None:
    """The level of `server` (its row locked) from its agent's latest report, as it stands now."""
    report = _latest_report(server=server)
    level, sellable = _derived(server=server, report=report)
    _level_set(server=server, level=level, sellable=sellable, now=now, report=report)


def container_templates_held_refresh(*, now: datetime | None = None) -> int:
    """After an operator published, changed or withdrew a template: each container server's held
    templates read again from its agent's latest report, which arrives again only when it changes
    (an agent that pulled the image before it was published holds it already). One transaction per
    server, market then server locked as a report's. Returns the servers whose set changed."""
    now = now or timezone.now()
    changed = 0
    servers = Server.objects.filter(isolation_level=IsolationLevel.CONTAINER).order_by("pk")
    for server_id, gpu_model_id in servers.values_list("pk", "gpu_model_id"):
        with transaction.atomic():
            market_lock(gpu_model_id=gpu_model_id)
            locked = Server.objects.select_for_update().get(pk=server_id)
            changed += _templates_held_set(server=locked, report=_latest_report(server=locked), now=now)
    return changed


@dataclass(frozen=True)
class DevicesTrusted:
    server_id: int
    level: str


def server_devices_trust(*, server_id: int, operator: User, now: datetime | None = None) -> DevicesTrusted:
    """An operator looked at a server's repeated device drifts and trusts its locks again: the
    hold is lifted and the level derived again from its latest report. Raises
    `OperatorNotAllowed`, `DevicesNotHeld` (its locks were not held; nothing changed)."""
    operator_require(operator=operator, permission=DECIDE_SELLER)
    now = now or timezone.now()
    gpu_model_id = Server.objects.values_list("gpu_model_id", flat=True).get(pk=server_id)
    with transaction.atomic():
        market_lock(gpu_model_id=gpu_model_id)
        server = Server.objects.select_for_update().get(pk=server_id)
        if server.devices_held_at is None:
            raise DevicesNotHeld(_("The device locks of this server are not held."), code="devices_not_held")
        server.devices_held_at = None
        Server.objects.filter(pk=server.pk).update(devices_held_at=None)
        ServerEvent.objects.create(server=server, at=now, kind=ServerEventKind.DEVICES_CLEARED,
                                   detail={"operator_id": operator.pk})
        _level_derive_again(server=server, now=now)
    return DevicesTrusted(server_id=server.pk, level=server.isolation_level)
