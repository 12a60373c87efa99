"""A rental's own sshd, for real: OpenSSH's `sshd` per rental on loopback ports of a test range,
real users, paramiko clients with fresh ed25519 keys; and the host's other ways in closed and
measured on test-owned stand-ins (an sshd started with `-f` on a test configuration, deny files in
a temporary folder). Nothing reads or changes the machine's own sshd, PAM or cron files; every
user, process, port and file made here is gone at the end.

Needs root, `useradd` and `/usr/sbin/sshd` (`make sshd` installs Debian's openssh-server)."""

import grp
import io
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from everx_agent.reconcile import DesiredLogin, authorized_keys_text
from everx_agent.sshd import (
    HOST_DROP_IN_TEXT,
    RentalSshd,
    SshdError,
    SshdSettings,
    deny_file_change,
    host_login_harden,
    host_login_problems,
    login_facts,
    pid_read,
    port_bindable,
)
from everx_agent.system import RENTER_GROUP, UnixSystem, login_failure_state

SSHD = "/usr/sbin/sshd"
PORTS_IN_RANGE = 6

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not Path(SSHD).exists() or shutil.which("useradd") is None,
    reason="needs root, useradd and OpenSSH's sshd (make sshd installs it)",
)


def _free_range(count: int) -> int:
    """The first of `count` loopback ports in a row that nobody holds (other tests run alongside)."""
    for _attempt in range(200):
        first = random.randrange(20000, 32000)  # below the ephemeral range
        if all(port_bindable("127.0.0.1", port) for port in range(first, first + count)):
            return first
    raise AssertionError("no free range of loopback ports")


def _key_pair() -> tuple[str, paramiko.PKey]:
    private = ed25519.Ed25519PrivateKey.generate()
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption()).decode()
    return f"{public} buyer@laptop", paramiko.Ed25519Key.from_private_key(io.StringIO(pem))


def _connect(port: int, username: str, key: paramiko.PKey) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())  # noqa: S507 (a host key made by this test)
    client.connect("127.0.0.1", port=port, username=username, pkey=key, allow_agent=False,
                   look_for_keys=False, timeout=10, banner_timeout=10, auth_timeout=10)
    return client


def _ssh(port: int, username: str, key: paramiko.PKey, command: str) -> str:
    client = _connect(port, username, key)
    try:
        _stdin, stdout, _stderr = client.exec_command(command, timeout=20)
        return stdout.read().decode().strip()
    finally:
        client.close()


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _processes_running(path: Path) -> list[int]:
    """The processes with an argument that is `path` or under it (ours, whoever's child they are now)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                # sshd rewrites its command line as one title: its words are compared.
                arguments = (entry / "cmdline").read_bytes().decode(errors="replace")
                arguments = arguments.replace("\0", " ").split()
            except OSError:
                continue
            if any(argument == str(path) or argument.startswith(f"{path}/") for argument in arguments):
                found.append(int(entry.name))
    return found


@pytest.fixture
def folder():
    """A test folder renters can traverse (sshd reads a keys file as its user), outside pytest's
    own private one."""
    path = Path(tempfile.mkdtemp(prefix="everx-sshd-test-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def settings(folder):
    first = _free_range(PORTS_IN_RANGE)
    return SshdSettings(
        state_dir=folder / "state", run_dir=folder / "run", listen_address="127.0.0.1",
        port_first=first, port_last=first + PORTS_IN_RANGE - 1,
        host_config=folder / "host" / "sshd_config",
        host_drop_in=folder / "host" / "sshd_config.d" / "50-everx.conf",
        cron_deny=folder / "cron.deny", at_deny=folder / "at.deny",
        max_restarts=2, stop_grace_seconds=2.0, sshd_path=SSHD,
    )


@pytest.fixture
def sshds(settings):
    """The agent's rental sshds; each rental it still knows is stopped at the end, and checked gone."""
    made = []

    def make() -> RentalSshd:
        manager = RentalSshd(settings=settings)
        made.append(manager)
        return manager

    yield make
    for manager in made:
        for username in list(manager.ports.ports):
            manager.stop(username=username)
    assert _processes_running(settings.sshd_dir) == []


@pytest.fixture
def users(renter_group):
    """`users(n)`: n real rental users (large rental ids nobody else uses), removed at the end."""
    made = []
    system = UnixSystem()

    def make(count: int) -> list[str]:
        names = []
        for _ in range(count):
            username = f"evx-{random.randrange(10**9, 10**10)}"
            made.append(username)
            system.user_create(username=username, comment="everx-agent test of sshd.py")
            names.append(username)
        return names

    yield make
    for username in made:
        system.user_processes_kill(username=username)  # until none is left: userdel refuses before
        system.user_delete(username=username, remove_home=True)
    for username in made:
        with pytest.raises(KeyError):
            pwd.getpwnam(username)


def spwd_field(username: str) -> str:
    listed = subprocess.run(["getent", "shadow", username], capture_output=True, text=True, check=True)
    return listed.stdout.split(":")[1]


def _keys(username: str, public: str, gpus: tuple[str, ...]) -> str:
    rental_id = int(username.split("-")[1])
    return authorized_keys_text(DesiredLogin(rental_id=rental_id, username=username, ssh_public_key=public,
                                             gpu_indices=tuple(range(len(gpus))), gpu_uuids=gpus))


GPU_A = ("GPU-00000000-0000-0000-0000-00000000000a",)
GPU_B = ("GPU-00000000-0000-0000-0000-00000000000b", "GPU-00000000-0000-0000-0000-00000000000c")


def test_two_rentals_log_in_to_their_own_port_with_their_own_key_only(settings, sshds, users):
    first, second = users(2)
    first_public, first_key = _key_pair()
    second_public, second_key = _key_pair()
    manager = sshds()
    first_port = manager.ensure(username=first, authorized_keys=_keys(first, first_public, GPU_A))
    second_port = manager.ensure(username=second, authorized_keys=_keys(second, second_public, GPU_B))
    assert (first_port, second_port) == (settings.port_first, settings.port_first + 1)

    assert _ssh(first_port, first, first_key, "id -un; echo $CUDA_VISIBLE_DEVICES") == f"{first}\n{GPU_A[0]}"
    assert _ssh(second_port, second, second_key, "echo $CUDA_VISIBLE_DEVICES $CUDA_DEVICE_ORDER") \
        == f"{','.join(GPU_B)} PCI_BUS_ID"
    for port, username, key in ((second_port, second, first_key), (first_port, first, second_key),
                                (first_port, second, second_key), (second_port, first, first_key)):
        with pytest.raises(paramiko.AuthenticationException):
            _connect(port, username, key)

    # The host key the heartbeat reports is the one the buyer's client sees; made once, 0600.
    client = _connect(first_port, first, first_key)
    seen = client.get_transport().get_remote_server_key()
    client.close()
    assert manager.host_key() == f"ssh-ed25519 {seen.get_base64()}"
    assert oct(settings.host_key.stat().st_mode & 0o777) == "0o600"
    # Root's keys file, readable by the rental's user alone; the home was never written.
    keys = settings.sshd_dir / f"{first}.keys"
    assert (keys.stat().st_uid, keys.stat().st_gid, keys.stat().st_mode & 0o777) \
        == (0, pwd.getpwnam(first).pw_gid, 0o640)
    assert not Path(pwd.getpwnam(first).pw_dir, ".ssh").exists()
    # Rental users are in the renters' group and no other; their password field is "*", not the
    # locked "!" that an sshd without PAM refuses even a key for.
    assert [group.gr_name for group in grp.getgrall() if first in group.gr_mem] == [RENTER_GROUP]
    assert spwd_field(first) == "*"


def test_an_unchanged_pass_starts_nothing_and_a_new_agent_keeps_the_ports_and_the_sshds(
        settings, sshds, users, monkeypatch):
    (username,) = users(1)
    public, key = _key_pair()
    keys = _keys(username, public, GPU_A)
    first_agent = sshds()
    port = first_agent.ensure(username=username, authorized_keys=keys)
    pid = pid_read(settings.sshd_dir / f"{username}.pid")

    calls = []
    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: calls.append(args))
    monkeypatch.setattr(subprocess, "Popen", lambda *args, **kwargs: calls.append(args))
    again = sshds()  # the agent restarted: its state says the port, the pid file the process
    assert again.ensure(username=username, authorized_keys=keys) == port
    assert calls == []
    monkeypatch.undo()
    assert pid_read(settings.sshd_dir / f"{username}.pid") == pid
    assert _ssh(port, username, key, "id -un") == username


def test_a_key_the_renter_adds_in_the_home_opens_neither_its_sshd_nor_the_host_one_with_the_drop_in(
        settings, sshds, users, folder):
    (username,) = users(1)
    public, key = _key_pair()
    manager = sshds()
    port = manager.ensure(username=username, authorized_keys=_keys(username, public, GPU_A))
    planted_public, planted_key = _key_pair()
    _ssh(port, username, key, f"mkdir -m 700 -p ~/.ssh && echo '{planted_public}' >> ~/.ssh/authorized_keys")
    with pytest.raises(paramiko.AuthenticationException):
        _connect(port, username, planted_key)

    host = StandInHost(settings, folder)
    try:
        host.start()
        assert _ssh(host.port, username, planted_key, "id -un") == username  # the test can tell
        text, closed = host_login_harden(settings=settings, usernames=[username], apply=True)
        assert closed, text
        assert settings.host_drop_in.read_text() == HOST_DROP_IN_TEXT
        assert "Still needed: reload the host's sshd" in text
        host.restart()
        with pytest.raises(paramiko.AuthenticationException):
            _connect(host.port, username, planted_key)
        with pytest.raises(paramiko.AuthenticationException):  # nor the buyer's own key
            _connect(host.port, username, key)
    finally:
        host.stop()


class StandInHost:
    """The host's sshd, played by a test-owned one: keys from the home, the drop-in folder
    included, as Debian's configuration does."""

    def __init__(self, settings: SshdSettings, folder: Path):
        self.settings = settings
        self.folder = folder / "host"
        self.folder.mkdir(exist_ok=True)
        self.port = _free_range(1)
        self.process = None
        key = self.folder / "host_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        settings.host_drop_in.parent.mkdir(exist_ok=True)
        settings.host_config.write_text("\n".join([
            f"Include {settings.host_drop_in.parent}/*.conf", f"ListenAddress 127.0.0.1:{self.port}",
            f"HostKey {key}", f"PidFile {self.folder / 'sshd.pid'}", "UsePAM no", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "AuthorizedKeysFile .ssh/authorized_keys", "",
        ]))

    def start(self) -> None:
        self.process = subprocess.Popen([SSHD, "-D", "-E", str(self.folder / "sshd.log"), "-f",
                                         str(self.settings.host_config)])
        deadline = time.monotonic() + 10
        while not _listening(self.port):
            assert time.monotonic() < deadline, (self.folder / "sshd.log").read_text()
            time.sleep(0.05)

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


def test_the_host_measurement_passes_and_fails_on_test_owned_configurations(settings, folder, users):
    (username,) = users(1)
    StandInHost(settings, folder)  # its configuration only: nothing started
    problems = host_login_problems(settings=settings, usernames=[username])
    assert problems == [
        f"the host's sshd does not refuse the group {RENTER_GROUP} (no DenyGroups in sshd -T)",
        f"{settings.cron_deny} does not exist", f"{settings.at_deny} does not exist",
    ]
    text, closed = host_login_harden(settings=settings, usernames=[username], apply=False)
    assert not closed and "Fix: everx-agent harden --apply" in text
    assert not settings.host_drop_in.exists() and not settings.cron_deny.exists()  # nothing written

    settings.host_drop_in.write_text("DenyGroups somebody-else\n")
    settings.cron_deny.write_text("daemon\n")
    settings.at_deny.write_text(f"daemon\n{username}\n")
    assert host_login_problems(settings=settings, usernames=[username]) == [
        f"the host's sshd does not refuse the group {RENTER_GROUP} (no DenyGroups in sshd -T)",
        f"{settings.cron_deny} does not list {username}",
    ]
    text, closed = host_login_harden(settings=settings, usernames=[username], apply=True)
    assert closed, text
    assert settings.cron_deny.read_text() == f"daemon\n{username}\n"
    assert settings.at_deny.read_text() == f"daemon\n{username}\n"
    assert host_login_problems(settings=settings, usernames=[username]) == []

    # A host configuration sshd -t refuses with the drop-in: the drop-in is not kept.
    settings.host_drop_in.unlink()
    settings.host_config.write_text(settings.host_config.read_text() + "NoSuchOption yes\n")
    text, closed = host_login_harden(settings=settings, usernames=[username], apply=True)
    assert not closed and "Not written: sshd -t refused" in text
    assert not settings.host_drop_in.exists()


def test_stopping_a_rental_closes_its_port_and_leaves_nothing(settings, sshds, users):
    (username,) = users(1)
    settings.cron_deny.write_text("daemon\n")
    settings.at_deny.write_text("daemon\n")
    settings.at_deny.chmod(0o640)
    public, key = _key_pair()
    manager = sshds()
    port = manager.ensure(username=username, authorized_keys=_keys(username, public, GPU_A))
    assert settings.cron_deny.read_text() == f"daemon\n{username}\n"
    assert settings.at_deny.read_text() == f"daemon\n{username}\n"
    config = settings.sshd_dir / f"{username}.conf"
    # A session left open when the rental ends.
    session = _connect(port, username, key)
    assert _processes_running(config)

    manager.stop(username=username)
    session.close()
    assert not _listening(port)
    assert _processes_running(config) == []
    assert sorted(path.name for path in settings.sshd_dir.iterdir()) == []
    assert manager.port_of(username) is None
    assert settings.cron_deny.read_text() == "daemon\n"
    assert (settings.at_deny.read_text(), settings.at_deny.stat().st_mode & 0o777) == ("daemon\n", 0o640)


def test_a_port_held_by_another_process_is_skipped_and_running_out_fails_clearly(settings, sshds, users):
    first, second = users(2)
    holder = socket.socket()
    holder.bind(("127.0.0.1", settings.port_first))
    holder.listen()
    try:
        manager = sshds()
        port = manager.ensure(username=first, authorized_keys="")
        assert port == settings.port_first + 1
        (who,) = manager.port_skips[settings.port_first]
        assert who.startswith(f"root (pid {os.getpid()}, ")

        small = SshdSettings(**{**settings.__dict__, "port_last": settings.port_first + 1})
        crowded = RentalSshd(settings=small)
        with pytest.raises(SshdError, match=rf"no free SSH port is left in {settings.port_first}-"
                           rf"{settings.port_first + 1} \(1 used by rentals, 1 held by other "
                           r"processes: root\)") as out:
            crowded.ensure(username=second, authorized_keys="")
        # Waiting frees no port: the rental is refused, and the exchange ends it at once.
        assert login_failure_state(out.value) == "refused"
        assert _processes_running(settings.sshd_dir / f"{second}.conf") == []
    finally:
        holder.close()


def test_a_range_full_of_rentals_passes_the_self_test_through_them_and_one_held_by_others_fails(
        settings, sshds, users):
    """A restarted agent whose every port is a rental's cannot start its test sshd: a rental's
    sshd answering on its port is the proof instead, and the server keeps its level."""
    (username,) = users(1)
    one_port = SshdSettings(**{**settings.__dict__, "port_last": settings.port_first})
    running = RentalSshd(settings=one_port)
    running.ensure(username=username, authorized_keys="")
    try:
        assert RentalSshd(settings=one_port).self_test() is True  # a new agent process: its own test

        os.kill(pid_read(one_port.sshd_dir / f"{username}.pid"), signal.SIGKILL)
        running.processes[username].wait(timeout=5)
        holder = socket.socket()  # the port now held by another program: nothing answers as a rental
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", one_port.port_first))
        holder.listen()
        try:
            assert RentalSshd(settings=one_port).self_test() is False
        finally:
            holder.close()
    finally:
        RentalSshd(settings=one_port).stop(username=username)
    assert _processes_running(one_port.sshd_dir) == []


def test_a_dead_sshd_is_started_again_a_few_times_then_reported(settings, sshds, users):
    (username,) = users(1)
    public, key = _key_pair()
    manager = sshds()
    keys = _keys(username, public, GPU_A)
    port = manager.ensure(username=username, authorized_keys=keys)
    for _restart in range(settings.max_restarts):
        os.kill(pid_read(settings.sshd_dir / f"{username}.pid"), signal.SIGKILL)
        manager.processes[username].wait(timeout=5)
        assert manager.ensure(username=username, authorized_keys=keys) == port
        assert _ssh(port, username, key, "id -un") == username
    os.kill(pid_read(settings.sshd_dir / f"{username}.pid"), signal.SIGKILL)
    manager.processes[username].wait(timeout=5)
    with pytest.raises(SshdError, match=f"the sshd of {username} stopped 3 times: not started again"):
        manager.ensure(username=username, authorized_keys=keys)


def test_a_configuration_sshd_refuses_starts_nothing(settings, sshds, users):
    (username,) = users(1)
    settings.state_dir.mkdir(mode=0o700)
    settings.host_key.write_text("not a key\n")  # sshd -t: no host key it can load
    manager = RentalSshd(settings=settings)
    with pytest.raises(SshdError, match=f"sshd refused the configuration {username}.conf: .*host key"):
        manager.ensure(username=username, authorized_keys="")
    assert _processes_running(settings.sshd_dir / f"{username}.conf") == []
    manager.stop(username=username)


def test_login_facts(settings, sshds, users, folder):
    (username,) = users(1)
    manager = sshds()
    assert login_facts(sshd=manager, usernames=[username]) == {
        "login_sandboxed": True, "host_login_closed": False}
    assert list(settings.sshd_dir.iterdir()) == []  # the self-test's sshd is gone with its files
    StandInHost(settings, folder)
    host_login_harden(settings=settings, usernames=[username], apply=True)
    assert login_facts(sshd=manager, usernames=[username]) == {
        "login_sandboxed": True, "host_login_closed": True}
    settings.cron_deny.write_text("")
    assert login_facts(sshd=manager, usernames=[username])["host_login_closed"] is False

    absent = RentalSshd(settings=SshdSettings(**{**settings.__dict__, "sshd_path": None}))
    assert login_facts(sshd=absent, usernames=[]) == {"login_sandboxed": False, "host_login_closed": False}


def test_deny_files_keep_their_lines_mode_and_owner(tmp_path):
    path = tmp_path / "at.deny"
    assert deny_file_change(path, add=["evx-1"]) is False and not path.exists()  # only harden creates
    path.write_text("# comment\ndaemon\n")
    path.chmod(0o640)
    os.chown(path, 0, 1)
    assert deny_file_change(path, add=["evx-1", "evx-2"]) is True
    assert deny_file_change(path, add=["evx-1"]) is False
    assert deny_file_change(path, remove=["evx-1"]) is True
    assert path.read_text() == "# comment\ndaemon\nevx-2\n"
    assert (path.stat().st_mode & 0o777, path.stat().st_gid) == (0o640, 1)


def test_the_reconciler_gives_each_ready_login_its_sshd_and_reports_its_port(settings, sshds, renter_group):
    from everx_agent.reconcile import Reconciler, StateStore

    ids = sorted(random.sample(range(10**9, 10**10), 2))  # the reconciler goes in rental order
    keys = [_key_pair() for _ in ids]
    entries = [{"rental_id": rental_id, "username": f"evx-{rental_id}", "ssh_public_key": public,
                "gpu_indices": [index], "gpu_uuids": [GPU_B[index]]}
               for index, (rental_id, (public, _key)) in enumerate(zip(ids, keys, strict=True))]
    manager = sshds()
    reconciler = Reconciler(system=UnixSystem(), store=StateStore(state_dir=settings.state_dir), sshd=manager)
    try:
        reconciler.reconcile(entries=entries, remove_home=True)
        ports = [settings.port_first, settings.port_first + 1]
        reported = [(entry["username"], entry["state"], entry["ssh_port"]) for entry in reconciler.reports()]
        assert reported == [(f"evx-{rental_id}", "ready", port)
                            for rental_id, port in zip(ids, ports, strict=True)]
        for rental_id, port, (_public, key), gpu in zip(ids, ports, keys, GPU_B, strict=True):
            assert _ssh(port, f"evx-{rental_id}", key, "echo $CUDA_VISIBLE_DEVICES") == gpu
            assert not Path(pwd.getpwnam(f"evx-{rental_id}").pw_dir, ".ssh").exists()

        # An unchanged pass runs no command.
        calls = []
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(subprocess, "run", lambda *args, **kwargs: calls.append(args))
            patch.setattr(subprocess, "Popen", lambda *args, **kwargs: calls.append(args))
            reconciler.reconcile(entries=entries, remove_home=True)
        assert calls == []

        # A new key: the old one no longer opens the login, the new one does, on the same port.
        new_public, new_key = _key_pair()
        entries[1] = {**entries[1], "ssh_public_key": new_public}
        reconciler.reconcile(entries=entries, remove_home=True)
        with pytest.raises(paramiko.AuthenticationException):
            _connect(ports[1], f"evx-{ids[1]}", keys[1][1])
        assert _ssh(ports[1], f"evx-{ids[1]}", new_key, "id -un") == f"evx-{ids[1]}"

        # Its sshd killed: the next pass starts it again on the same port.
        os.kill(pid_read(settings.sshd_dir / f"evx-{ids[0]}.pid"), signal.SIGKILL)
        manager.processes[f"evx-{ids[0]}"].wait(timeout=5)
        reconciler.reconcile(entries=entries, remove_home=True)
        assert _ssh(ports[0], f"evx-{ids[0]}", keys[0][1], "id -un") == f"evx-{ids[0]}"

        reconciler.reconcile(entries=entries[1:], remove_home=True)  # the first rental ended
        assert not _listening(ports[0])
        assert [report["username"] for report in reconciler.reports()] == [f"evx-{ids[1]}"]
        with pytest.raises(KeyError):
            pwd.getpwnam(f"evx-{ids[0]}")
    finally:
        reconciler.reconcile(entries=[], remove_home=True)
    assert reconciler.reports() == [] and manager.ports.ports == {}
    assert _processes_running(settings.sshd_dir) == []


def test_a_user_made_before_the_renters_group_joins_it_and_leaves_the_others(renter_group):
    username = f"evx-{random.randrange(10**9, 10**10)}"
    subprocess.run(["useradd", "--groups", "users", "--comment", "everx-agent test of sshd.py", username],
                   check=True)
    system = UnixSystem()
    try:
        system.renter_group_join(username=username)
        assert sorted(group.gr_name for group in grp.getgrall() if username in group.gr_mem) == [RENTER_GROUP]
        settled = UnixSystem(commands={**system.commands, "usermod": None})  # would fail if run
        settled.renter_group_join(username=username)
    finally:
        system.user_delete(username=username, remove_home=True)
