"""Simulated host agents for the demo servers of `make run`, which have no machine behind them.

Each demo server gets an agent token whose secret is derived from the checkout's SECRET_KEY (so
the beat task can present it again without storing it), and every 15 seconds
(`demo.agents_heartbeat`, which only the demo app schedules) its "agent" calls the real service,
`exchange.services.agent_heartbeat_receive`, with the GPUs its registration says it has, then
reports every login the answer asks for as ready: a buyer's rental starts within seconds, as
with a real agent. A server whose seller enrolled an agent of its own (another live token) is
left to it.
"""

import base64
import hashlib
import hmac
import json
import logging
from datetime import UTC, datetime

from django.conf import settings
from django.db import IntegrityError, transaction

from accounts.tokens import PREFIX_LENGTH, token_secret_hash
from catalog.selectors import gpu_nvidia_smi_names
from exchange.exceptions import AgentServerRetired, AgentTokenInvalid, HeartbeatInvalid
from exchange.services import GpuReport, HeartbeatReport, LoginReport, agent_heartbeat_receive
from sellers.models import AgentToken, Server, ServerStatus

logger = logging.getLogger(__name__)

DEMO_AGENT_VERSION = "demo"


def demo_agent_secret(*, server_id: int) -> str:
    """The demo agent token of a server: `evxa_` and 40 characters, the same at every call."""
    digest = hmac.new(settings.SECRET_KEY.encode(), f"demo-agent:{server_id}".encode(), hashlib.sha256)
    return "evxa_" + base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")[:40]


def demo_agent_enroll(*, server: Server) -> str | None:
    """Give the demo server its demo agent token (once); None when the server has another live
    token (its seller enrolled a real agent), which the demo never revokes."""
    secret = demo_agent_secret(server_id=server.pk)
    key_hash = token_secret_hash(secret)
    live = AgentToken.objects.filter(server=server, revoked_at__isnull=True)
    found = list(live.values_list("key_hash", flat=True))
    if found:
        return secret if found == [key_hash] else None
    try:
        with transaction.atomic():
            AgentToken.objects.create(server=server, key_hash=key_hash, prefix=secret[:PREFIX_LENGTH])
    except IntegrityError:  # a token appeared meanwhile
        return demo_agent_enroll(server=server)
    return secret


def _demo_report(*, server: Server, logins, templates=()) -> HeartbeatReport:
    """What an agent on a server exactly as registered would see; a container login's template's
    ports besides 22 (Jupyter's 8888) "published" on ports of the agent's default range."""
    ports_of = {template.image.rsplit("@", 1)[1]: [port for port in template.ports if port != 22]
                for template in templates}
    gpu = server.gpu_model
    name = next(iter(gpu_nvidia_smi_names(slug=gpu.slug)), f"NVIDIA {gpu.name}")
    return HeartbeatReport(
        agent_version=DEMO_AGENT_VERSION, sent_at=datetime.now(UTC),
        hostname=server.name, uptime_seconds=0, disk_free_gb=500.0,
        gpus=tuple(
            GpuReport(index=index, uuid=f"GPU-demo-{server.pk}-{index}", name=name,
                      memory_total_mib=gpu.memory_gb * 1024, temperature_c=40, utilization_percent=0,
                      ecc_uncorrected=0)
            for index in range(server.gpu_count)
        ),
        logins=tuple(
            LoginReport(rental_id=login.rental_id, username=login.username, state="ready",
                        gpu_indices=tuple(login.gpu_indices),
                        service_ports={str(inside): 41000 + (login.rental_id + number) % 100
                                       for number, inside in enumerate(ports_of.get(login.template, []))})
            for login in logins
        ),
    )


def demo_agent_heartbeat(*, server: Server) -> bool:
    """One heartbeat of the server's demo agent, and a second reporting the logins the first asked
    for as ready (the simulated agent "creates" them at once). False when it has no demo token."""
    secret = demo_agent_enroll(server=server)
    if secret is None:
        return False
    try:
        desired = agent_heartbeat_receive(
            secret=secret, report=_demo_report(server=server, logins=()), address=None
        )
        if desired.logins:
            agent_heartbeat_receive(
                secret=secret, address=None,
                report=_demo_report(server=server, logins=desired.logins, templates=desired.templates),
            )
    except (AgentTokenInvalid, AgentServerRetired, HeartbeatInvalid) as refused:
        logger.warning("Demo agent of server %s refused: %s", server.pk, refused.code)
        return False
    return True


def demo_sellers(path) -> list[str]:
    return [entry["slug"] for entry in json.loads(path.read_text(encoding="utf-8"))["sellers"]]


def demo_agents_heartbeat(*, seller_slugs: list[str]) -> int:
    """A heartbeat of every demo server's agent (retired ones have none); returns how many sent one."""
    servers = (
        Server.objects.filter(seller__slug__in=seller_slugs).exclude(status=ServerStatus.RETIRED)
        .select_related("gpu_model").order_by("pk")
    )
    return sum(demo_agent_heartbeat(server=server) for server in servers)
