"""Helpers of the heartbeat tests: a server with its agent token, and the report its agent would
send when its GPUs match the registration (or not)."""

import socket
import threading
from dataclasses import replace
from datetime import UTC, datetime

from django.test import Client
from django.test.client import ClientHandler

from exchange.services import DriftReport, GpuReport, HeartbeatReport, LoginReport
from marketplace.wsgi import AGENT_MIDDLEWARE, ShortStackHandler
from sellers.isolation import FACTS
from sellers.services import agent_token_create
from tests.factories import ServerFactory, UserFactory

# What nvidia-smi says of the catalog's GPUs (catalog/data/gpu_models.json).
SMI = {
    "h100-sxm": ("NVIDIA H100 80GB HBM3", 81559),
    "a100-sxm": ("NVIDIA A100-SXM4-80GB", 81920),
    "l40s": ("NVIDIA L40S", 46068),
    "rtx-4090": ("NVIDIA GeForce RTX 4090", 24564),
}


class _ShortStackClientHandler(ClientHandler):
    middleware = AGENT_MIDDLEWARE
    load_middleware = ShortStackHandler.load_middleware


class AgentClient(Client):
    """A test client that serves the agents' paths as production does (marketplace.wsgi): under
    the short middleware stack, not settings.MIDDLEWARE."""

    def __init__(self, **defaults):
        super().__init__(**defaults)
        self.handler = _ShortStackClientHandler(enforce_csrf_checks=False)


def enrolled(gpu_model, **fields):
    """A server of `gpu_model` (active, verified unless told) and its agent token's secret. Its
    agent has sent no isolation report yet: no sellable hardware (logins carry no limits) and,
    unless told, the level of an agent without one, "whole server"."""
    no_report = {"isolation_level": "whole", "sellable_cpu_cores": None, "sellable_memory_mib": None,
                 "sellable_disk_gb": None}
    server = ServerFactory(gpu_model=gpu_model, **no_report | fields)
    created = agent_token_create(seller=server.seller, server_id=server.pk, user=UserFactory())
    return server, created.secret


def gpus_of(server, *, count=None, name=None, memory=None, ecc=0) -> tuple[GpuReport, ...]:
    smi_name, smi_memory = SMI.get(server.gpu_model.slug, (f"NVIDIA {server.gpu_model.name}", 81559))
    return tuple(
        GpuReport(index=index, uuid=f"GPU-{server.pk}-{index}", name=name or smi_name,
                  memory_total_mib=smi_memory if memory is None else memory, temperature_c=35,
                  utilization_percent=0, ecc_uncorrected=ecc)
        for index in range(server.gpu_count if count is None else count)
    )


def report_for(server, *, logins=(), sent_at=None, **changes) -> HeartbeatReport:
    """The heartbeat of `server`'s agent: GPUs as registered, the logins given as
    (rental, indices) ready, unless `changes` say otherwise."""
    report = HeartbeatReport(
        agent_version="1.0.0", sent_at=sent_at or datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        uptime_seconds=12345, hostname="gpu-01", disk_free_gb=812.5, gpus=gpus_of(server), gpu_error=None,
        logins=tuple(ready(rental, indices) for rental, indices in logins),
    )
    return replace(report, **changes)


def isolation_of(server, *, container=None, **facts) -> dict:
    """The isolation report of a shared-server host (64 cores, 512 GiB, 3500 GB; every fact
    measured true but MIG) for `server`, with the facts given changed."""
    return {
        "version": 1, "server_id": server.pk,
        "hardware": {"cpu_cores": 64, "memory_mib": 512 * 1024, "disk_gb": 3500},
        "backend": "v1",
        "facts": {name: facts.get(name, name != "mig_enabled") for name in FACTS},
        "container": container,
    }


def drift(node="nvidia3", *, at="2026-12-04T21:00:00Z", found="mode 0666 owner 0:0, no ACL") -> DriftReport:
    return DriftReport(at=at, node=node, found=found)


def ready(rental, indices, *, state="ready", ssh_port=None, service_ports=None) -> LoginReport:
    return LoginReport(rental_id=rental.pk, username=f"evx-{rental.pk}", state=state,
                       gpu_indices=tuple(indices), ssh_port=ssh_port, service_ports=service_ports or {})


def body_of(report: HeartbeatReport) -> dict:
    """The JSON the agent posts for this report."""
    return {
        "agent_version": report.agent_version, "sent_at": report.sent_at,
        "uptime_seconds": report.uptime_seconds,
        "hostname": report.hostname, "disk_free_gb": report.disk_free_gb, "gpu_error": report.gpu_error,
        "gpus": [vars(gpu) for gpu in report.gpus],
        "logins": [{**vars(login), "gpu_indices": list(login.gpu_indices)} for login in report.logins],
        **({"isolation": report.isolation} if report.isolation is not None else {}),
        **({"device_drifts": [vars(item) for item in report.device_drifts]} if report.device_drifts else {}),
        **({"ssh_host_key": report.ssh_host_key} if report.ssh_host_key else {}),
    }


class BannerListener:
    """A TCP listener on 127.0.0.1 that answers every connection with `greeting` (an sshd's banner,
    or garbage), or says nothing for `silent` seconds, in a thread of its own."""

    def __init__(self, greeting: bytes = b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n", *, silent: float = 0):
        self.greeting, self.silent = greeting, silent
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.socket.settimeout(0.05)  # so that the thread sees the end of the test
        self.accepted = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                connection, _address = self.socket.accept()
            except TimeoutError:
                continue
            with connection:
                self.accepted += 1
                self.stop.wait(self.silent)
                try:
                    connection.sendall(self.greeting)
                except OSError:  # the exchange gave up first
                    continue

    def __enter__(self) -> "BannerListener":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.socket.close()


def closed_port() -> int:
    """A port of 127.0.0.1 nothing listens on (one just freed)."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        return taken.getsockname()[1]
