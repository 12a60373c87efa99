"""The service: a heartbeat every `heartbeat_seconds`, the answer reconciled, errors backed off.

The agent keeps going whatever the exchange does. No answer (a refused connection, a timeout,
a 5xx, a 429) waits `random(0, min(300, 5 * 2**n))` seconds after the n-th failure in a row
("full jitter": a thousand agents that lost the exchange together do not come back together),
at least Retry-After for a 429. A refused token (401, 403) is retried at the cap: the seller may
fix it in the portal. Logins stay as they are while the exchange is away; the next answer is
reconciled like any other, so nothing is created twice.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from . import __version__
from .client import ExchangeClient, ExchangeUnreachable, ProblemError
from .clock import rfc3339_format, rfc3339_parse, utc_now
from .config import (
    DEFAULT_DEVICE_CHECK_SECONDS,
    AgentConfig,
    json_file_read,
    private_dir_make,
    private_file_write,
)
from .devices import DriftEvent
from .gpus import GpuReading, gpus_read
from .isolation import IsolationReporter
from .reconcile import Reconciler

LOG = logging.getLogger("everx_agent.loop")

BACKOFF_BASE_SECONDS = 5.0
BACKOFF_CAP_SECONDS = 300.0
MIN_HEARTBEAT_SECONDS = 5
MAX_HEARTBEAT_SECONDS = 3600
# After a change (a login created or removed), the exchange hears of it this soon, not in 30 s:
# a buyer waits for "ready".
REPORT_SOON_SECONDS = 2.0
SKEW_WARNING_SECONDS = 60.0
STATUS_FILE = "status.json"
REFUSED_TOKEN_STATUSES = (401, 403)


class DeviceWatch(threading.Thread):
    """Checks the GPU nodes every `interval` seconds between the loop's passes, writing nothing
    while they are right (Reconciler.devices_check)."""

    def __init__(self, *, reconciler: Reconciler, interval: float = DEFAULT_DEVICE_CHECK_SECONDS):
        super().__init__(name="everx-device-watch", daemon=True)
        self.reconciler = reconciler
        self.interval = interval
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                self.reconciler.devices_check()
            except Exception:  # a bug must not end the watch: logged, tried again
                LOG.exception("unexpected error in the GPU device check")

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=5)


class StatusStore:
    """What `everx-agent status` shows: the last answer (without SSH keys), the last error and the
    clock skew, in `<state dir>/status.json` (0600, atomic)."""

    def __init__(self, *, state_dir: Path):
        self.path = state_dir / STATUS_FILE

    def load(self) -> dict[str, Any]:
        return json_file_read(path=self.path)

    def update(self, **values: Any) -> None:
        data = {**self.load(), **values}
        try:
            private_dir_make(path=self.path.parent)
            private_file_write(path=self.path, text=json.dumps(data, indent=2) + "\n")
        except OSError as error:  # a full disk must not stop the heartbeats, only what status shows
            LOG.warning("the status file %s could not be written: %s", self.path, error.strerror or error)


def disk_free_gb() -> float:
    path = "/home" if Path("/home").is_dir() else "/"
    return round(shutil.disk_usage(path).free / 1e9, 1)


def system_uptime_seconds() -> int:
    try:
        return int(float(Path("/proc/uptime").read_text().split()[0]))
    except (OSError, ValueError, IndexError):
        return int(time.monotonic())


def answer_summary(answer: dict[str, Any]) -> dict[str, Any]:
    """The answer as status shows it: the SSH keys left out (they are in no log or screen)."""
    logins = answer.get("logins")
    return {
        "server_id": answer.get("server_id"),
        "server_time": answer.get("server_time"),
        "heartbeat_seconds": answer.get("heartbeat_seconds"),
        "remove_home": answer.get("remove_home"),
        "logins": [
            {"rental_id": entry.get("rental_id"), "username": str(entry.get("username"))[:40],
             "gpu_indices": entry.get("gpu_indices")}
            for entry in (logins if isinstance(logins, list) else []) if isinstance(entry, dict)
        ],
    }


class Agent:
    """One agent: `step()` is one heartbeat and its reconcile, and says how long to wait."""

    def __init__(self, *, config: AgentConfig, client: ExchangeClient, reconciler: Reconciler,
                 status: StatusStore, read_gpus: Callable[[], GpuReading] = gpus_read,
                 disk_free: Callable[[], float] = disk_free_gb,
                 uptime: Callable[[], int] = system_uptime_seconds,
                 hostname: Callable[[], str] = socket.gethostname,
                 now: Callable[[], datetime] = utc_now, sleep: Callable[[float], None] = time.sleep,
                 uniform: Callable[[float, float], float] = random.uniform,
                 isolation: IsolationReporter | None = None):
        self.config = config
        self.client = client
        self.reconciler = reconciler
        self.status = status
        self.read_gpus = read_gpus
        self.disk_free = disk_free
        self.uptime = uptime
        self.hostname = hostname
        self.now = now
        self.sleep = sleep
        self.uniform = uniform
        self.isolation = isolation  # None: no isolation report (the exchange sells the server whole)
        self.heartbeat_seconds = config.heartbeat_seconds
        self.failures = 0
        self.clock_skew_seconds: float | None = None
        self.last_answer: dict[str, Any] | None = None
        self.stopping = False
        self.sleeping = False

    def heartbeat_body(self, *, drifts: Iterable[DriftEvent] = ()) -> dict[str, Any]:
        reading = self.read_gpus()
        body = {
            "agent_version": __version__,
            "sent_at": rfc3339_format(self.now()),
            "uptime_seconds": self.uptime(),
            "hostname": self.hostname(),
            "disk_free_gb": self.disk_free(),
            "gpus": reading.gpus,
            "gpu_error": reading.error,
            "logins": self.reconciler.reports(),
            **({"ssh_host_key": self.reconciler.sshd.host_key()} if self.reconciler.sshd else {}),
        }
        drifts = [drift.to_json() for drift in drifts]
        if drifts:  # an optional field: absent when there is nothing to say
            body["device_drifts"] = drifts
        if self.isolation is not None:
            uuids = tuple(gpu["uuid"] for gpu in reading.gpus if gpu.get("uuid"))
            report = self.isolation.report(server_id=self.server_id(), gpu_uuids=uuids)
            if report is not None:
                body["isolation"] = report
        return body

    def server_id(self) -> int | None:
        """This server's id from the exchange's last answer (None before the first one)."""
        server_id = (self.last_answer or {}).get("server_id")
        return server_id if isinstance(server_id, int) and not isinstance(server_id, bool) else None

    def heartbeat(self) -> dict[str, Any]:
        """One heartbeat, its answer remembered; raises the client's errors. The drifts it carries
        are forgotten once it is answered, not before (a lost heartbeat sends them again)."""
        drifts = self.reconciler.device_drifts.pending()
        body = self.heartbeat_body(drifts=drifts)
        answer = self.client.heartbeat(body)
        self.reconciler.device_drifts.drop(drifts)
        self.last_answer = answer
        self._clock_check(answer.get("server_time"))
        self.status.update(last_answer=answer_summary(answer), last_answer_at=rfc3339_format(self.now()),
                           clock_skew_seconds=self.clock_skew_seconds, isolation=body.get("isolation"))
        return answer

    def step(self) -> float:
        try:
            answer = self.heartbeat()
        except ProblemError as problem:
            return self._refused(problem)
        except ExchangeUnreachable as error:
            self._error(f"the exchange could not be reached: {error.reason}")
            return self.backoff()
        self.failures = 0
        self._settings_take(answer)
        self.reconciler.templates_take(answer.get("templates"))
        refused_before = self.refused_logins()
        changes = self.reconciler.reconcile(entries=answer.get("logins"),
                                            remove_home=self.remove_home(answer))
        # A login refused for the first time is news too: its buyer gets their money back sooner.
        news = changes or not self.refused_logins() <= refused_before
        return min(REPORT_SOON_SECONDS, self.heartbeat_seconds) if news else float(self.heartbeat_seconds)

    def refused_logins(self) -> set[str]:
        """The logins this host cannot deliver as sold, as the last pass left them."""
        return {name for name, report in self.reconciler.failures.items() if report.state == "refused"}

    def run(self, *, once: bool = False) -> int:
        """The service loop, until `stop()`; with `once`, one step: 0 when the exchange answered."""
        LOG.info("everx-agent %s reporting to %s every %d s", __version__, self.client.url,
                 self.heartbeat_seconds)
        watched = not once and self.reconciler.device_dir is not None
        watch = DeviceWatch(reconciler=self.reconciler, interval=self.config.device_check_seconds) \
            if watched else None
        if watch:
            watch.start()
        try:
            return self._loop(once=once)
        finally:
            if watch:
                watch.stop()

    def _loop(self, *, once: bool) -> int:
        while not self.stopping:
            try:
                delay = self.step()
            except Exception:  # a bug must not stop the logins' upkeep: logged, retried
                LOG.exception("unexpected error in the heartbeat")
                delay = self.backoff()
            if once:
                return 0 if self.failures == 0 else 1
            if self.stopping:
                break
            self.sleeping = True
            try:
                self.sleep(delay)
            finally:
                self.sleeping = False
        LOG.info("stopped")
        return 0

    def stop(self) -> None:
        """For SIGTERM: a pass under way (a useradd, a file being written) finishes first; a
        sleep ends at once."""
        self.stopping = True
        if self.sleeping:
            raise SystemExit(0)

    def backoff(self, *, at_least: float = 0.0) -> float:
        cap = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** min(self.failures, 16))
        self.failures += 1
        return max(at_least, self.uniform(0.0, cap))

    def remove_home(self, answer: dict[str, Any]) -> bool:
        """The exchange's setting or the seller's `--remove-home`: either wipes the buyer's home."""
        return answer.get("remove_home") is True or self.config.remove_home

    def _refused(self, problem: ProblemError) -> float:
        said = f"{problem.status} {problem.code or problem.title}".strip()
        if problem.title and problem.code:
            said += f" ({problem.title})"
        if problem.detail and problem.detail != problem.title:
            said += f": {problem.detail}"
        if problem.status in REFUSED_TOKEN_STATUSES:
            self._error(f"the exchange refused this agent: {said}; the logins are kept as they are")
            self.failures += 1
            return BACKOFF_CAP_SECONDS
        self._error(f"the exchange answered {said}")
        return self.backoff(at_least=(problem.retry_after or 0.0) if problem.status == 429 else 0.0)

    def _error(self, text: str) -> None:
        LOG.error("%s", text)
        self.status.update(last_error={"at": rfc3339_format(self.now()), "text": text},
                           consecutive_failures=self.failures + 1)

    def _settings_take(self, answer: dict[str, Any]) -> None:
        seconds = answer.get("heartbeat_seconds")
        if isinstance(seconds, int) and not isinstance(seconds, bool) \
                and MIN_HEARTBEAT_SECONDS <= seconds <= MAX_HEARTBEAT_SECONDS:
            self.heartbeat_seconds = seconds
        self.status.update(consecutive_failures=0)

    def _clock_check(self, server_time: object) -> None:
        moment = rfc3339_parse(server_time)
        if moment is None:
            return
        skew = round((moment - self.now()).total_seconds(), 1)
        was_off = self.clock_skew_seconds is not None and abs(self.clock_skew_seconds) > SKEW_WARNING_SECONDS
        self.clock_skew_seconds = skew
        if abs(skew) > SKEW_WARNING_SECONDS and not was_off:
            LOG.warning("this machine's clock is %.0f s %s the exchange's: set up NTP (timedatectl "
                        "set-ntp true)", abs(skew), "behind" if skew > 0 else "ahead of")
        elif abs(skew) <= SKEW_WARNING_SECONDS and was_off:
            LOG.info("the clock agrees with the exchange's again")
