"""The whole loop on this machine: the live test server is the exchange, `everx-agent` runs as a
real program against it (as root, with a fake `nvidia-smi` on its PATH), OpenSSH's `sshd` listens
on a loopback port, and a buyer logs in over SSH to the login the agent made from their rental.

- a rental's login works, with its GPUs' UUIDs in CUDA_VISIBLE_DEVICES; stopping the rental makes
  the next login fail and kills what the buyer left running;
- the agent killed: once the threshold has passed the rentals end with their refund, the books
  reconcile, and the agent, back, removes the stale login.

Needs root, `useradd` and `/usr/sbin/sshd` (`make test` installs Debian's openssh-server); the
test removes every user it created, and stops the one sshd it started."""

import io
import json
import os
import pwd
import shutil
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

from billing.models import RentalCharge
from billing.services import agents_check, order_place
from billing.services.reconciliation import ledger_reconcile
from exchange.models import EndReason, Rental, RentalState, TimeInForce
from exchange.services import rental_stop, server_activate
from sellers.models import ServerAgent
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


@pytest.fixture
def sshd(tmp_path):
    """OpenSSH's server on a free loopback port, with its own host key and configuration: keys
    only, and the GPU variables of authorized_keys' environment= options let through."""
    port = _free_port()
    folder = tmp_path / "sshd"
    folder.mkdir()
    host_key = folder / "host_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    config = folder / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}", f"PidFile {folder / 'sshd.pid'}",
        "UsePAM no", "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PermitRootLogin no",
        "PubkeyAuthentication yes", "AuthorizedKeysFile .ssh/authorized_keys", "StrictModes yes",
        "PermitUserEnvironment CUDA_VISIBLE_DEVICES,NVIDIA_VISIBLE_DEVICES,CUDA_DEVICE_ORDER",
        "LogLevel VERBOSE", "",
    ]))
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # its privilege separation directory
    log = folder / "sshd.log"
    process = subprocess.Popen([SSHD, "-D", "-f", str(config), "-E", str(log)])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    else:
        process.kill()
        pytest.fail(f"sshd did not start: {log.read_text() if log.exists() else ''}")
    yield port
    print(log.read_text())  # shown with a failing test's output
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture
def agent(live_server, tmp_path):
    """`everx-agent` as a program: `agent.enroll(token)` writes its configuration into tmp_path, and
    `agent.once()` runs one heartbeat and reconcile. Every user its state names is removed at the end."""
    folder = tmp_path / "agent"
    bin_folder = folder / "bin"
    bin_folder.mkdir(parents=True)
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

        def run(self, *args: str) -> subprocess.CompletedProcess:
            return subprocess.run(
                [sys.executable, "-m", "everx_agent", *args], env=env, capture_output=True, text=True,
                timeout=60, check=False,
            )

        def enroll(self, token: str) -> None:
            done = self.run(
                "enroll", "--url", live_server.url, "--token", token, "--remove-home",
                "--unit-dir", str(folder / "units"), "--sshd-config-dir", str(folder / "sshd"),
            )
            assert done.returncode == 0, (done.stdout, done.stderr)
            # The GPU nodes the agent locks: four stand-ins in a folder of the test, not /dev.
            devices = folder / "dev"
            devices.mkdir()
            for index in range(4):
                os.mknod(devices / f"nvidia{index}", 0o600 | stat.S_IFCHR, os.makedev(195, index))
            config = json.loads((folder / "config.json").read_text())
            (folder / "config.json").write_text(json.dumps({**config, "device_dir": str(devices)}))
            self.devices = devices

        def gpu_users(self) -> dict[int, tuple[int, ...]]:
            """The user ids each stand-in GPU node lets in, by index."""
            return {index: node_read(self.devices / f"nvidia{index}").acl_users for index in range(4)}

        def once(self) -> None:
            done = self.run("run", "--once")
            assert done.returncode == 0, (done.stdout, done.stderr)
            assert token_secret not in done.stderr + done.stdout

        def users(self) -> list[str]:
            state = folder / "state" / "logins.json"
            if not state.exists():
                return []
            return sorted(json.loads(state.read_text()).get("logins", {}))

    token_secret = ""
    handle = Agent()

    def remember(secret: str) -> None:
        nonlocal token_secret
        token_secret = secret

    handle.remember = remember
    yield handle
    for username in handle.users():
        subprocess.run(["pkill", "-KILL", "-u", username], check=False)
        subprocess.run(["userdel", "--remove", username], check=False, capture_output=True)


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
    activated and verified, offering its 4 GPUs at US$ 2.50; the market open."""
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
    enrolled, agent, sshd
):
    buyer = buyer_with("100")
    public, private = _buyer_key()
    rental = _buy(buyer, enrolled, public, gpus=2)
    assert rental.state == RentalState.STARTING  # paid, waiting for its login

    agent.once()  # the answer lists the login: the agent makes it
    agent.once()  # and reports it ready
    rental.refresh_from_db()
    username = f"evx-{rental.pk}"
    assert (rental.state, rental.username) == (RentalState.RUNNING, username)
    assert agent.users() == [username]
    assert pwd.getpwnam(username).pw_dir == f"/home/{username}"
    uid = pwd.getpwnam(username).pw_uid

    # By UUID, as the agent reported them (CUDA renumbers the GPUs a process can open from 0).
    both = ",".join(UUID.format(index=index) for index in (0, 1))
    assert _ssh(sshd, username, private, "echo $CUDA_VISIBLE_DEVICES") == both
    assert _ssh(sshd, username, private, "echo $NVIDIA_VISIBLE_DEVICES") == both
    assert _ssh(sshd, username, private, "echo $CUDA_DEVICE_ORDER") == "PCI_BUS_ID"
    # Something the buyer leaves running, detached from the session.
    _ssh(sshd, username, private, "setsid sleep 1000 >/dev/null 2>&1 < /dev/null &")
    time.sleep(0.5)
    assert _live_processes(uid)

    rental_stop(buyer=buyer, rental_id=rental.pk)
    agent.once()  # the answer no longer lists it: processes killed, user removed

    assert agent.users() == []
    with pytest.raises(KeyError):
        pwd.getpwnam(username)
    assert _live_processes(uid) == []  # killed
    with pytest.raises((paramiko.AuthenticationException, paramiko.SSHException, OSError)):
        _ssh(sshd, username, private, "true")


def test_two_rentals_on_one_server_get_disjoint_gpus(enrolled, agent, sshd):
    first_key, first_private = _buyer_key()
    second_key, second_private = _buyer_key()
    first = _buy(buyer_with("100"), enrolled, first_key, gpus=2)
    second = _buy(buyer_with("100"), enrolled, second_key, gpus=2)
    agent.once()
    agent.once()
    first_gpus, second_gpus = (",".join(UUID.format(index=index) for index in pair)
                               for pair in ((0, 1), (2, 3)))
    assert _ssh(sshd, f"evx-{first.pk}", first_private, "echo $CUDA_VISIBLE_DEVICES") == first_gpus
    assert _ssh(sshd, f"evx-{second.pk}", second_private, "echo $CUDA_VISIBLE_DEVICES") == second_gpus
    # Each GPU node opens to its rental's user alone (everx_agent.devices).
    first_uid, second_uid = (pwd.getpwnam(f"evx-{rental.pk}").pw_uid for rental in (first, second))
    assert agent.gpu_users() == {0: (first_uid,), 1: (first_uid,), 2: (second_uid,), 3: (second_uid,)}
    with pytest.raises(paramiko.AuthenticationException):  # one buyer's key opens only their login
        _ssh(sshd, f"evx-{second.pk}", first_private, "true")


def test_a_killed_agent_ends_its_rentals_with_their_refund_and_cleans_up_when_back(enrolled, agent, sshd):
    buyer = buyer_with("100")
    public, private = _buyer_key()
    rental = _buy(buyer, enrolled, public, gpus=1)
    agent.once()
    agent.once()
    rental.refresh_from_db()
    assert rental.state == RentalState.RUNNING
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

    agent.once()  # back: the stale login goes
    assert agent.users() == []
    with pytest.raises((paramiko.AuthenticationException, paramiko.SSHException, OSError)):
        _ssh(sshd, f"evx-{rental.pk}", private, "true")
    assert timezone.now() > last_heard
