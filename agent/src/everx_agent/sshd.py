"""One OpenSSH server per rental, and the other ways into the machine closed to renters.

A rental's logins go through its own `sshd`, started by the agent (inside the rental's sandbox
when one is plugged in through `spawn`), so every session inherits the sandbox's cgroup and
namespaces: `UsePAM no` (nothing moves a session out), `AllowUsers evx-<id>`, keys only, on a
port of the range set at enrolment. Its keys come from a root-owned file in the agent's run
directory, never from the home, so nothing the renter writes there adds a key. One host key per
server, kept in the agent's state, whose public line the heartbeat reports.

The host's own sshd refuses the group `everx-renters` (a drop-in with `DenyGroups`, measured with
`sshd -T`), and the rental users are listed in `cron.deny` and `at.deny`. Only `everx-agent harden
--apply` writes the drop-in and creates the deny files; the agent adds and removes user names in
deny files that exist, and measures the rest.
"""

from __future__ import annotations

import contextlib
import grp
import json
import logging
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .config import json_file_read, private_dir_make, private_file_write
from .system import RENTER_GROUP, SYSTEM_PATH, DeliveryRefused, SystemCommandError, process_is_zombie

LOG = logging.getLogger("everx_agent.sshd")

HOST_KEY_FILE = "ssh_host_ed25519_key"
PORTS_FILE = "ssh_ports.json"
# sshd refuses to start without its privilege separation directory (Debian's path).
PRIVSEP_DIR = Path("/run/sshd")
GPU_VARIABLES = "CUDA_VISIBLE_DEVICES,NVIDIA_VISIBLE_DEVICES,CUDA_DEVICE_ORDER"
# The name the self-test's sshd allows: never a rental's (rental ids start at 1).
SELF_TEST_USER = "evx-0"
BANNER_START = b"SSH-2.0-"
COMMAND_TIMEOUT_SECONDS = 30.0
PAUSE_SECONDS = 0.05
OUTPUT_LIMIT = 300
LOG_TAIL_BYTES = 600
TCP_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
PROC = Path("/proc")


class SshdError(SystemCommandError):
    """A rental's sshd could not be set up; the message is short English for the exchange."""


class PortsExhausted(SshdError, DeliveryRefused):
    """Every port of the range is a rental's or held by another process."""


@dataclass(frozen=True)
class SshdSettings:
    """Where everything is; each a setting, so tests point them at folders of theirs."""

    state_dir: Path
    run_dir: Path = Path("/run/everx-agent")
    listen_address: str = "0.0.0.0"  # noqa: S104 (renters connect from anywhere)
    port_first: int = 41000
    port_last: int = 41099
    host_config: Path = Path("/etc/ssh/sshd_config")
    host_drop_in: Path = Path("/etc/ssh/sshd_config.d/50-everx.conf")
    cron_deny: Path = Path("/etc/cron.deny")
    at_deny: Path = Path("/etc/at.deny")
    max_restarts: int = 5
    stop_grace_seconds: float = 5.0
    start_timeout_seconds: float = 5.0
    sshd_path: str | None = field(default_factory=lambda: shutil.which("sshd", path=SYSTEM_PATH))
    keygen_path: str | None = field(default_factory=lambda: shutil.which("ssh-keygen", path=SYSTEM_PATH))

    @property
    def sshd_dir(self) -> Path:
        return self.run_dir / "sshd"

    @property
    def host_key(self) -> Path:
        return self.state_dir / HOST_KEY_FILE

    def deny_files(self) -> tuple[Path, Path]:
        return (self.cron_deny, self.at_deny)

    def probe_address(self) -> str:
        """Where the agent itself reaches a rental's sshd."""
        if self.listen_address in ("0.0.0.0", ""):  # noqa: S104
            return "127.0.0.1"
        return "::1" if self.listen_address == "::" else self.listen_address


def process_spawn(argv: list[str]) -> subprocess.Popen:
    """A plain process, in a session of its own, with nothing of the agent's terminal or pipes
    (an `everx-agent run --once` whose output is read would otherwise never end)."""
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            env={"PATH": SYSTEM_PATH, "LC_ALL": "C"})


Spawn = Callable[[list[str]], subprocess.Popen]


# The configuration ----------------------------------------------------------------------------

def sshd_config_text(*, settings: SshdSettings, username: str, port: int, keys_file: Path,
                     pid_file: Path) -> str:
    address = f"[{settings.listen_address}]" if ":" in settings.listen_address else settings.listen_address
    return "\n".join([
        f"# Written by everx-agent for {username}; removed when the rental ends.",
        f"ListenAddress {address}:{port}",
        f"HostKey {settings.host_key}",
        f"PidFile {pid_file}",
        f"AllowUsers {username}",
        # Without PAM nothing moves a session out of the sandbox this sshd runs in.
        "UsePAM no",
        "PermitRootLogin no",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "HostbasedAuthentication no",
        "PubkeyAuthentication yes",
        # Root's file, not the home's: a key the renter adds there opens nothing.
        f"AuthorizedKeysFile {keys_file}",
        "AuthorizedKeysCommand none",
        "AuthorizedPrincipalsFile none",
        # The keys file is the agent's (root's); the home is not read for keys, so the home's
        # modes protect nothing here, and the agent's folders may sit under a sticky /tmp in tests.
        "StrictModes no",
        # The keys file's environment= options: the rental's GPUs (reconcile.authorized_keys_text).
        f"PermitUserEnvironment {GPU_VARIABLES}",
        "X11Forwarding no",
        "PermitTunnel no",
        "Subsystem sftp internal-sftp",
        "LogLevel INFO",
        "",
    ])


def file_write_if_changed(*, path: Path, text: str, mode: int = 0o600, gid: int = 0) -> bool:
    """Write `text` atomically unless the file holds it already; True when it was written."""
    try:
        if path.read_text(encoding="utf-8") == text and stat.S_IMODE(path.stat().st_mode) == mode \
                and path.stat().st_gid == gid:
            return False
    except OSError:
        pass
    private_file_write(path=path, text=text, mode=mode)
    os.chown(path, 0, gid)
    return True


def command_run(path: str | None, name: str, arguments: list[str]) -> subprocess.CompletedProcess:
    if not path:
        raise SshdError(f"{name} is not installed (Debian: apt-get install openssh-server)")
    try:
        return subprocess.run([path, *arguments], capture_output=True, text=True, check=False,
                              timeout=COMMAND_TIMEOUT_SECONDS, env={"PATH": SYSTEM_PATH, "LC_ALL": "C"})
    except subprocess.TimeoutExpired:
        raise SshdError(f"{name} did not finish within {COMMAND_TIMEOUT_SECONDS:g} seconds") from None
    except OSError as error:
        raise SshdError(f"{name} could not be run: {error.strerror or error}") from None


def said(result: subprocess.CompletedProcess) -> str:
    return " ".join((result.stderr or result.stdout).split())[:OUTPUT_LIMIT]


def sshd_config_test(*, settings: SshdSettings, config: Path) -> None:
    """`sshd -t -f config`, or `SshdError` with what it said."""
    result = command_run(settings.sshd_path, "sshd", ["-t", "-f", str(config)])
    if result.returncode != 0:
        raise SshdError(f"sshd refused the configuration {config.name}: {said(result)}")


# The host key ---------------------------------------------------------------------------------

def host_key_ensure(*, settings: SshdSettings) -> str:
    """The server's host key for rental sshds, made once (ed25519, 0600); its public line."""
    key = settings.host_key
    public = key.with_name(key.name + ".pub")
    if not key.exists():
        private_dir_make(path=key.parent)
        public.unlink(missing_ok=True)
        result = command_run(settings.keygen_path, "ssh-keygen",
                             ["-q", "-t", "ed25519", "-N", "", "-C", "everx-agent", "-f", str(key)])
        if result.returncode != 0:
            raise SshdError(f"ssh-keygen failed (exit code {result.returncode}): {said(result)}")
    mode_set(key, 0o600)
    return host_key_public(settings=settings)


def mode_set(path: Path, mode: int) -> None:
    """`chmod` only when the mode differs: an unchanged pass writes nothing."""
    if stat.S_IMODE(path.stat().st_mode) != mode:
        os.chmod(path, mode)


def host_key_public(*, settings: SshdSettings) -> str:
    """`ssh-ed25519 AAAA...` without the comment, "" when there is no key yet."""
    try:
        parts = settings.host_key.with_name(HOST_KEY_FILE + ".pub").read_text(encoding="utf-8").split()
    except OSError:
        return ""
    return " ".join(parts[:2]) if len(parts) >= 2 else ""


# Ports ----------------------------------------------------------------------------------------

def port_bindable(address: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As sshd binds: a port whose last connections are only waiting out TIME_WAIT is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True


def port_socket_inodes(port: int, *, tables: Iterable[Path] = TCP_TABLES) -> set[str]:
    """The inodes of the TCP sockets bound to `port` (/proc/net/tcp and tcp6)."""
    inodes = set()
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and int(fields[1].rsplit(":", 1)[1], 16) == port and fields[9] != "0":
                inodes.add(fields[9])
    return inodes


def port_holders(port: int, *, proc_dir: Path = PROC, tables: Iterable[Path] = TCP_TABLES) -> list[str]:
    """Who holds `port`: `user (pid N, command)` for each process with one of its sockets open."""
    targets = {f"socket:[{inode}]" for inode in port_socket_inodes(port, tables=tables)}
    holders = []
    if not targets:
        return holders
    for entry in os.scandir(proc_dir):
        if not entry.name.isdigit():
            continue
        try:
            with os.scandir(Path(entry.path) / "fd") as descriptors:
                if not any(os.readlink(descriptor.path) in targets for descriptor in descriptors):
                    continue
            uid = os.stat(entry.path).st_uid
            command = (Path(entry.path) / "comm").read_text().strip()
        except OSError:
            continue
        holders.append(f"{user_name(uid)} (pid {entry.name}, {command})")
    return holders


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


class PortBook:
    """Each rental's port, in `<state dir>/ssh_ports.json` (0600): a rental keeps its port across
    agent restarts, so the connection details the buyer has stay right."""

    def __init__(self, *, state_dir: Path):
        self.path = state_dir / PORTS_FILE
        self.ports = {name: port for name, port in json_file_read(path=self.path).get("ports", {}).items()
                      if isinstance(port, int) and not isinstance(port, bool)}

    def get(self, username: str) -> int | None:
        return self.ports.get(username)

    def set(self, username: str, port: int | None) -> None:
        ports = {name: number for name, number in self.ports.items() if name != username}
        if port is not None:
            ports[username] = port
        if ports != self.ports:
            private_dir_make(path=self.path.parent)
            text = json.dumps({"version": 1, "ports": ports}, indent=2) + "\n"
            private_file_write(path=self.path, text=text)
            self.ports = ports

    def taken(self, *, besides: str) -> set[int]:
        return {port for name, port in self.ports.items() if name != besides}


# Deny files -----------------------------------------------------------------------------------

def deny_file_names(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def deny_file_change(path: Path, *, add: Iterable[str] = (), remove: Iterable[str] = (),
                     create: bool = False) -> bool:
    """Add and remove user names in a cron.deny-like file, its mode and owner kept; a missing file
    is left missing unless `create` (harden --apply). True when the file changed."""
    try:
        status = path.stat()
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        if not create:
            return False
        status, lines = None, []
    removed = set(remove)
    kept = [line for line in lines if line.strip() not in removed]
    present = {line.strip() for line in kept}
    wanted = kept + [name for name in add if name not in present]
    if wanted == lines and status is not None:
        return False
    private_file_write(path=path, text="".join(f"{line}\n" for line in wanted),
                       mode=stat.S_IMODE(status.st_mode) if status else 0o644)
    if status:
        os.chown(path, status.st_uid, status.st_gid)
    return True


# The running sshds ----------------------------------------------------------------------------

def pid_read(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def process_runs_config(pid: int, config: Path) -> bool:
    """True when `pid` is alive and an sshd started with `-f config` (a pid file outlives its
    process, and the pid may have gone to someone else since)."""
    try:
        # sshd rewrites its command line as one title ("sshd: /usr/sbin/sshd -D ... -f <config>
        # [listener] ..."): its words are what is compared.
        arguments = (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").split()
    except OSError:
        return False
    wanted = str(config).encode()
    pairs = zip(arguments, arguments[1:])
    return any(pair == (b"-f", wanted) for pair in pairs) and not process_is_zombie(str(pid))


def banner_read(address: str, port: int, *, timeout: float = 1.0) -> bytes:
    try:
        with socket.create_connection((address, port), timeout=timeout) as connection:
            return connection.recv(256)
    except OSError:
        return b""


class RentalSshd:
    """The rentals' sshds: `ensure` (each pass: cheap and without a subprocess when nothing
    changed), `stop` (the rental's end), `facts` (what the isolation report says of logins)."""

    def __init__(self, *, settings: SshdSettings, spawn: Spawn = process_spawn,
                 clock: Callable[[], float] = time.monotonic, pause: Callable[[float], None] = time.sleep):
        self.settings = settings
        self.spawn = spawn
        self.clock = clock
        self.pause = pause
        self.ports = PortBook(state_dir=settings.state_dir)
        self.processes: dict[str, subprocess.Popen] = {}
        self.starts: dict[str, int] = {}
        self.denied: set[str] = set()  # names this agent process has put in the deny files
        self.port_skips: dict[int, list[str]] = {}  # a port skipped -> who held it
        self.self_test_passed: bool | None = None

    def paths(self, username: str) -> tuple[Path, Path, Path, Path]:
        """The rental's configuration, keys, pid and log files."""
        folder = self.settings.sshd_dir
        return (folder / f"{username}.conf", folder / f"{username}.keys", folder / f"{username}.pid",
                folder / f"{username}.log")

    def port_of(self, username: str) -> int | None:
        return self.ports.get(username)

    def host_key(self) -> str:
        return host_key_public(settings=self.settings)

    # Starting ---------------------------------------------------------------------------------

    def ensure(self, *, username: str, authorized_keys: str, spawn: Spawn | None = None) -> int:
        """The rental's sshd running on its port with these keys; returns the port. `spawn` runs
        it (the rental's sandbox); raises `SshdError`."""
        config, keys, pid_file, _log = self.paths(username)
        self._folders_make()
        host_key_ensure(settings=self.settings)
        file_write_if_changed(path=keys, text=authorized_keys, mode=0o640, gid=user_gid(username))
        self._deny(username)
        pid = pid_read(pid_file)
        running = pid is not None and process_runs_config(pid, config)
        port = self.ports.get(username) if running else None
        if port is None:
            port = self._port_choose(username)
        text = sshd_config_text(settings=self.settings, username=username, port=port, keys_file=keys,
                                pid_file=pid_file)
        changed = file_write_if_changed(path=config, text=text)
        if running and not changed:
            return port
        if changed:
            sshd_config_test(settings=self.settings, config=config)
        if running:
            self._end(username, pid)
        self._start(username, port, spawn or self.spawn)
        return port

    def _folders_make(self) -> None:
        # Traversable by the renters (sshd reads the keys file as the user), listable by root only.
        for folder in (self.settings.run_dir, self.settings.sshd_dir):
            folder.mkdir(mode=0o711, parents=True, exist_ok=True)
            mode_set(folder, 0o711)  # no read or write for others: the rentals' names stay hidden
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)

    def _port_choose(self, username: str) -> int:
        """The rental's port if it is still free, else the first free one of the range."""
        kept = self.ports.get(username)
        address = self.settings.listen_address or "0.0.0.0"  # noqa: S104
        if kept is not None and port_bindable(address, kept):
            return kept
        taken = self.ports.taken(besides=username)
        for port in range(self.settings.port_first, self.settings.port_last + 1):
            if port in taken:
                continue
            if port_bindable(address, port):
                self.ports.set(username, port)
                return port
            holders = port_holders(port)
            if self.port_skips.get(port) != holders:
                LOG.warning("SSH port %d is held by %s: skipped", port,
                            ", ".join(holders) or "an unknown process")
            self.port_skips[port] = holders
        first, last = self.settings.port_first, self.settings.port_last
        # Whose processes hold the others: the seller sees it with the refusal, not only in the log.
        users = sorted({holder.split(" (", 1)[0] for holders in self.port_skips.values()
                        for holder in holders})
        held_by = f": {', '.join(users[:5])}" if users else ""
        raise PortsExhausted(f"no free SSH port is left in {first}-{last} ({len(taken)} used by rentals, "
                             f"{len(self.port_skips)} held by other processes{held_by})")

    def _start(self, username: str, port: int, spawn: Spawn) -> None:
        config, _keys, pid_file, log = self.paths(username)
        starts = self.starts.get(username, 0)
        if starts > self.settings.max_restarts:
            raise SshdError(f"the sshd of {username} stopped {starts} times: not started again")
        if starts:
            LOG.warning("the sshd of %s was not running: started again (%d of at most %d)", username,
                        starts, self.settings.max_restarts)
        self.starts[username] = starts + 1
        pid_file.unlink(missing_ok=True)
        # -E: its log in a file of the agent's, whatever the agent's own output is.
        argv = [self.settings.sshd_path or "sshd", "-D", "-E", str(log), "-f", str(config)]
        try:
            self.processes[username] = spawn(argv)
        except OSError as error:
            raise SshdError(f"sshd could not be started: {error.strerror or error}") from None
        self._wait_listening(username, port)

    def _wait_listening(self, username: str, port: int) -> None:
        process = self.processes[username]
        deadline = self.clock() + self.settings.start_timeout_seconds
        while self.clock() < deadline:
            if banner_read(self.settings.probe_address(), port).startswith(BANNER_START):
                return
            # A launcher may hand sshd on and end well (systemd-run does): only a failure is final.
            if process.poll() not in (None, 0):
                break
            self.pause(PAUSE_SECONDS)
        _config, _keys, pid_file, log = self.paths(username)
        self._end(username, pid_read(pid_file))
        raise SshdError(f"the sshd of {username} did not answer on port {port}: {log_tail(log)}")

    # Stopping ---------------------------------------------------------------------------------

    def stop(self, *, username: str) -> None:
        """The rental's end: its sshd stopped, its port freed, its files removed, its name out of
        the deny files."""
        _config, _keys, pid_file, _log = self.paths(username)
        self._end(username, pid_read(pid_file))
        for path in self.paths(username):
            path.unlink(missing_ok=True)
        self.ports.set(username, None)
        self.starts.pop(username, None)
        for path in self.settings.deny_files():
            deny_file_change(path, remove=[username])
        self.denied.discard(username)

    def _end(self, username: str, pid: int | None) -> None:
        """SIGTERM, then SIGKILL after the grace period, to the sshd and the process that ran it."""
        config = self.paths(username)[0]
        process = self.processes.pop(username, None)
        pids = {pid} if pid is not None and process_runs_config(pid, config) else set()
        if process is not None and process.poll() is None:
            pids.add(process.pid)
        self._signal(pids, signal.SIGTERM)
        deadline = self.clock() + self.settings.stop_grace_seconds
        while self._alive(pids, process) and self.clock() < deadline:
            self.pause(PAUSE_SECONDS)
        if self._alive(pids, process):
            LOG.warning("the sshd of %s outlived SIGTERM: killed", username)
            self._signal(pids, signal.SIGKILL)
        if process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=self.settings.stop_grace_seconds)

    @staticmethod
    def _signal(pids: set[int], number: int) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, number)

    @staticmethod
    def _alive(pids: set[int], process: subprocess.Popen | None) -> bool:
        if process is not None:
            process.poll()  # reaps our child, whose zombie would otherwise look alive
        return any(not process_is_zombie(str(pid)) for pid in pids)

    # Deny files and facts ---------------------------------------------------------------------

    def _deny(self, username: str) -> None:
        if username in self.denied or username == SELF_TEST_USER:
            return
        for path in self.settings.deny_files():
            deny_file_change(path, add=[username])
        self.denied.add(username)

    def self_test(self) -> bool:
        """Once per agent process: an sshd as a rental's starts and answers its banner on a port
        of the range (then stops)."""
        if self.self_test_passed is None:
            self.self_test_passed = self._self_test()
        return self.self_test_passed

    def _self_test(self) -> bool:
        if not self.settings.sshd_path:
            LOG.warning("no sshd is installed: rentals cannot have their own "
                        "(apt-get install openssh-server)")
            return False
        try:
            self.ensure(username=SELF_TEST_USER, authorized_keys="")
        except PortsExhausted as error:
            # A range full of rentals' sshds proves nothing against them: one answering is the test.
            if self._rental_answers():
                return True
            LOG.warning("the sshd self-test failed: %s", error)
            return False
        except SshdError as error:
            LOG.warning("the sshd self-test failed: %s", error)
            return False
        finally:
            self.stop(username=SELF_TEST_USER)
        return True

    def _rental_answers(self) -> bool:
        """A rental's sshd of this agent runs and answers its banner on its port."""
        for username, port in sorted(self.ports.ports.items()):
            if ":" in username:  # a container's port (containers.py): no sshd of the agent's
                continue
            config, _keys, pid_file, _log = self.paths(username)
            pid = pid_read(pid_file)
            if pid is not None and process_runs_config(pid, config) and \
                    banner_read(self.settings.probe_address(), port).startswith(BANNER_START):
                return True
        return False

    def facts(self, *, usernames: Iterable[str]) -> dict[str, bool]:
        return {"login_sandboxed": self.self_test(),
                "host_login_closed": not host_login_problems(settings=self.settings, usernames=usernames)}


def user_gid(username: str) -> int:
    """The group the keys file is readable by: the user's own (sshd reads it as the user); the
    self-test's user does not exist, root's then."""
    try:
        return pwd.getpwnam(username).pw_gid
    except KeyError:
        return 0


def log_tail(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - LOG_TAIL_BYTES))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return "no log"
    return " ".join(text.split())[-OUTPUT_LIMIT:] or "no log"


# The host's own ways in -----------------------------------------------------------------------

def host_denies_renters(*, settings: SshdSettings) -> str:
    """"" when `sshd -T -f <host config>` shows `denygroups` naming the renters' group, else why not."""
    try:
        result = command_run(settings.sshd_path, "sshd", ["-T", "-f", str(settings.host_config)])
    except SshdError as error:
        return str(error)
    if result.returncode != 0:
        return f"sshd -T failed on {settings.host_config}: {said(result)}"
    for line in result.stdout.splitlines():
        words = line.split()
        if words and words[0].lower() == "denygroups" and RENTER_GROUP in words[1:]:
            return ""
    return f"the host's sshd does not refuse the group {RENTER_GROUP} (no DenyGroups in sshd -T)"


def host_login_problems(*, settings: SshdSettings, usernames: Iterable[str]) -> list[str]:
    """What still lets a renter in other than its own sshd; [] when every way is closed."""
    names = sorted(usernames)
    problems = [problem for problem in [host_denies_renters(settings=settings)] if problem]
    for path in settings.deny_files():
        try:
            missing = set(names) - set(deny_file_names(path))
        except FileNotFoundError:
            problems.append(f"{path} does not exist")
            continue
        except OSError as error:
            problems.append(f"{path} cannot be read: {error.strerror}")
            continue
        if missing:
            problems.append(f"{path} does not list {', '.join(sorted(missing))}")
    for name in names:
        groups = supplementary_groups(name)
        if groups is None:
            continue
        if RENTER_GROUP not in groups:
            problems.append(f"{name} is not in the group {RENTER_GROUP}")
        others = sorted(set(groups) - {RENTER_GROUP})
        if others:
            problems.append(f"{name} belongs to other groups: {', '.join(others)}")
    return problems


def supplementary_groups(username: str) -> list[str] | None:
    """The names of the user's groups besides its own primary one; None when there is no such user."""
    try:
        entry = pwd.getpwnam(username)
    except KeyError:
        return None
    names = []
    for gid in os.getgrouplist(username, entry.pw_gid):
        if gid != entry.pw_gid:
            try:
                names.append(grp.getgrgid(gid).gr_name)
            except KeyError:
                names.append(str(gid))
    return names


def login_facts(*, sshd: RentalSshd, usernames: Iterable[str]) -> dict[str, bool]:
    """The isolation report's login facts: `login_sandboxed` (a rental sshd starts and answers,
    self-tested once) and `host_login_closed` (the host's sshd refuses renters, measured with
    `sshd -T`, and the cron and at deny files list every rental user)."""
    return sshd.facts(usernames=usernames)


HOST_DROP_IN_TEXT = (
    "# Written by everx-agent harden: rental users log in through their own sshd, never this one.\n"
    f"DenyGroups {RENTER_GROUP}\n"
)


def host_login_harden(*, settings: SshdSettings, usernames: Iterable[str], apply: bool) -> tuple[str, bool]:
    """What `everx-agent harden` says of the other ways in, and whether they are closed; with
    `apply`, the drop-in is written (kept only if `sshd -t` accepts the result) and the deny files
    made to list every rental user."""
    names = sorted(usernames)
    lines = []
    if apply:
        lines += drop_in_apply(settings=settings)
        for path in settings.deny_files():
            if deny_file_change(path, add=names, create=True):
                lines.append(f"Wrote {path} ({len(names)} rental users).")
    problems = host_login_problems(settings=settings, usernames=names)
    if not problems:
        lines.append(f"Renters can log in only through their own sshd: the host's sshd refuses the group "
                     f"{RENTER_GROUP} and cron and at refuse every rental user.")
        if apply:
            lines.append("Still needed: reload the host's sshd (systemctl reload ssh) for DenyGroups to "
                         "apply to new connections.")
        return "\n".join(lines) + "\n", True
    lines += [f"Not closed: {problem}." for problem in problems]
    if not apply:
        lines.append(f"Fix: everx-agent harden --apply writes {settings.host_drop_in} (DenyGroups "
                     f"{RENTER_GROUP}) and adds the rental users to {settings.cron_deny} and "
                     f"{settings.at_deny}.")
    return "\n".join(lines) + "\n", False


def drop_in_apply(*, settings: SshdSettings) -> list[str]:
    """The drop-in written, kept only when `sshd -t` accepts the host's configuration with it."""
    path = settings.host_drop_in
    try:
        before = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        before = None
    if before == HOST_DROP_IN_TEXT:
        return []
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    private_file_write(path=path, text=HOST_DROP_IN_TEXT, mode=0o644)
    try:
        result = command_run(settings.sshd_path, "sshd", ["-t", "-f", str(settings.host_config)])
        refusal = said(result) if result.returncode else ""
    except SshdError as error:
        refusal = str(error)
    if not refusal:
        return [f"Wrote {path}."]
    if before is None:
        path.unlink()
    else:
        private_file_write(path=path, text=before, mode=0o644)
    return [f"Not written: sshd -t refused {settings.host_config} with {path}: {refusal}"]
