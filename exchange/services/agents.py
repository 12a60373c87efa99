"""The exchange's side of the host agent's heartbeat (docs/agent.md): who is calling, what its
server has, which logins are ready, and the desired state it must converge to.

`agent_heartbeat_receive` is the hot path: every server calls it every 30 seconds. An unchanged
heartbeat costs two statements (the token with its server, agent and desired logins; the update of
the agent's row and the token's last use) and takes no lock. Locks are taken only when something
changes: the market lock of the server's GPU model when its verification changes (lock order of
`exchange.matching`: market lock, then the server's row), a rental's row when its login is
delivered. Each change is its own transaction, after which the heartbeat goes on. The isolation
report is compared by its digest with the one the agent's row keeps: unchanged, it costs nothing;
changed, refused, or with device drifts, `exchange.services.isolation` takes it in a transaction
of its own.

A refused heartbeat (revoked token, retired server, a report out of range) writes one refused
`ServerHeartbeat` row with its problem code and changes nothing else.
"""

import functools
import logging
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from kombu.exceptions import OperationalError

from accounts.tokens import token_secret_hash
from marketplace.emails import absolute_url, email_send
from marketplace.sql import prepared_cursor, update_assignments
from sellers.agents import gpus_compare
from sellers.isolation import IsolationLevel
from sellers.models import (
    AgentToken,
    Server,
    ServerAgent,
    ServerEvent,
    ServerEventKind,
    ServerHeartbeat,
    ServerStatus,
)
from sellers.selectors import agent_token_find

# The module, not its names: the tasks call these services back (a cycle of modules).
from .. import tasks
from ..exceptions import AgentServerRetired, AgentTokenInvalid, HeartbeatInvalid, IsolationInvalid
from ..matching import market_lock
from ..models import Offer, OfferState, Rental, RentalState
from ..selectors import DesiredRental, heartbeat_caller, rental_ssh_port
from ..ssh_keys import (
    ACCEPTED_KEY_TYPES,
    MAX_HOST_KEY_LENGTH,
    ssh_banner_read,
    ssh_connect_command,
    ssh_host_key_valid,
    ssh_key_fingerprint,
    ssh_known_hosts_line,
)
from .isolation import (
    device_drifts_record,
    isolation_apply,
    isolation_check,
    isolation_digest_of,
    isolation_refuse,
    rental_limits_of,
)
from .market import market_match_notify
from .offers import offer_withdraw

logger = logging.getLogger(__name__)

AGENT_USERNAME = re.compile(r"evx-[0-9]{1,18}", re.ASCII)
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
LOGIN_STATES = ("ready", "failed", "refused")
TOKEN_USE_EVERY = timedelta(minutes=1)
SKEW_LIMIT = 2**31 - 1  # the column's range: a clock decades off is shown, not refused

# The protocol's limits (docs/agent.md): anything outside is refused as invalid input.
MAX_GPUS = 16
MAX_LOGINS = 64
MAX_GPU_INDEX = 15
MAX_LOGIN_GPU_INDEX = 63
MAX_SERVICE_PORTS = 8  # a template has at most 8 ports, 22 among them
MEMORY_MIB = (1, 2_000_000)
TEMPERATURE_C = (-50, 150)
UTILIZATION_PERCENT = (0, 100)
MAX_ECC_ERRORS = 10**12
MAX_UPTIME_SECONDS = 10**11
DISK_FREE_GB = (0, 10**7)
MAX_VERSION = 20
MAX_HOSTNAME = 255
MAX_TEXT = 200  # a GPU's name or uuid, a login's detail
MAX_GPU_ERROR = 200  # longer errors are cut, not refused: the agent only repeats nvidia-smi
MAX_DRIFTS = 64
MAX_DRIFT_NODE = 64


# --- what the agent reports, and what it is answered ---------------------------------------------


@dataclass(frozen=True)
class GpuReport:
    index: int
    name: str
    memory_total_mib: int | None
    uuid: str = ""
    temperature_c: int | None = None
    utilization_percent: int | None = None
    ecc_uncorrected: int | None = None


@dataclass(frozen=True)
class LoginReport:
    rental_id: int
    username: str
    state: str
    gpu_indices: tuple[int, ...] = ()
    detail: str = ""
    # The port of the rental's own sshd (docs/agent.md); None from an agent whose logins go
    # through the host's sshd: the server's registered port.
    ssh_port: int | None = None
    # A container rental's other ports on the server ({"8888": 41005}); {} for the others.
    service_ports: dict = field(default_factory=dict)


@dataclass(frozen=True)
class DriftReport:
    """A device node the agent found changed and repaired (docs/agent.md, device drifts)."""

    at: str
    node: str
    found: str


@dataclass(frozen=True)
class HeartbeatReport:
    """One heartbeat's body, as the API read it (types checked there) or the demo made it."""

    agent_version: str
    sent_at: datetime | str
    gpus: tuple[GpuReport, ...] = ()
    gpu_error: str | None = None
    logins: tuple[LoginReport, ...] = ()
    uptime_seconds: int | None = None
    hostname: str = ""
    disk_free_gb: Decimal | float | None = None
    # The isolation report as the agent sent it (any JSON: sellers.isolation checks it), None
    # when it sent none (an older agent).
    isolation: object = None
    device_drifts: tuple[DriftReport, ...] = ()
    # The public host key of the rentals' sshds ("type base64"), "" when the agent has none.
    ssh_host_key: str = ""


@dataclass(frozen=True)
class DesiredLogin:
    rental_id: int
    username: str
    ssh_public_key: str
    gpu_indices: list[int]
    # The same GPUs by the UUIDs this heartbeat reported for their indices; [] when one is not known.
    gpu_uuids: list[str] = field(default_factory=list)
    isolation: str = IsolationLevel.WHOLE  # the level the rental was sold with
    limits: dict | None = None  # sellers.isolation.RentalLimits; None while the server has no report
    # The digest of the container template's image its container runs; None: the agent's own first.
    template: str | None = None
    # A container rental's secret, which the agent passes to a template that takes one; "" otherwise.
    service_token: str = ""


@dataclass(frozen=True)
class DesiredTemplateSpec:
    """A container template as the agent reads it (everx_agent.containers.exchange_template_read)."""

    image: str
    ports: list[int]
    key_path: str
    command: list[str]
    min_driver: str
    token_env: str  # the variable its image reads the rental's token from; "" for none


@dataclass(frozen=True)
class DesiredState:
    """The answer: exactly the logins that must exist on the server now."""

    server_id: int
    server_time: datetime
    heartbeat_seconds: int
    remove_home: bool
    logins: list[DesiredLogin] = field(default_factory=list)
    # The templates to hold: the published ones, which the agent pulls while idle, and those its
    # live rentals run.
    templates: list[DesiredTemplateSpec] = field(default_factory=list)


def agent_username(rental_id: int) -> str:
    return f"evx-{rental_id}"


# --- checking a report ---------------------------------------------------------------------------


class _Check:
    """Collects what is wrong with a report, field by field, in the API's `{field, code, detail}`."""

    def __init__(self) -> None:
        self.errors: list[dict] = []

    def fail(self, where: str, code: str, detail) -> None:
        self.errors.append({"field": where, "code": code, "detail": str(detail)})

    def number(self, where: str, value, low, high, *, optional: bool = True) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
            self.fail(where, "int_type", _("This value has the wrong type."))
        elif value != value or value < low:  # NaN is never in range
            self.fail(where, "greater_than_equal", _("Send a value of at least %(limit)s.") % {"limit": low})
        elif value > high:
            self.fail(where, "less_than_equal", _("Send a value of at most %(limit)s.") % {"limit": high})

    def text(self, where: str, value, limit: int) -> None:
        if not isinstance(value, str):
            self.fail(where, "string_type", _("This value has the wrong type."))
        elif len(value) > limit:
            self.fail(where, "string_too_long", _("Use at most %(count)s characters.") % {"count": limit})
        elif CONTROL_CHARACTERS.search(value):  # PostgreSQL's text and jsonb refuse NUL, no page shows them
            self.fail(where, "string_pattern_mismatch", _("This value does not have the expected form."))

    def count(self, where: str, items, limit: int) -> None:
        if len(items) > limit:
            self.fail(where, "too_long", _("This list does not have an allowed number of items."))


def heartbeat_sent_at(value: datetime | str) -> datetime | None:
    """The agent's `sent_at` as an aware time, or None when it is not RFC 3339 with a zone."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value) if len(value) <= 40 else None
        except ValueError:
            return None
    if not isinstance(value, datetime) or value.tzinfo is None:
        return None
    return value


def _gpus_check(check: _Check, gpus) -> None:
    check.count("gpus", gpus, MAX_GPUS)
    seen: set[int] = set()
    for position, gpu in enumerate(gpus[:MAX_GPUS]):
        where = f"gpus.{position}"
        check.number(f"{where}.index", gpu.index, 0, MAX_GPU_INDEX, optional=False)
        if gpu.index in seen:
            check.fail(f"{where}.index", "duplicate", _("Two GPUs of this heartbeat have the same index."))
        seen.add(gpu.index)
        check.text(f"{where}.name", gpu.name, MAX_TEXT)
        check.text(f"{where}.uuid", gpu.uuid, MAX_TEXT)
        check.number(f"{where}.memory_total_mib", gpu.memory_total_mib, *MEMORY_MIB)
        check.number(f"{where}.temperature_c", gpu.temperature_c, *TEMPERATURE_C)
        check.number(f"{where}.utilization_percent", gpu.utilization_percent, *UTILIZATION_PERCENT)
        check.number(f"{where}.ecc_uncorrected", gpu.ecc_uncorrected, 0, MAX_ECC_ERRORS)


def _logins_check(check: _Check, logins) -> None:
    check.count("logins", logins, MAX_LOGINS)
    for position, login in enumerate(logins[:MAX_LOGINS]):
        where = f"logins.{position}"
        check.number(f"{where}.rental_id", login.rental_id, 1, 2**63 - 1, optional=False)
        if not isinstance(login.username, str) or not AGENT_USERNAME.fullmatch(login.username):
            check.fail(f"{where}.username", "string_pattern_mismatch",
                       _("This value does not have the expected form."))
        if login.state not in LOGIN_STATES:
            check.fail(f"{where}.state", "literal_error",
                       _("Choose one of: %(choices)s.") % {"choices": ", ".join(LOGIN_STATES)})
        check.count(f"{where}.gpu_indices", login.gpu_indices, MAX_LOGIN_GPU_INDEX + 1)
        for spot, index in enumerate(login.gpu_indices[: MAX_LOGIN_GPU_INDEX + 1]):
            check.number(f"{where}.gpu_indices.{spot}", index, 0, MAX_LOGIN_GPU_INDEX, optional=False)
        check.text(f"{where}.detail", login.detail, MAX_TEXT * 5)
        if isinstance(login.ssh_port, float):  # a port is a whole number, not 22.0
            check.fail(f"{where}.ssh_port", "int_type", _("This value has the wrong type."))
        else:
            check.number(f"{where}.ssh_port", login.ssh_port, 1, 65535)
        _service_ports_check(check, where, login.service_ports)


def _service_ports_check(check: _Check, where: str, ports: dict) -> None:
    check.count(f"{where}.service_ports", ports, MAX_SERVICE_PORTS)
    for container_port, host_port in list(ports.items())[:MAX_SERVICE_PORTS]:
        spot = f"{where}.service_ports.{str(container_port)[:8]}"
        if not (isinstance(container_port, str) and container_port.isascii() and container_port.isdigit()
                and 1 <= int(container_port) <= 65535):
            check.fail(spot, "string_pattern_mismatch", _("This value does not have the expected form."))
        elif isinstance(host_port, float):
            check.fail(spot, "int_type", _("This value has the wrong type."))
        else:
            check.number(spot, host_port, 1, 65535, optional=False)


def _drifts_check(check: _Check, drifts) -> None:
    check.count("device_drifts", drifts, MAX_DRIFTS)
    for position, drift in enumerate(drifts[:MAX_DRIFTS]):
        where = f"device_drifts.{position}"
        if heartbeat_sent_at(drift.at) is None:
            check.fail(f"{where}.at", "datetime_parsing",
                       _("Send a time in RFC 3339 with its time zone, such as 2026-12-01T21:00:00Z."))
        check.text(f"{where}.node", drift.node, MAX_DRIFT_NODE)
        check.text(f"{where}.found", drift.found, MAX_TEXT)


def heartbeat_report_check(*, report: HeartbeatReport) -> None:
    """Raise `HeartbeatInvalid` naming every field out of the protocol's ranges; None if sound."""
    check = _Check()
    check.text("agent_version", report.agent_version, MAX_VERSION)
    if isinstance(report.agent_version, str) and not report.agent_version.strip():
        check.fail("agent_version", "string_too_short", _("This value is too short."))
    if heartbeat_sent_at(report.sent_at) is None:
        check.fail("sent_at", "datetime_parsing",
                   _("Send a time in RFC 3339 with its time zone, such as 2026-12-01T21:00:00Z."))
    check.number("uptime_seconds", report.uptime_seconds, 0, MAX_UPTIME_SECONDS)
    check.number("disk_free_gb", report.disk_free_gb, *DISK_FREE_GB)
    check.text("hostname", report.hostname, MAX_HOSTNAME)
    if report.gpu_error is not None:
        check.text("gpu_error", report.gpu_error, 10 * MAX_GPU_ERROR)
    _gpus_check(check, report.gpus)
    _logins_check(check, report.logins)
    _drifts_check(check, report.device_drifts)
    if report.ssh_host_key != "" and not ssh_host_key_valid(report.ssh_host_key):
        check.fail("ssh_host_key", "string_pattern_mismatch", _(
            "Send the host key as one line of its public key file: %(types)s, then the key "
            "(at most %(count)s characters)."
        ) % {"types": ", ".join(ACCEPTED_KEY_TYPES), "count": MAX_HOST_KEY_LENGTH})
    if check.errors:
        raise HeartbeatInvalid(heartbeat_invalid_message(), errors=check.errors)


def heartbeat_invalid_message():
    return _("This heartbeat does not follow the agent protocol: see the fields it names.")


# --- refusals ------------------------------------------------------------------------------------


def _refusal_record(*, server_id: int, problem: str, address: str | None, now: datetime, report=None) -> None:
    version = getattr(report, "agent_version", "")
    if not isinstance(version, str) or CONTROL_CHARACTERS.search(version):
        version = ""  # what the refused report says is kept only where it is sound text
    ServerHeartbeat.objects.create(
        server_id=server_id, received_at=now, accepted=False, problem=problem[:60], address=address,
        agent_version=version[:MAX_VERSION],
    )


def _token_refused(*, secret: str, address: str | None, now: datetime) -> AgentTokenInvalid:
    """The refusal of a secret no live token has; recorded on the server when it is a revoked
    token of one (a bad secret names no server: only logged, by its first characters)."""
    revoked = (
        AgentToken.objects.filter(key_hash=token_secret_hash(secret))
        .values_list("server_id", flat=True).first()
        if secret.startswith("evxa_") and len(secret) <= 100 else None
    )
    if revoked is not None:
        _refusal_record(server_id=revoked, problem="token_revoked", address=address, now=now)
    logger.info("Agent heartbeat refused: no live token %s…", secret[:12])
    return AgentTokenInvalid(_("This agent token is not valid: it is unknown or was revoked. Create a "
                               "new one in the seller portal and enroll the agent again."))


def _server_retired(*, server: Server, address: str | None, now: datetime, report=None) -> AgentServerRetired:
    _refusal_record(server_id=server.pk, problem="server_retired", address=address, now=now, report=report)
    return AgentServerRetired(_("This server is retired: its agent can be stopped and removed."))


def agent_token_check(
    *, secret: str, address: str | None, now=None, token: AgentToken | None = None
) -> AgentToken:
    """The live token of `secret` (or `token`, the caller's lookup of it), of a server that is not
    retired. Raises `AgentTokenInvalid`, `AgentServerRetired` (each recorded)."""
    now = now or timezone.now()
    token = token or agent_token_find(secret=secret)
    if token is None:
        raise _token_refused(secret=secret, address=address, now=now)
    if token.server.status == ServerStatus.RETIRED:
        raise _server_retired(server=token.server, address=address, now=now)
    return token


def agent_heartbeat_refuse(
    *, secret: str, error: HeartbeatInvalid, address: str | None, now=None
) -> HeartbeatInvalid:
    """A heartbeat the API could not even read as the protocol's (a wrong type, a missing or
    unknown field): checked for its token first (`AgentTokenInvalid`, `AgentServerRetired` win),
    then recorded as refused. Returns `error`, for the caller to raise."""
    now = now or timezone.now()
    token = agent_token_check(secret=secret, address=address, now=now)
    _refusal_record(server_id=token.server_id, problem=_problem_of(error), address=address, now=now)
    return error


def _problem_of(error: HeartbeatInvalid) -> str:
    fields = [item["field"] for item in error.field_errors if item["field"]]
    # The field may name an unknown key the agent sent: only its printable part is kept.
    return CONTROL_CHARACTERS.sub("", f"{error.code}:{fields[0]}") if fields else error.code


# --- the heartbeat -------------------------------------------------------------------------------


def agent_heartbeat_receive(
    *, secret: str, report: HeartbeatReport, address: str | None, now=None
) -> DesiredState:
    """Take one heartbeat of a server's agent and answer the desired state.

    Raises `AgentTokenInvalid` (unknown or revoked: 401), `AgentServerRetired` (403),
    `HeartbeatInvalid` (422); each refusal is recorded and nothing else changes."""
    now = now or timezone.now()
    caller = heartbeat_caller(secret=secret)
    if caller is None:
        raise _token_refused(secret=secret, address=address, now=now)
    token = agent_token_check(secret=secret, address=address, now=now, token=caller.token)
    server = token.server
    try:
        heartbeat_report_check(report=report)
    except HeartbeatInvalid as error:
        _refusal_record(
            server_id=server.pk, problem=_problem_of(error), address=address, now=now, report=report
        )
        raise
    agent = _agent_of(server)
    digest = isolation_digest_of(report.isolation)
    if agent is None or digest != agent.isolation_digest:  # an unchanged report was checked before
        try:
            isolation_check(report=report.isolation, server_id=server.pk)
        except IsolationInvalid as error:
            _refusal_record(
                server_id=server.pk, problem=_problem_of(error), address=address, now=now, report=report
            )
            isolation_refuse(server=server, agent=agent, error=error, now=now)
            raise
    seen = _Seen.of(report=report, now=now)
    mismatch = gpus_compare(server=server, gpus=seen.gpus, gpu_error=seen.gpu_error)
    if agent is None:
        agent = _agent_enroll(server=server, now=now)
    if digest != agent.isolation_digest:
        isolation_apply(server=server, agent=agent, report=report.isolation, digest=digest, now=now)
    if report.device_drifts:
        device_drifts_record(server=server, drifts=report.device_drifts, now=now)
    _verification_apply(server=server, agent=agent, mismatch=mismatch, now=now)
    ready = _logins_deliver(server=server, desired=caller.desired, reported=report.logins, now=now)
    _agent_record(
        agent=agent, token=token, seen=seen, mismatch=mismatch, ready=ready, address=address, now=now
    )
    digests = {template.id: template.digest for template in caller.templates}
    return DesiredState(
        server_id=server.pk, server_time=now, heartbeat_seconds=settings.AGENT_HEARTBEAT_SECONDS,
        remove_home=settings.AGENT_REMOVE_HOME,
        logins=[_desired_login(server=server, rental=rental, gpus=seen.gpus, digests=digests)
                for rental in caller.desired],
        templates=[DesiredTemplateSpec(image=template.image, ports=template.ports, key_path=template.key_path,
                                       command=template.command, min_driver=template.min_driver,
                                       token_env=template.token_env)
                   for template in caller.templates],
    )


def _desired_login(*, server: Server, rental: DesiredRental, gpus: list[dict], digests: dict) -> DesiredLogin:
    return DesiredLogin(
        rental_id=rental.rental_id, username=agent_username(rental.rental_id),
        ssh_public_key=rental.ssh_public_key, gpu_indices=rental.gpu_indices,
        gpu_uuids=gpu_uuids_of(indices=rental.gpu_indices, gpus=gpus), isolation=rental.isolation_level,
        limits=rental_limits_of(server=server, gpus=len(rental.gpu_indices)),
        template=digests.get(rental.template_id), service_token=rental.service_token,
    )


def gpu_uuids_of(*, indices: list[int], gpus: list[dict]) -> list[str]:
    """The UUIDs of the GPUs at `indices` as the agent reported them, in the same order; [] when
    one is missing: the agent then names the GPUs by index."""
    by_index = {gpu["index"]: gpu["uuid"] for gpu in gpus if gpu["uuid"]}
    if not all(index in by_index for index in indices):
        return []
    return [by_index[index] for index in indices]


@dataclass(frozen=True)
class _Seen:
    """What a checked report says, as ServerAgent stores it."""

    gpus: list[dict]
    gpu_error: str
    logins: list[dict]
    agent_version: str
    hostname: str
    uptime_seconds: int | None
    disk_free_gb: Decimal | None
    clock_skew_seconds: int
    ssh_host_key: str = ""

    @classmethod
    def of(cls, *, report: HeartbeatReport, now: datetime) -> "_Seen":
        skew = round((heartbeat_sent_at(report.sent_at) - now).total_seconds())
        return cls(
            gpus=[
                {"index": gpu.index, "uuid": gpu.uuid, "name": gpu.name,
                 "memory_total_mib": gpu.memory_total_mib,
                 "temperature_c": gpu.temperature_c, "utilization_percent": gpu.utilization_percent,
                 "ecc_uncorrected": gpu.ecc_uncorrected}
                for gpu in sorted(report.gpus, key=lambda gpu: gpu.index)
            ],
            gpu_error=(report.gpu_error or "")[:MAX_GPU_ERROR],
            logins=[
                {"rental_id": login.rental_id, "username": login.username, "state": login.state,
                 "gpu_indices": list(login.gpu_indices), "detail": login.detail, "ssh_port": login.ssh_port}
                for login in report.logins
            ],
            agent_version=report.agent_version, hostname=report.hostname,
            uptime_seconds=None if report.uptime_seconds is None else int(report.uptime_seconds),
            disk_free_gb=_one_place(report.disk_free_gb),
            clock_skew_seconds=max(-SKEW_LIMIT, min(SKEW_LIMIT, skew)), ssh_host_key=report.ssh_host_key,
        )

    def hardware(self) -> list[tuple]:
        """What a change of is worth a history row: not temperatures and loads, which always move."""
        return [(gpu["index"], gpu["uuid"], gpu["name"], gpu["memory_total_mib"], gpu["ecc_uncorrected"])
                for gpu in self.gpus]


def _one_place(value) -> Decimal | None:
    if value is None:
        return None
    try:
        return Decimal(str(value)).quantize(Decimal("0.1"))
    except InvalidOperation:
        return None


def _agent_of(server: Server) -> ServerAgent | None:
    try:
        return server.agent  # selected with the token (exchange.selectors.heartbeat_caller)
    except ServerAgent.DoesNotExist:
        return None


def _agent_enroll(*, server: Server, now: datetime) -> ServerAgent:
    """The server's first heartbeat: its agent's row and the ENROLLED event, once even when two
    first heartbeats arrive together."""
    try:
        with transaction.atomic():
            agent = ServerAgent.objects.create(
                server=server, enrolled_at=now, last_heartbeat_at=now, agent_version="",
            )
            ServerEvent.objects.create(server=server, at=now, kind=ServerEventKind.ENROLLED)
    except IntegrityError:
        agent = ServerAgent.objects.get(pk=server.pk)
    server.agent = agent
    return agent


def _agent_record(
    *, agent: ServerAgent, token: AgentToken, seen: _Seen, mismatch: list[dict], ready: int,
    address: str | None, now: datetime,
) -> None:
    """Rewrite the agent's row and the token's last use (one statement); add a history row every
    AGENT_HISTORY_SECONDS or when what it sees changed; an agent the failure check judged silent
    is back; a new host key is an event (buyers who trusted the old one will be warned by ssh)."""
    before = _seen_of_agent(agent)
    changed = (
        before is None or before.hardware() != seen.hardware() or before.gpu_error != seen.gpu_error
        or before.agent_version != seen.agent_version or agent.mismatch != mismatch
        or _ready_count(agent.logins) != ready
    )
    history_due = agent.history_at is None or now - agent.history_at >= timedelta(
        seconds=settings.AGENT_HISTORY_SECONDS
    )
    fields = {
        "last_heartbeat_at": now, "agent_version": seen.agent_version, "hostname": seen.hostname,
        "uptime_seconds": seen.uptime_seconds, "disk_free_gb": seen.disk_free_gb,
        "clock_skew_seconds": seen.clock_skew_seconds, "gpus": seen.gpus, "gpu_error": seen.gpu_error,
        "logins": seen.logins, "mismatch": mismatch, "ssh_host_key": seen.ssh_host_key,
    }
    if changed or history_due:
        fields["history_at"] = now
    back = agent.unreachable_since is not None
    if back:
        fields["unreachable_since"] = None
    new_key = agent.ssh_host_key != seen.ssh_host_key
    if not (back or changed or history_due or new_key):
        _agent_row_write(agent_id=agent.pk, fields=fields, token_id=token.pk, now=now)
        return
    with transaction.atomic():
        _agent_row_write(agent_id=agent.pk, fields=fields, token_id=token.pk, now=now)
        if back:
            ServerEvent.objects.create(server_id=agent.pk, at=now, kind=ServerEventKind.BACK,
                                       detail={"unreachable_since": agent.unreachable_since.isoformat()})
        if new_key:
            ServerEvent.objects.create(server_id=agent.pk, at=now, kind=ServerEventKind.HOST_KEY_CHANGED,
                                       detail={"before": _fingerprint(agent.ssh_host_key),
                                               "after": _fingerprint(seen.ssh_host_key)})
        if changed or history_due:
            ServerHeartbeat.objects.create(
                server_id=agent.pk, received_at=now, accepted=True, agent_version=seen.agent_version,
                gpus=seen.gpus, gpu_error=seen.gpu_error, disk_free_gb=seen.disk_free_gb,
                clock_skew_seconds=seen.clock_skew_seconds, logins_ready=ready, address=address,
            )


def _agent_row_write(*, agent_id: int, fields: dict, token_id: int, now: datetime) -> None:
    """One statement for the hot path (marketplace.sql says why): the agent's row, and the token's
    `last_used_at` when the last one written is a minute old (TOKEN_USE_EVERY). SQLite (the
    embedded default) has no UPDATE inside WITH: two ORM updates there."""
    if connection.vendor != "postgresql":
        AgentToken.objects.filter(Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - TOKEN_USE_EVERY),
                                  pk=token_id).update(last_used_at=now)
        ServerAgent.objects.filter(pk=agent_id).update(**fields)
        return
    assignments, params = update_assignments(ServerAgent, fields)
    token_table, agent_table = AgentToken._meta.db_table, ServerAgent._meta.db_table
    # Table and column names come from the models, every value is a parameter.
    sql = (
        f"WITH used AS (UPDATE {token_table} SET last_used_at = %s WHERE id = %s "  # noqa: S608
        "AND (last_used_at IS NULL OR last_used_at <= %s)) "
        f"UPDATE {agent_table} SET {assignments} WHERE server_id = %s"
    )
    with prepared_cursor() as cursor:
        cursor.execute(sql, [now, token_id, now - TOKEN_USE_EVERY, *params, agent_id])


def _seen_of_agent(agent: ServerAgent) -> "_Seen | None":
    """What the agent's row holds from its last heartbeat; None before its first."""
    if not agent.agent_version:
        return None
    return _Seen(
        gpus=agent.gpus, gpu_error=agent.gpu_error, logins=agent.logins, agent_version=agent.agent_version,
        hostname=agent.hostname, uptime_seconds=agent.uptime_seconds, disk_free_gb=agent.disk_free_gb,
        clock_skew_seconds=agent.clock_skew_seconds, ssh_host_key=agent.ssh_host_key,
    )


def _fingerprint(host_key: str) -> str:
    return ssh_key_fingerprint(host_key) if host_key else ""


def _ready_count(logins: list[dict]) -> int:
    return sum(1 for login in logins if login.get("state") == "ready")


# --- verification --------------------------------------------------------------------------------


def _verification_apply(*, server: Server, agent: ServerAgent, mismatch: list[dict], now: datetime) -> None:
    """Take the market lock only when the server's verification changes: it verifies (the book
    may fill resting bids with it), or a mismatch appears or changes (its offers are withdrawn
    until it matches)."""
    verified = server.agent_verified_at is not None
    if not mismatch and not verified:
        _server_verify(server=server, now=now)
    elif mismatch and (verified or mismatch != agent.mismatch):
        _server_mismatch(server=server, mismatch=mismatch, told=agent.mismatch == mismatch, now=now)


@transaction.atomic
def _server_verify(*, server: Server, now: datetime) -> None:
    market_lock(gpu_model_id=server.gpu_model_id)
    locked = Server.objects.select_for_update().get(pk=server.pk)
    if locked.agent_verified_at is not None:  # a heartbeat at the same moment did it
        server.agent_verified_at = locked.agent_verified_at
        return
    Server.objects.filter(pk=server.pk).update(agent_verified_at=now)
    server.agent_verified_at = now
    ServerEvent.objects.create(server=server, at=now, kind=ServerEventKind.VERIFIED)
    market_match_notify(gpu_model_id=server.gpu_model_id)


@transaction.atomic
def _server_mismatch(*, server: Server, mismatch: list[dict], told: bool, now: datetime) -> None:
    market_lock(gpu_model_id=server.gpu_model_id)
    Server.objects.filter(pk=server.pk).update(agent_verified_at=None)  # its row, after the market lock
    server.agent_verified_at = None
    if not told:
        ServerEvent.objects.create(server=server, at=now, kind=ServerEventKind.MISMATCH,
                                   detail={"mismatch": mismatch})
    for offer_id in Offer.objects.filter(server=server, state=OfferState.ACTIVE).values_list("pk", flat=True):
        offer_withdraw(offer_id=offer_id)


# --- the desired state and delivery --------------------------------------------------------------


def _logins_deliver(*, server: Server, desired: list[DesiredRental], reported, now: datetime) -> int:
    """Deliver the starting rentals whose login the agent reports ready as asked (its user, its
    GPUs); returns how many desired logins are ready. Reports about other rentals (another
    server's, ended ones) are ignored. A login with its own sshd has its port recorded when it
    changes, and is delivered only once its banner is read (`rental_login_probe`, queued: the
    heartbeat never waits on the network); one without (an older agent), at once. A login the
    agent reports "refused" is recorded (`_delivery_refused_record`) for the agents check to end."""
    wanted = {rental.rental_id: rental for rental in desired}
    ready = 0
    for login in reported:
        rental = wanted.get(login.rental_id)
        if rental is None or login.state not in ("ready", "refused"):
            continue
        if login.username != agent_username(rental.rental_id):
            continue
        if sorted(login.gpu_indices) != rental.gpu_indices:
            continue
        if login.state == "refused":
            if not rental.delivered:
                _delivery_refused_record(server=server, rental_id=rental.rental_id, detail=login.detail,
                                         now=now)
            continue
        ready += 1
        if login.ssh_port != rental.ssh_port:
            Rental.objects.filter(pk=rental.rental_id).update(ssh_port=login.ssh_port)
        if login.service_ports != rental.service_ports:
            Rental.objects.filter(pk=rental.rental_id).update(service_ports=login.service_ports)
        if rental.delivered:
            continue
        if login.ssh_port is None:
            rental_deliver(rental_id=rental.rental_id, server_id=server.pk, now=now)
        else:
            transaction.on_commit(functools.partial(_login_probe_queue, rental_id=rental.rental_id))
    return ready


def _delivery_refused_record(*, server: Server, rental_id: int, detail: str, now: datetime) -> None:
    """Mark the rental refused (once: the agent says so at every heartbeat until it ends) and tell
    the seller why, in the server's events. Waiting would not deliver it: the agents check ends it
    as not delivered, with its refund, at its next run instead of at the delivery deadline."""
    marked = Rental.objects.filter(
        pk=rental_id, server_id=server.pk, state=RentalState.STARTING, delivered_at__isnull=True,
        delivery_refused_at__isnull=True,
    ).update(delivery_refused_at=now)
    if marked:
        logger.warning("Rental %s refused by the agent of server %s: %s", rental_id, server.pk, detail)
        ServerEvent.objects.create(server=server, at=now, kind=ServerEventKind.DELIVERY_REFUSED,
                                   detail={"rental_id": rental_id, "detail": detail})


def _login_probe_queue(*, rental_id: int) -> None:
    """Ask a worker to read the rental's banner. A broker that is away costs the heartbeat one
    connection attempt, no retry: the next heartbeat asks again, and an unread probe expires."""
    try:
        tasks.rental_login_probe_task.apply_async(
            args=[rental_id], retry=False, expires=settings.AGENT_HEARTBEAT_SECONDS * 2
        )
    except OperationalError:
        logger.warning("The broker is unreachable: rental %s is probed after a later heartbeat.", rental_id)


def rental_login_probe(*, rental_id: int, now=None) -> Rental | None:
    """Read the SSH banner on the server's host at the rental's own port and, when an SSH server
    answers there, deliver the rental (`rental_deliver`: at most once). Nothing when it does not
    answer within RENTAL_SSH_PROBE_SECONDS (the next heartbeat queues another probe, and the
    not-delivered timeout ends a rental that never answers, with its refund), nor for a rental
    delivered, ended or without a port. No lock is held while the network is read. Returns the
    rental when it was delivered now."""
    rental = (
        Rental.objects.select_related("server")
        .filter(pk=rental_id, state=RentalState.STARTING, delivered_at__isnull=True, ssh_port__isnull=False)
        .first()
    )
    if rental is None:
        return None
    banner = ssh_banner_read(host=rental.server.host, port=rental.ssh_port,
                             timeout=settings.RENTAL_SSH_PROBE_SECONDS,
                             public_only=not settings.RENTAL_SSH_PROBE_PRIVATE_ADDRESSES)
    if banner is None:
        logger.info("Rental %s: no SSH banner on %s port %s yet.", rental_id, rental.server.host,
                    rental.ssh_port)
        return None
    return rental_deliver(rental_id=rental_id, server_id=rental.server_id, now=now)


@transaction.atomic
def rental_deliver(*, rental_id: int, server_id: int, now=None) -> Rental | None:
    """The agent of `server_id` reports the rental's login ready: the rental has its user, is
    delivered, runs if its first hour is paid, and the buyer is emailed how to connect (once).
    Again, or for a rental that ended or is another server's: nothing. Returns the rental when it
    was delivered now."""
    now = now or timezone.now()
    rental = (
        Rental.objects.select_for_update(of=("self",)).select_related("server", "gpu_model", "buyer")
        .filter(pk=rental_id, server_id=server_id, state=RentalState.STARTING, delivered_at__isnull=True)
        .first()
    )
    if rental is None:
        return None
    rental.delivered_at = now
    rental.username = agent_username(rental.pk)
    if rental.paid_through is not None:
        rental.state = RentalState.RUNNING
    rental.save(update_fields=["delivered_at", "username", "state"])
    _rental_ready_email(rental=rental)
    return rental


def _rental_ready_email(*, rental: Rental) -> None:
    server = rental.server
    host_key = ServerAgent.objects.filter(server_id=server.pk).values_list("ssh_host_key", flat=True).first()
    port = rental_ssh_port(rental)
    email_send(
        template="exchange/email/rental_ready", user=rental.buyer, key=f"rental-ready:{rental.pk}",
        context=lambda: {
            "rental": rental, "gpu": rental.gpu_model.name,
            "ssh_command": ssh_connect_command(host=server.host, port=port, username=rental.username),
            "known_hosts": (
                ssh_known_hosts_line(host=server.host, port=port, host_key=host_key) if host_key else ""
            ),
            "rental_url": absolute_url(reverse("exchange:rental", args=[rental.pk])),
        },
    )
