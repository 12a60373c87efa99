"""The whole loop on this machine: the live test server is the exchange, `everx-agent` runs as a
real program against it (as root, with a fake `nvidia-smi` on its PATH), OpenSSH's `sshd` listens
per rental on loopback ports of a test range, and a buyer logs in over SSH to the login the agent
made from their rental.

- a rental's login works on its own sshd's port, with its GPUs' UUIDs in CUDA_VISIBLE_DEVICES; the
  buyer's key does not open the stand-in for the host's sshd; a key the renter adds to its home
  opens neither its own sshd nor the stand-in once `everx-agent harden --apply` gave it the
  DenyGroups drop-in; stopping the rental closes its port and kills what the buyer left running;
- the agent killed: once the threshold has passed the rentals end with their refund, the books
  reconcile, and the agent, back, removes the stale login;
- a shared server: two buyers of one GPU each log in to sandboxes of their own (their GPU only,
  their groups with the exchange's limits, their /tmp, their processes, their port), and the end of
  one takes its processes, port and groups and leaves the other running.

Needs root, `useradd` and `/usr/sbin/sshd` (`make test` installs Debian's openssh-server). The
agent's folder is in /var/lib (never /tmp, which each sandbox covers with its own), its groups
under a parent group of the test's, and the rental ids start at a random point (other runs on the
machine make rental users too); whatever a test leaves, passed or failed, is taken away and checked
gone at its end."""

import contextlib
import io
import json
import os
import pwd
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from django.test import override_settings
from django.utils import timezone
from everx_agent.devices import node_read
from everx_agent.sandbox import cgroup_mounts

from billing.models import RentalCharge
from billing.services import agents_check, order_place
from billing.services.reconciliation import ledger_reconcile
from exchange.models import EndReason, Rental, RentalState, TimeInForce
from exchange.services import rental_stop, server_activate
from sellers.isolation import IsolationLevel, RentalLimits, Reserves, Sellable
from sellers.models import ServerAgent, ServerIsolationReport
from sellers.services import agent_token_create
from tests.agent.conftest import AGENT_SOURCE
from tests.exchange.support import buyer_with, market_set
from tests.factories import OfferFactory, SellerFactory, ServerFactory, UserFactory, operator_make

SSHD = "/usr/sbin/sshd"

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        os.geteuid() != 0 or not Path(SSHD).exists() or shutil.which("useradd") is None,
        reason="needs root, useradd and OpenSSH's sshd (make test installs them)",
    ),
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class StandInSshd:
    """The host's own sshd, played by a test-owned one on a free loopback port: keys from the
    home, the drop-in folder included as Debian's configuration does; `restart()` reads it again."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.port = _free_port()
        self.config = folder / "sshd_config"
        self.log = folder / "sshd.log"
        self.process = None

    def start(self) -> None:
        self.process = subprocess.Popen([SSHD, "-D", "-f", str(self.config), "-E", str(self.log)])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.1)
        self.process.kill()
        pytest.fail(f"sshd did not start: {self.log.read_text() if self.log.exists() else ''}")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture
def host_sshd(tmp_path):
    """OpenSSH's server on a free loopback port, with its own host key and configuration: keys
    only, from the home."""
    folder = tmp_path / "sshd"
    folder.mkdir()
    (folder / "sshd_config.d").mkdir()
    stand_in = StandInSshd(folder)
    host_key = folder / "host_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    stand_in.config.write_text("\n".join([
        f"Include {folder / 'sshd_config.d'}/*.conf",
        f"Port {stand_in.port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}",
        f"PidFile {folder / 'sshd.pid'}",
        "UsePAM no", "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PermitRootLogin no",
        "PubkeyAuthentication yes", "AuthorizedKeysFile .ssh/authorized_keys", "StrictModes yes",
        "PermitUserEnvironment CUDA_VISIBLE_DEVICES,NVIDIA_VISIBLE_DEVICES,CUDA_DEVICE_ORDER",
        "LogLevel VERBOSE", "",
    ]))
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # its privilege separation directory
    stand_in.start()
    yield stand_in
    print(stand_in.log.read_text())  # shown with a failing test's output
    stand_in.stop()


@pytest.fixture
def sshd(host_sshd):
    return host_sshd.port


def _free_ports(count: int) -> int:
    """The first of `count` loopback ports in a row nobody holds: the rentals' sshds' range."""
    for _attempt in range(200):
        first = random.randrange(20000, 32000)  # below the ephemeral range
        if all(_bindable(port) for port in range(first, first + count)):
            return first
    raise AssertionError("no free range of loopback ports")


def _bindable(port: int) -> bool:
    """Nobody holds the port (one only waiting out TIME_WAIT after a session is free, as for sshd)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# Every rental's sandbox covers /tmp, /var/tmp and /dev/shm with its own, so the agent refuses its
# state and run folders there (pytest's tmp_path is in /tmp): the test's are in a folder of /var/lib,
# traversable by the renters (each rental's sshd reads its keys file as the renter).
PLACE_PARENT = Path("/var/lib")


@pytest.fixture
def place():
    """The agent's folder of this test: configuration, state (home images), run folder (the
    rentals' sshds' files), stand-in GPU nodes, deny files and driver parameters."""
    folder = PLACE_PARENT / f"everx-e2e-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    folder.mkdir(mode=0o711)
    folder.chmod(0o711)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)  # when the agent's fixture failed before its own teardown


@pytest.fixture
def rental_ids(django_db_setup, django_db_blocker):
    """Rental ids (so user names evx-<id>) from a random point: on a machine where other test runs
    make rental users too, or a run before left one, this run's users are its own."""
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute("SELECT setval(pg_get_serial_sequence('exchange_rental', 'id'), %s)",
                       [random.randrange(10**6, 10**7)])


@pytest.fixture
def shares(settings, place):
    """The seller's reserves set so that whatever this machine has (2 cores on CI), each GPU's share
    is at least a core, 1 GiB and 1 GB, and the home images stay small: no CPU reserve, the memory
    and disk but 4 GiB and 4 GB of what the agent reports."""
    memory_mib = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0]) // 1024
    settings.ISOLATION_RESERVE_CPU_CORES = 0
    settings.ISOLATION_RESERVE_MEMORY_GIB = max(memory_mib // 1024 - 4, 0)
    settings.ISOLATION_RESERVE_DISK_GB = max(shutil.disk_usage(place).total // 10**9 - 4, 0)


@pytest.fixture
def agent(live_server, place, host_sshd, rental_ids, shares):
    """`everx-agent` as a program: `agent.enroll(token)` writes its configuration into `place`, and
    `agent.once()` runs one heartbeat and reconcile. At the end, whatever happened, everything its
    rentals left is taken away and checked gone (`_leftovers_remove`)."""
    folder = place / "agent"
    run_dir = place / "run"
    bin_folder = folder / "bin"
    bin_folder.mkdir(parents=True)
    # Shared servers here: container runtimes the machine may have are hidden behind clients whose
    # daemon never answers (no container mode, and nothing of the machine's own storage touched).
    for runtime in ("docker", "podman"):
        (bin_folder / runtime).write_text("#!/bin/sh\necho 'no daemon in this test' >&2\nexit 1\n")
        (bin_folder / runtime).chmod(0o755)
    folder.chmod(0o711)  # the stand-in GPU nodes are in it: the renters open them
    cgroup_base = place.name  # the test's own parent group in every hierarchy
    env = {
        "PATH": f"{bin_folder}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}",
        "PYTHONPATH": str(AGENT_SOURCE), "LANG": "C.UTF-8",
        "EVERX_AGENT_CONFIG": str(folder / "config.json"), "EVERX_AGENT_STATE_DIR": str(folder / "state"),
    }

    class Agent:
        def gpus(self, lines: list[str]) -> None:
            """What the fake nvidia-smi prints for the GPUs; MIG is off, and no compute process runs."""
            script = bin_folder / "nvidia-smi"
            script.write_text("#!/bin/sh\ncase \"$1\" in\n"
                              "--query-gpu=mig.mode.current) echo Disabled ;;\n"
                              "--query-compute-apps=*) ;;\n"
                              "*) cat <<'EOF'\n" + "\n".join(lines) + "\nEOF\n;;\nesac\n")
            script.chmod(0o755)
            self.gpu_count = len(lines)

        def run(self, *args: str) -> subprocess.CompletedProcess:
            return subprocess.run(
                [sys.executable, "-m", "everx_agent", *args], env=env, capture_output=True, text=True,
                timeout=60, check=False,
            )

        def enroll(self, token: str, **settings) -> None:
            """Enrolled, then pointed at the test's files; `settings` add to its configuration."""
            done = self.run(
                "enroll", "--url", live_server.url, "--token", token, "--remove-home",
                "--unit-dir", str(folder / "units"),
            )
            assert done.returncode == 0, (done.stdout, done.stderr)
            # The GPU nodes the agent locks: stand-ins in a folder of the test, not /dev.
            devices = folder / "dev"
            devices.mkdir()
            for index in range(self.gpu_count):
                os.mknod(devices / f"nvidia{index}", 0o600 | stat.S_IFCHR, os.makedev(195, index))
            config = json.loads((folder / "config.json").read_text())
            first = _free_ports(8)
            (folder / "config.json").write_text(json.dumps({
                **config, "device_dir": str(devices), "run_dir": str(run_dir), "cgroup_base": cgroup_base,
                "ssh_listen_address": "127.0.0.1",
                "ssh_port_first": first, "ssh_port_last": first + 7,
                # The host's ways in: the stand-in's configuration and deny files of the test.
                "host_sshd_config": str(host_sshd.config),
                "host_sshd_drop_in": str(host_sshd.folder / "sshd_config.d" / "50-everx.conf"),
                "cron_deny": str(folder / "cron.deny"), "at_deny": str(folder / "at.deny"),
                "driver_params": str(folder / "no-driver"), **settings,
            }))
            self.devices = devices
            self.folder = folder

        def port(self, username: str) -> int:
            """The rental's own sshd's port, as the agent reports it."""
            return json.loads((folder / "state" / "ssh_ports.json").read_text())["ports"][username]

        def harden(self, driver_params: Path | None = None) -> subprocess.CompletedProcess:
            params = driver_params or folder / "no-driver"
            return self.run("harden", "--apply", "--driver-params", str(params))

        def gpu_users(self) -> dict[int, tuple[int, ...]]:
            """The user ids each stand-in GPU node lets in, by index."""
            return {index: node_read(self.devices / f"nvidia{index}").acl_users
                    for index in range(self.gpu_count)}

        @contextlib.contextmanager
        def serving(self):
            """`everx-agent run` as the service, until the block ends (SIGTERM, as systemd stops it)."""
            service = subprocess.Popen([sys.executable, "-m", "everx_agent", "run"], env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                yield service
            finally:
                service.terminate()
                output, _ = service.communicate(timeout=30)
                print(output)  # the agent's log, shown with a failing test's output
                assert token_secret not in output

        def once(self) -> None:
            done = self.run("run", "--once")
            self.usernames.update(self.users())
            print(done.stderr)  # the agent's log, shown with a failing test's output
            assert done.returncode == 0, (done.stdout, done.stderr)
            assert token_secret not in done.stderr + done.stdout

        def users(self) -> list[str]:
            state = folder / "state" / "logins.json"
            if not state.exists():
                return []
            return sorted(json.loads(state.read_text()).get("logins", {}))

        def login(self, username: str) -> dict:
            """The login as the agent's state records it."""
            return json.loads((folder / "state" / "logins.json").read_text())["logins"][username]

        def groups(self, rental_id: int) -> list[Path]:
            """The rental's group in each hierarchy that has it."""
            return [mount / cgroup_base / "everx" / f"rental-{rental_id}" for mount in _cgroup_v1_mounts()
                    if (mount / cgroup_base / "everx" / f"rental-{rental_id}").exists()]

    token_secret = ""
    handle = Agent()
    handle.usernames = set()
    handle.place, handle.cgroup_base = place, cgroup_base

    def remember(secret: str) -> None:
        nonlocal token_secret
        token_secret = secret

    handle.remember = remember
    yield handle
    handle.usernames.update(handle.users())
    _leftovers_remove(place=place, run_dir=run_dir, cgroup_base=cgroup_base, usernames=handle.usernames)


def _cgroup_v1_mounts() -> list[Path]:
    return sorted(set(cgroup_mounts(Path("/proc/self/mounts").read_text())[0].values()))


def _leftovers_remove(*, place: Path, run_dir: Path, cgroup_base: str, usernames: set[str]) -> None:
    """Whatever a run left, passed or failed, taken away in the order that lets each step work
    (processes before the mounts they hold, mounts before their loop devices, processes before
    their groups), then checked gone: the rentals' sshds (by their pid files) and every process of
    the test's groups killed, the home images unmounted, their loop devices detached, the groups,
    users and folders removed."""
    for pid_file in (run_dir / "sshd").glob("*.pid"):
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    tops = [mount / cgroup_base for mount in _cgroup_v1_mounts()]
    groups = sorted((folder for top in tops if top.exists() for folder in [top, *top.rglob("*")]
                     if folder.is_dir()), key=lambda path: -len(path.parts))
    deadline = time.monotonic() + 10
    while any(_group_pids(group) for group in groups) and time.monotonic() < deadline:
        for pid in {pid for group in groups for pid in _group_pids(group)}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    for username in sorted(usernames):
        subprocess.run(["pkill", "-KILL", "-u", username], check=False)
    for point in _mounts_of(place, usernames):
        subprocess.run(["umount", "-l", point], check=False)
    for device in _loop_devices_of(place):
        subprocess.run(["losetup", "--detach", f"/dev/{device}"], check=False)
    for group in groups:
        for _attempt in range(100):  # a group emptied a moment ago may still be busy
            with contextlib.suppress(FileNotFoundError):
                try:
                    group.rmdir()
                except OSError:
                    time.sleep(0.05)
                    continue
            break
    for username in sorted(usernames):
        subprocess.run(["userdel", "--remove", username], check=False, capture_output=True)
        shutil.rmtree(f"/home/{username}", ignore_errors=True)
    shutil.rmtree(place, ignore_errors=True)

    assert [name for name in usernames
            if subprocess.run(["id", name], capture_output=True, check=False).returncode == 0] == []
    assert _mounts_of(place, usernames) == []
    assert _loop_devices_of(place) == []
    assert [top for top in tops if top.exists()] == []
    assert not place.exists()


def _group_pids(group: Path) -> list[int]:
    try:
        return [int(pid) for pid in (group / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _mounts_of(place: Path, usernames: set[str]) -> list[str]:
    """The mount points of this machine that are the test's: in its folder, or a rental's home."""
    homes = {f"/home/{name}" for name in usernames}
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return sorted({point for point in points if point in homes or point.startswith(f"{place}/")})


def _loop_devices_of(place: Path) -> list[str]:
    found = []
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        with contextlib.suppress(OSError):
            if backing.read_text().startswith(f"{place}/"):
                found.append(backing.parent.parent.name)
    return found


UUID = "GPU-00000000-0000-0000-0000-00000000000{index}"
H100_LINE = "{index}, " + UUID + ", NVIDIA H100 80GB HBM3, 81559, 34, 0, 0"


def _buyer_key() -> tuple[str, paramiko.PKey]:
    private = ed25519.Ed25519PrivateKey.generate()
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode()
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    return f"{public} buyer@laptop", paramiko.Ed25519Key.from_private_key(io.StringIO(pem))


def _live_processes(uid: int) -> list[str]:
    """The processes of this user that still run: a killed one whose parent has not reaped it yet
    (a zombie, here when PID 1 reaps nothing) is dead."""
    listed = subprocess.run(["ps", "-o", "pid=,stat=", "-U", str(uid)], capture_output=True, text=True)
    return [line.split()[0] for line in listed.stdout.splitlines() if not line.split()[1].startswith("Z")]


def _ssh(port: int, username: str, key: paramiko.PKey, command: str) -> str:
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())  # noqa: S507 (a host key made by this test)
    client.connect("127.0.0.1", port=port, username=username, pkey=key, allow_agent=False,
                   look_for_keys=False, timeout=10, banner_timeout=10, auth_timeout=10)
    try:
        _stdin, stdout, _stderr = client.exec_command(command, timeout=20)
        return stdout.read().decode().strip()
    finally:
        client.close()


@pytest.fixture
def enrolled(gpu_catalog, sshd, agent, rates_eur):
    """An H100 server with 4 GPUs at 127.0.0.1:<sshd's port>, its agent enrolled and the server
    activated and verified, offering its 4 GPUs at US$ 2.50; the market open. Its host reaches no
    shared-server facts (no driver parameters, no hardened host sshd; 2 cores for 4 GPUs), so it
    is sold as a whole server: one rental of all 4 GPUs at a time."""
    market_set(True)
    seller = SellerFactory()
    server = ServerFactory(
        seller=seller, gpu_model=gpu_catalog["h100-sxm"], gpu_count=4, host="127.0.0.1", ssh_port=sshd,
        status="pending", agent_verified_at=None,
    )
    OfferFactory(server=server, gpus_offered=4, price_usd=Decimal("2.50"))
    agent.gpus([H100_LINE.format(index=index) for index in range(4)])
    created = agent_token_create(seller=seller, server_id=server.pk, user=UserFactory())
    agent.remember(created.secret)
    agent.enroll(created.secret)
    server_activate(server_id=server.pk, operator=operator_make("support", is_superuser=True))
    agent.once()
    server.refresh_from_db()
    assert server.agent_verified_at is not None, ServerAgent.objects.filter(server=server).values().first()
    return server


@pytest.fixture
def rates_eur():
    from datetime import UTC, datetime

    from billing.services import fx_rates_load

    fx_rates_load(rates={"EUR": Decimal("0.92")}, valid_from=datetime(2026, 1, 1, tzinfo=UTC), source="test")


def _buy(buyer, server, key: str, gpus: int) -> Rental:
    placed = order_place(
        buyer=buyer, gpu_model_id=server.gpu_model_id, gpus=gpus, max_price_usd=Decimal("3.00"),
        time_in_force=TimeInForce.BUY_NOW, ssh_public_key=key, form_token=uuid.uuid4(),
    )
    assert placed.rental is not None and placed.rental.server_id == server.pk
    return placed.rental


def test_a_buyer_logs_in_to_the_login_the_agent_made_and_loses_it_when_the_rental_ends(
    enrolled, agent, sshd, host_sshd
):
    buyer = buyer_with("100")
    public, private = _buyer_key()
    rental = _buy(buyer, enrolled, public, gpus=4)  # the whole server
    assert rental.state == RentalState.STARTING  # paid, waiting for its login
    assert rental.isolation_level == IsolationLevel.WHOLE

    agent.once()  # the answer lists the login: the agent makes it
    agent.once()  # and reports it ready
    rental.refresh_from_db()
    username = f"evx-{rental.pk}"
    assert (rental.state, rental.username) == (RentalState.RUNNING, username)
    assert agent.users() == [username]
    assert pwd.getpwnam(username).pw_dir == f"/home/{username}"
    uid = pwd.getpwnam(username).pw_uid
    port = agent.port(username)  # the rental's own sshd, on a port of the range
    assert ServerAgent.objects.get(server=enrolled).logins[0]["state"] == "ready"

    # By UUID, as the agent reported them (CUDA renumbers the GPUs a process can open from 0).
    every = ",".join(UUID.format(index=index) for index in range(4))
    assert _ssh(port, username, private, "echo $CUDA_VISIBLE_DEVICES") == every
    assert _ssh(port, username, private, "echo $NVIDIA_VISIBLE_DEVICES") == every
    assert _ssh(port, username, private, "echo $CUDA_DEVICE_ORDER") == "PCI_BUS_ID"
    # The buyer's key is in the agent's file, not the home: the host's own sshd does not take it.
    with pytest.raises(paramiko.AuthenticationException):
        _ssh(sshd, username, private, "true")

    # A key the renter adds to its home opens neither its own sshd nor, once hardened, the host's.
    planted_public, planted = _buyer_key()
    _ssh(port, username, private, f"mkdir -m 700 -p .ssh; echo '{planted_public}' >> .ssh/authorized_keys")
    with pytest.raises(paramiko.AuthenticationException):
        _ssh(port, username, planted, "true")
    assert _ssh(sshd, username, planted, "id -un") == username  # the stand-in takes it: the test can tell
    hardened = agent.harden()
    assert hardened.returncode == 0, (hardened.stdout, hardened.stderr)
    assert "Still needed: reload the host's sshd" in hardened.stdout
    host_sshd.restart()
    with pytest.raises(paramiko.AuthenticationException):
        _ssh(sshd, username, planted, "true")

    # Something the buyer leaves running, detached from the session.
    _ssh(port, username, private, "setsid sleep 1000 >/dev/null 2>&1 < /dev/null &")
    time.sleep(0.5)
    assert _live_processes(uid)

    rental_stop(buyer=buyer, rental_id=rental.pk)
    agent.once()  # the answer no longer lists it: processes killed, user removed

    assert agent.users() == []
    with pytest.raises(KeyError):
        pwd.getpwnam(username)
    assert _live_processes(uid) == []  # killed
    assert _bindable(port)  # its sshd stopped, its port free
    with pytest.raises((paramiko.AuthenticationException, paramiko.SSHException, OSError)):
        _ssh(port, username, private, "true")


def test_a_killed_agent_ends_its_rentals_with_their_refund_and_cleans_up_when_back(enrolled, agent, sshd):
    buyer = buyer_with("100")
    public, private = _buyer_key()
    rental = _buy(buyer, enrolled, public, gpus=4)
    agent.once()
    agent.once()
    rental.refresh_from_db()
    assert rental.state == RentalState.RUNNING
    port = agent.port(f"evx-{rental.pk}")
    charge = RentalCharge.objects.get(rental=rental)
    balance_after_charge = buyer.wallet.__class__.objects.get(user=buyer).balance

    # The agent is gone: nothing heartbeats. The exchange has been watching all along (its own
    # check ran every minute), so once the threshold has passed the server is judged silent.
    last_heard = ServerAgent.objects.get(server=enrolled).last_heartbeat_at
    with override_settings(AGENT_UNREACHABLE_SECONDS=60):
        for minutes in range(0, 4):
            agents_check(now=last_heard + timedelta(minutes=minutes, seconds=1))
    rental.refresh_from_db()
    assert (rental.state, rental.end_reason) == (RentalState.ENDED, EndReason.SERVER_FAILURE)
    refunded = buyer.wallet.__class__.objects.get(user=buyer).balance - balance_after_charge
    assert Decimal("0.00") < refunded < charge.amount  # the unused minutes of the hour paid
    assert ledger_reconcile().problems == []

    agent.once()  # back: the stale login goes, with its sshd
    assert agent.users() == []
    assert _bindable(port)
    with pytest.raises((paramiko.AuthenticationException, paramiko.SSHException, OSError)):
        _ssh(port, f"evx-{rental.pk}", private, "true")
    assert timezone.now() > last_heard


# A shared server ---------------------------------------------------------------------------------

# What a renter's shell measures of its own sandbox: the errno of opening each node named, by name.
OPEN_ERRORS = ("python3 -c 'import errno, os, sys\n"
               "for path in sys.argv[1:]:\n"
               "    try:\n"
               "        os.close(os.open(path, os.O_RDWR))\n"
               "        print(\"opened\")\n"
               "    except OSError as error:\n"
               "        print(errno.errorcode[error.errno])' ")


@pytest.fixture
def ssh_ports():
    """How many ports the seller's range has (None: the agent fixture's eight); a test narrows it
    with `@pytest.mark.parametrize("ssh_ports", [...])`."""
    return None


@pytest.fixture
def shared_server(gpu_catalog, sshd, host_sshd, agent, rates_eur, ssh_ports):
    """A 2-GPU H100 server (one core per GPU on a 2-core machine) whose agent reports what a shared
    server needs. Where this machine lacks a fact, the agent's settings point at files of the test:
    the driver's parameters say `ModifyDeviceFiles: 0` (no NVIDIA driver here), the stand-in host
    sshd carries the DenyGroups drop-in and the cron and at deny files exist (both written by
    `everx-agent harden --apply`). The rest is measured for real: ACLs on the stand-in nodes, the
    cgroup v1 limits and device group, the loop-mounted home, the private /tmp, the hidden
    processes, a rental sshd's self-test."""
    market_set(True)
    seller = SellerFactory()
    server = ServerFactory(
        seller=seller, gpu_model=gpu_catalog["h100-sxm"], gpu_count=2, host="127.0.0.1", ssh_port=sshd,
        status="pending", agent_verified_at=None,
    )
    OfferFactory(server=server, gpus_offered=2, price_usd=Decimal("2.50"))
    agent.gpus([H100_LINE.format(index=index) for index in range(2)])
    created = agent_token_create(seller=seller, server_id=server.pk, user=UserFactory())
    agent.remember(created.secret)
    driver_params = agent.place / "driver-params"
    # As a driver loaded with NVreg_ModifyDeviceFiles=0 says: it never touches the nodes' permissions.
    driver_params.write_text("ModifyDeviceFiles: 0\nDeviceFileUID: 0\nDeviceFileGID: 0\n"
                             "DeviceFileMode: 438\n")
    narrowed = {}
    if ssh_ports:
        first = _free_ports(ssh_ports)
        narrowed = {"ssh_port_first": first, "ssh_port_last": first + ssh_ports - 1}
    agent.enroll(created.secret, driver_params=str(driver_params), **narrowed)
    hardened = agent.harden(driver_params)
    assert hardened.returncode == 0, (hardened.stdout, hardened.stderr)
    host_sshd.restart()  # with the drop-in
    server_activate(server_id=server.pk, operator=operator_make("support", is_superuser=True))
    agent.once()  # its first report
    server.refresh_from_db()
    report = ServerIsolationReport.objects.filter(server=server).first()
    assert report is not None, ServerAgent.objects.filter(server=server).values().first()
    assert (server.isolation_level, report.level) == (IsolationLevel.SHARED,) * 2, report.report
    return server


def _session_groups(text: str) -> dict[str, str]:
    """/proc/self/cgroup (v1): each controller's group path."""
    groups = {}
    for line in text.splitlines():
        _number, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            groups[controller] = path
    return groups


def test_two_buyers_of_one_shared_server_each_log_in_to_a_sandbox_of_their_own(
    shared_server, agent, host_sshd, settings
):
    keys = [_buyer_key() for _buyer in range(2)]
    buyers = [buyer_with("100") for _buyer in range(2)]
    rentals = [_buy(buyer, shared_server, public, gpus=1) for buyer, (public, _private)
               in zip(buyers, keys, strict=True)]
    agent.once()  # the answer lists both logins: the agent makes them, each in its sandbox
    agent.once()  # and reports them ready
    for rental in rentals:
        rental.refresh_from_db()
        assert rental.state == RentalState.RUNNING
    names = [f"evx-{rental.pk}" for rental in rentals]
    uids = [pwd.getpwnam(name).pw_uid for name in names]
    ports = [agent.port(name) for name in names]
    gpus = [agent.login(name)["gpu_indices"] for name in names]
    assert sorted(gpus) == [[0], [1]]
    assert [rental.isolation_level for rental in rentals] == [IsolationLevel.SHARED] * 2
    # Each GPU node opens to its rental's user alone (everx_agent.devices).
    assert agent.gpu_users() == {gpus[me][0]: (uids[me],) for me in (0, 1)}
    nodes = [str(agent.devices / f"nvidia{index}") for (index,) in gpus]

    # The exchange's numbers for a rental of 1 of the server's 2 GPUs, from the hardware the agent reported.
    hardware = ServerIsolationReport.objects.filter(server=shared_server).first().report["hardware"]
    limits = RentalLimits.of(sellable=Sellable.of(hardware=hardware, reserves=Reserves.of_settings()), gpus=1,
                             gpu_count=2, processes_per_gpu=settings.ISOLATION_PROCESSES_PER_GPU)
    mounts = cgroup_mounts(Path("/proc/self/mounts").read_text())[0]
    marker = f"everx-e2e-{uuid.uuid4().hex[:8]}"

    for me, other in ((0, 1), (1, 0)):
        rental, name, port, (public, private) = rentals[me], names[me], ports[me], keys[me]

        def run(command: str, *, _port=port, _name=name, _private=private) -> str:
            return _ssh(_port, _name, _private, command)

        assert run("echo $CUDA_VISIBLE_DEVICES") == UUID.format(index=gpus[me][0])
        # Its session is in its rental's groups, whose limits are the exchange's numbers.
        groups = _session_groups(run("cat /proc/self/cgroup"))
        own_group = f"/{agent.cgroup_base}/everx/rental-{rental.pk}"
        assert {controller: groups[controller] for controller in ("cpu", "memory", "pids", "devices")} == \
            dict.fromkeys(("cpu", "memory", "pids", "devices"), own_group)
        assert (mounts["cpu"] / own_group[1:] / "cpu.cfs_quota_us").read_text() == \
            f"{limits.cpu_cores * 100_000}\n"
        assert (mounts["memory"] / own_group[1:] / "memory.limit_in_bytes").read_text() == \
            f"{limits.memory_mib * 1024 * 1024}\n"
        assert (mounts["pids"] / own_group[1:] / "pids.max").read_text() == f"{limits.processes}\n"
        # Its own GPU opens as far as the (absent) driver; the other's is refused before it.
        own, others = run(OPEN_ERRORS + f"{nodes[me]} {nodes[other]}").split()
        assert own == "ENXIO" and others in ("EACCES", "EPERM")
        # Its /tmp is its own.
        run(f"echo {name} > /tmp/{marker}-{me}")
        assert run(f"cat /tmp/{marker}-{me}") == name
        assert run(f"cat /tmp/{marker}-{other} 2>&1 || echo absent").endswith("absent")
        assert not (Path("/tmp") / f"{marker}-{me}").exists()  # noqa: S108 (the host's: not there either)
        # It sees its own processes only.
        listed = run("ps -e -o uid= | sort -u; echo; stat -c %u /proc/[0-9]* | sort -u").split("\n\n")
        assert [part.split() for part in listed] == [[str(uids[me])], [str(uids[me])]]
        # Its key opens neither the other's port nor, though planted in its home, the host's sshd.
        with pytest.raises(paramiko.AuthenticationException):
            _ssh(ports[other], names[other], private, "true")
        with pytest.raises(paramiko.AuthenticationException):
            _ssh(ports[other], name, private, "true")
        run(f"mkdir -m 700 -p .ssh; echo '{public}' >> .ssh/authorized_keys")
        with pytest.raises(paramiko.AuthenticationException):
            _ssh(host_sshd.port, name, private, "true")
        assert f"User {name} from 127.0.0.1 not allowed because a group is listed in DenyGroups" \
            in host_sshd.log.read_text()

    # The first rental ends: what it left running is killed, its port closed, its groups removed.
    first, second = rentals
    _ssh(ports[0], names[0], keys[0][1], "setsid sleep 1000 >/dev/null 2>&1 < /dev/null &")
    time.sleep(0.5)
    assert _live_processes(uids[0])
    assert len(agent.groups(first.pk)) == len(set(mounts.values()))
    rental_stop(buyer=buyers[0], rental_id=first.pk)
    agent.once()
    assert agent.users() == [names[1]]
    assert _live_processes(uids[0]) == []
    assert _bindable(ports[0])
    assert agent.groups(first.pk) == []
    with pytest.raises((paramiko.AuthenticationException, paramiko.SSHException, OSError)):
        _ssh(ports[0], names[0], keys[0][1], "true")
    # The other runs on.
    assert _ssh(ports[1], names[1], keys[1][1], "echo $CUDA_VISIBLE_DEVICES") == UUID.format(index=gpus[1][0])
    second.refresh_from_db()
    assert second.state == RentalState.RUNNING


@pytest.mark.parametrize("ssh_ports", [1])
def test_a_rental_the_host_cannot_deliver_is_refused_by_its_agent_and_ended_with_its_money_back(
    shared_server, agent, ssh_ports, settings
):
    """One port in the seller's range for two GPUs: the second rental's sshd finds none. Waiting
    would free none, so the agent reports the login refused, the exchange records it from the
    heartbeat, and the agents check ends the rental as not delivered at its next run, every charge
    reversed; the first rental runs on."""
    keys = [_buyer_key() for _buyer in range(2)]
    buyers = [buyer_with("100") for _buyer in range(2)]
    first = _buy(buyers[0], shared_server, keys[0][0], gpus=1)
    agent.once()
    agent.once()
    first.refresh_from_db()
    assert first.state == RentalState.RUNNING
    first_name = f"evx-{first.pk}"

    second = _buy(buyers[1], shared_server, keys[1][0], gpus=1)
    buyers[1].wallet.refresh_from_db()
    assert buyers[1].wallet.balance < Decimal("100")  # its first hour paid
    settings.AGENT_HEARTBEAT_SECONDS = 5  # the service's pace, from the exchange's answers
    with agent.serving():  # its login made, its sshd without a port: refused, and reported soon after
        deadline = time.monotonic() + 60
        while Rental.objects.get(pk=second.pk).delivery_refused_at is None and time.monotonic() < deadline:
            time.sleep(0.5)
    agent.usernames.update(agent.users())

    second.refresh_from_db()
    assert (second.state, second.delivered_at) == (RentalState.STARTING, None)
    assert second.delivery_refused_at is not None
    checked = agents_check(now=timezone.now() + timedelta(minutes=1, seconds=1))

    assert checked.refused_rental_ids == [second.pk]
    second.refresh_from_db()
    assert (second.state, second.end_reason) == (RentalState.ENDED, EndReason.NOT_DELIVERED)
    buyers[1].wallet.refresh_from_db()
    assert buyers[1].wallet.balance == Decimal("100.00")
    assert ledger_reconcile().problems == []
    agent.once()  # the ended rental's login goes; the first one's stays
    assert agent.users() == [first_name]
    assert _ssh(agent.port(first_name), first_name, keys[0][1], "echo ok") == "ok"
    first.refresh_from_db()
    assert first.state == RentalState.RUNNING
    # Ended once: the next run finds nothing more to do.
    assert agents_check(now=timezone.now() + timedelta(minutes=2)).refused_rental_ids == []
