"""The host agent is its own package (agent/src/everx_agent), standard library only, never Django:
its tests put it on the path, swap the Unix side for `FakeSystem` and talk to `FakeExchange`, a
real HTTP server on 127.0.0.1 in a thread that answers as docs/agent.md says."""

import grp
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

AGENT_SOURCE = Path(__file__).resolve().parents[2] / "agent" / "src"
if str(AGENT_SOURCE) not in sys.path:
    sys.path.insert(0, str(AGENT_SOURCE))

from everx_agent.client import ExchangeClient  # noqa: E402  (needs the path above)
from everx_agent.config import AgentConfig  # noqa: E402
from everx_agent.gpus import GpuReading  # noqa: E402
from everx_agent.loop import Agent, StatusStore  # noqa: E402
from everx_agent.reconcile import Reconciler, StateStore  # noqa: E402
from everx_agent.system import RENTER_GROUP, SystemCommandError  # noqa: E402

TOKEN = "evxa_" + "Tk3n" * 10
SERVER_TIME = "2026-12-02T01:00:00Z"
H100 = {"index": 0, "uuid": "GPU-3f2c8a51-7d4e-1b9a-c0d2-5e6f7a8b9c01", "name": "NVIDIA H100 80GB HBM3",
        "memory_total_mib": 81559, "temperature_c": 34, "utilization_percent": 0, "ecc_uncorrected": 0}


def public_key(comment: str = "buyer@laptop") -> str:
    """A fresh OpenSSH ed25519 public key line."""
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    text = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return f"{text} {comment}"


def login(rental_id: int, key: str, gpu_indices=(0,), username: str | None = None) -> dict:
    """One entry of an answer's `logins`."""
    return {"rental_id": rental_id, "username": username or f"evx-{rental_id}", "ssh_public_key": key,
            "gpu_indices": list(gpu_indices)}


class FakeSystem:
    """The Unix side in memory. `actions` lists what was done, in order; `fail[method] = text`
    makes a method raise SystemCommandError(text)."""

    def __init__(self, users: dict[str, str] | None = None):
        self.users: dict[str, str] = dict(users or {})  # name -> comment
        self.files: dict[str, dict[str, str]] = {}
        self.processes: dict[str, int] = {}
        self.actions: list[tuple] = []
        self.fail: dict[str, str] = {}

    def _check(self, method: str) -> None:
        if method in self.fail:
            raise SystemCommandError(self.fail[method])

    def user_exists(self, *, username: str) -> bool:
        return username in self.users

    def user_comment(self, *, username: str) -> str | None:
        return self.users.get(username)

    def user_uid(self, *, username: str) -> int:
        if username not in self.users:
            raise KeyError(username)
        return 60000 + int(username.split("-", 1)[1])

    def user_create(self, *, username: str, comment: str) -> None:
        self._check("user_create")
        self.actions.append(("useradd", username))
        self.users[username] = comment

    def login_files_write(self, *, username: str, authorized_keys: str, gpu_exports: str) -> None:
        self._check("login_files_write")
        self.actions.append(("write", username))
        self.files[username] = {"authorized_keys": authorized_keys, ".everx-gpus": gpu_exports}

    def login_files_remove(self, *, username: str) -> None:
        self._check("login_files_remove")
        self.actions.append(("unkey", username))
        self.files.pop(username, None)

    def user_processes_kill(self, *, username: str) -> None:
        self._check("user_processes_kill")
        self.actions.append(("kill", username))
        self.processes[username] = 0

    def user_delete(self, *, username: str, remove_home: bool) -> None:
        self._check("user_delete")
        self.actions.append(("userdel", username, remove_home))
        del self.users[username]

    def created(self) -> list[str]:
        return [action[1] for action in self.actions if action[0] == "useradd"]


class FakeExchange:
    """The heartbeat endpoint. `answer_logins` is the desired state it answers with; `script` is a
    list of one-off replies used first, each a dict with any of status, body, headers, delay
    (seconds before answering) and `drop` (close the connection without a word)."""

    def __init__(self):
        self.answer_logins: list[dict] = []
        self.answer_templates: list[dict] | None = None  # None: an exchange without templates
        self.server_time = SERVER_TIME
        self.heartbeat_seconds = 30
        self.remove_home = False
        self.script: list[dict] = []
        self.requests: list[dict] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self) -> dict:
        answer = {"server_id": 3, "server_time": self.server_time,
                  "heartbeat_seconds": self.heartbeat_seconds, "remove_home": self.remove_home,
                  "logins": self.answer_logins}
        if self.answer_templates is not None:
            answer["templates"] = self.answer_templates
        return answer

    def problem(self, status: int, code: str, title: str, **extra) -> dict:
        return {"status": status, "headers": extra.pop("headers", {}), "body": {
            "type": f"{self.url}/api/problems/{code}", "title": title, "status": status, "code": code,
            "detail": extra.pop("detail", title)}}

    def bodies(self) -> list[dict]:
        return [request["body"] for request in self.requests]

    def _handler(self):
        exchange = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                exchange.requests.append({"path": self.path, "headers": dict(self.headers),
                                          "body": json.loads(raw)})
                reply = exchange.script.pop(0) if exchange.script else {}
                time.sleep(reply.get("delay", 0))
                if reply.get("drop"):
                    self.close_connection = True
                    return
                status = reply.get("status", 200)
                body = reply.get("body", exchange.answer() if status == 200 else {})
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                media = "application/json" if status < 400 else "application/problem+json"
                self.send_header("Content-Type", media)
                self.send_header("Content-Length", str(len(data)))
                for name, value in reply.get("headers", {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format, *args):  # the tests' output stays quiet
                pass

        return Handler


@pytest.fixture(scope="session", autouse=True)
def renter_group():
    """The renters' group that creating a real rental user makes: removed at the end when the
    tests made it."""
    try:
        grp.getgrnam(RENTER_GROUP)
        existed = True
    except KeyError:
        existed = False
    yield RENTER_GROUP
    if not existed:
        subprocess.run(["groupdel", RENTER_GROUP], check=False, capture_output=True)


@pytest.fixture
def exchange():
    fake = FakeExchange()
    fake.thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


@pytest.fixture
def fake_system() -> FakeSystem:
    return FakeSystem()


@pytest.fixture
def state_dir(tmp_path) -> Path:
    return tmp_path / "state"


class Recorder:
    """The loop's sleep and random: `sleeps` and `ranges` keep what it asked; the random answers
    the top of the range unless `pick` says otherwise."""

    def __init__(self):
        self.sleeps: list[float] = []
        self.ranges: list[tuple[float, float]] = []
        self.pick = lambda low, high: high

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def uniform(self, low: float, high: float) -> float:
        self.ranges.append((low, high))
        return self.pick(low, high)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def make_agent(exchange, fake_system, state_dir, recorder):
    """An agent against the fake exchange and system; `make_agent(url=..., timeout=...)` for
    another address or a shorter timeout, `now=` for another local clock, `isolation=` for an
    isolation report (none by default)."""
    from everx_agent.clock import rfc3339_parse

    def make(*, url: str | None = None, timeout: float = 2.0, system=None, now=None, isolation=None,
             **config) -> Agent:
        settings = AgentConfig(url=url or exchange.url, token=TOKEN, state_dir=str(state_dir), **config)
        return Agent(
            config=settings, client=ExchangeClient(url=settings.url, token=TOKEN, timeout=timeout),
            reconciler=Reconciler(system=system or fake_system, store=StateStore(state_dir=state_dir),
                                  now=lambda: SERVER_TIME),
            status=StatusStore(state_dir=state_dir),
            read_gpus=lambda: GpuReading(gpus=[H100]), disk_free=lambda: 812.5, uptime=lambda: 12345,
            hostname=lambda: "gpu-01", now=now or (lambda: rfc3339_parse(SERVER_TIME)),
            sleep=recorder.sleep, uniform=recorder.uniform, isolation=isolation,
        )

    return make


@pytest.fixture
def ramfs(tmp_path) -> Path:
    """A folder on a ramfs, which keeps no extended attributes (no POSIX ACLs), as some `/dev`s;
    unmounted at the end. Needs root."""
    if os.geteuid() != 0:
        pytest.skip("mounting a ramfs needs root")
    folder = tmp_path / "ramfs"
    folder.mkdir()
    subprocess.run(["mount", "-t", "ramfs", "ramfs", str(folder)], check=True)
    yield folder
    subprocess.run(["umount", str(folder)], check=True)
