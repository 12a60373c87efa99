"""The Unix side: users, their SSH key and GPU variables, their processes.

`UnixSystem` is the only class that changes the machine; the reconciler talks to it through
these few methods, so the tests swap in a fake with the same methods. Commands run by absolute
path (looked up once), with an argument list, a timeout and the C locale; a failure raises
`SystemCommandError` with what the command said, which the reconciler reports.

A buyer owns their home directory and may plant symbolic links in it (`~/.ssh` pointing to the
superuser's own `.ssh`, say) before their key changes. Every file the agent writes there is
therefore opened relative to a directory descriptor, without following links, and replaced
atomically.
"""

from __future__ import annotations

import contextlib
import grp
import logging
import os
import pwd
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

LOG = logging.getLogger("everx_agent.system")

# Where the user commands live whatever PATH systemd gave the service.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
COMMANDS = ("useradd", "userdel", "usermod", "groupadd", "pkill", "pgrep")
COMMAND_TIMEOUT_SECONDS = 30.0
KILL_DEADLINE_SECONDS = 5.0
KILL_PAUSE_SECONDS = 0.1
GPU_FILE = ".everx-gpus"
SOURCE_LINE = f'[ -f "$HOME/{GPU_FILE}" ] && . "$HOME/{GPU_FILE}"  # everx-agent: the rental\'s GPUs'
SHELL_STARTUP_FILES = (".bashrc", ".profile")
MAX_STARTUP_FILE_BYTES = 1024 * 1024
OUTPUT_LIMIT = 300
USERDEL_NO_SUCH_USER = 6
GROUPADD_GROUP_EXISTS = 9
# Every rental user's one supplementary group: the host's sshd refuses it (sshd.py).
RENTER_GROUP = "everx-renters"
PGREP_NONE_FOUND = 1


class SystemCommandError(Exception):
    """A system change failed; the message is short English for the exchange and the log."""


class DeliveryRefused(SystemCommandError):
    """A rental this host cannot deliver as it was sold: no SSH or container port left, a loop
    device that will not mount its home, a cgroup limit or a GPU's ACL the kernel refuses. Its
    login is reported `refused`, and the exchange ends it as not delivered at once, with its
    refund, instead of at the delivery deadline. `fact`: the isolation fact this shows false on
    this host ("" for none), reported false from then on (`DisprovedFacts`)."""

    def __init__(self, message: str, *, fact: str = ""):
        super().__init__(message)
        self.fact = fact


def login_failure_state(error: BaseException) -> str:
    """A failed login's state in the report: "refused" when retrying cannot help, else "failed"."""
    return "refused" if isinstance(error, DeliveryRefused) else "failed"


class DisprovedFacts:
    """The isolation facts a rental's refusal showed false here, reported false until the agent
    restarts (an operator who fixes the host restarts it). Added to from the reconcile loop and the
    device watch, read by the isolation report: the set is replaced whole, under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._facts: frozenset[str] = frozenset()

    def add(self, error: BaseException) -> None:
        fact = getattr(error, "fact", "")
        if not fact:
            return
        with self._lock:
            if fact not in self._facts:
                LOG.warning("isolation fact %s is false on this host from now on: %s", fact, error)
                self._facts = self._facts | {fact}

    @property
    def facts(self) -> frozenset[str]:
        return self._facts


class UnixSystem:
    """The real machine. `commands` maps a command's name to its path (tests, odd systems)."""

    def __init__(self, *, commands: dict[str, str | None] | None = None,
                 clock: Callable[[], float] = time.monotonic, pause: Callable[[float], None] = time.sleep):
        search_path = os.pathsep.join([SYSTEM_PATH, os.environ.get("PATH", "")])
        self.commands = commands if commands is not None else {
            name: shutil.which(name, path=search_path) for name in COMMANDS
        }
        self.clock = clock
        self.pause = pause

    # Users ------------------------------------------------------------------------------------

    def user_exists(self, *, username: str) -> bool:
        return self.user_comment(username=username) is not None

    def user_uid(self, *, username: str) -> int:
        return pwd.getpwnam(username).pw_uid

    def user_account(self, *, username: str) -> tuple[int, int, Path]:
        """The user's uid, gid and home, or `SystemCommandError` when there is no such user."""
        entry = self._user_entry(username)
        return entry.pw_uid, entry.pw_gid, Path(entry.pw_dir)

    def user_comment(self, *, username: str) -> str | None:
        """The user's comment (GECOS) field, or None when there is no such user."""
        try:
            return pwd.getpwnam(username).pw_gecos
        except KeyError:
            return None

    def user_create(self, *, username: str, comment: str) -> None:
        # "*" and not useradd's default "!": no password can ever sign in, but the account is not
        # locked, and an sshd without PAM refuses even a key to a locked account. The renters' group
        # is its only supplementary group.
        self.renter_group_ensure()
        self._run("useradd", [
            "--create-home", "--shell", "/bin/bash", "--password", "*", "--groups", RENTER_GROUP,
            "--comment", comment, username,
        ])

    def renter_group_join(self, *, username: str) -> None:
        """The renters' group as the user's only supplementary group (a user made by an agent
        before the group existed joins it); nothing run when it is so already."""
        entry = self._user_entry(username)
        groups = {gid for gid in os.getgrouplist(username, entry.pw_gid) if gid != entry.pw_gid}
        try:
            if groups == {grp.getgrnam(RENTER_GROUP).gr_gid}:
                return
        except KeyError:
            self.renter_group_ensure()
        self._run("usermod", ["--groups", RENTER_GROUP, username])

    def renter_group_ensure(self) -> None:
        try:
            grp.getgrnam(RENTER_GROUP)
        except KeyError:
            self._run("groupadd", ["--system", RENTER_GROUP], allowed=(GROUPADD_GROUP_EXISTS,))

    def user_delete(self, *, username: str, remove_home: bool) -> None:
        arguments = ["--remove", username] if remove_home else [username]
        result = self._run("userdel", arguments, allowed=(USERDEL_NO_SUCH_USER,))
        if result.returncode == USERDEL_NO_SUCH_USER:
            return  # already gone: what we wanted

    # Processes --------------------------------------------------------------------------------

    def user_processes_kill(self, *, username: str) -> None:
        """SIGKILL every process of the user until none is left (a process may fork while the
        previous ones die), or `SystemCommandError` after about five seconds."""
        deadline = self.clock() + KILL_DEADLINE_SECONDS
        while True:
            self._run("pkill", ["-KILL", "-u", username], allowed=(PGREP_NONE_FOUND,))
            found = self._run("pgrep", ["-u", username], allowed=(PGREP_NONE_FOUND,))
            # A zombie is dead already, only waiting for its parent to read its exit status.
            remaining = [pid for pid in found.stdout.split() if not process_is_zombie(pid)]
            if not remaining:
                return
            if self.clock() >= deadline:
                raise SystemCommandError(f"{len(remaining)} processes of {username} survived SIGKILL")
            self.pause(KILL_PAUSE_SECONDS)

    # The login's files ------------------------------------------------------------------------

    def login_files_write(self, *, username: str, authorized_keys: str | None, gpu_exports: str) -> None:
        """`~/.ssh/authorized_keys` (0600; None: not written, the rental's own sshd reads the
        agent's file), `~/.everx-gpus` and the line that sources it at the top of `~/.bashrc` and
        `~/.profile` (so that non-interactive commands see it too)."""
        entry = self._user_entry(username)
        home = self._home_open(entry)
        try:
            if authorized_keys is not None:
                ssh_dir = self._private_dir_open(home, ".ssh", entry)
                try:
                    file_replace(ssh_dir, "authorized_keys", authorized_keys, entry, 0o600)
                finally:
                    os.close(ssh_dir)
            file_replace(home, GPU_FILE, gpu_exports, entry, 0o644)
            for name in SHELL_STARTUP_FILES:
                current = file_read(home, name)
                if SOURCE_LINE not in current.splitlines():
                    file_replace(home, name, f"{SOURCE_LINE}\n{current}", entry, 0o644)
        finally:
            os.close(home)

    def login_files_remove(self, *, username: str) -> None:
        """Take the key away first, so that nobody logs in while the user's processes die."""
        try:
            entry = self._user_entry(username)
        except SystemCommandError:
            return
        try:
            home = self._home_open(entry)
        except SystemCommandError:
            return
        try:
            try:
                ssh_dir = os.open(".ssh", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=home)
            except OSError:
                return
            try:
                os.unlink("authorized_keys", dir_fd=ssh_dir)
            except FileNotFoundError:
                pass
            except OSError as error:
                raise SystemCommandError(f"authorized_keys could not be removed: {error.strerror}") from None
            finally:
                os.close(ssh_dir)
        finally:
            os.close(home)

    # Helpers ----------------------------------------------------------------------------------

    def _run(self, name: str, arguments: list[str], *, allowed: tuple[int, ...] = (),
             timeout: float = COMMAND_TIMEOUT_SECONDS) -> subprocess.CompletedProcess:
        path = self.commands.get(name)
        if not path:
            raise SystemCommandError(f"{name} is not installed")
        try:
            result = subprocess.run([path, *arguments], capture_output=True, text=True, timeout=timeout,
                                    check=False, env={"PATH": SYSTEM_PATH, "LC_ALL": "C"})
        except subprocess.TimeoutExpired:
            raise SystemCommandError(f"{name} did not finish within {timeout:g} seconds") from None
        except OSError as error:
            raise SystemCommandError(f"{name} could not be run: {error.strerror or error}") from None
        if result.returncode != 0 and result.returncode not in allowed:
            said = " ".join((result.stderr or result.stdout).split())[:OUTPUT_LIMIT]
            raise SystemCommandError(f"{name} failed (exit code {result.returncode})"
                                     + (f": {said}" if said else ""))
        return result

    @staticmethod
    def _user_entry(username: str) -> pwd.struct_passwd:
        try:
            return pwd.getpwnam(username)
        except KeyError:
            raise SystemCommandError(f"there is no user {username}") from None

    @staticmethod
    def _home_open(entry: pwd.struct_passwd) -> int:
        try:
            home = os.open(entry.pw_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as error:
            raise SystemCommandError(f"the home directory {entry.pw_dir} cannot be opened: "
                                     f"{error.strerror}") from None
        if os.fstat(home).st_uid != entry.pw_uid:
            os.close(home)
            raise SystemCommandError(f"the home directory {entry.pw_dir} is not owned by {entry.pw_name}")
        return home

    @staticmethod
    def _private_dir_open(parent: int, name: str, entry: pwd.struct_passwd) -> int:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=parent)
        try:
            directory = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
        except OSError:
            raise SystemCommandError(f"~/{name} of {entry.pw_name} is not a directory") from None
        os.fchown(directory, entry.pw_uid, entry.pw_gid)
        os.fchmod(directory, 0o700)
        return directory


def process_is_zombie(pid: str) -> bool:
    try:
        # /proc/<pid>/stat: "pid (command) state ...", the command may hold spaces and brackets.
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True  # gone meanwhile


def file_read(directory: int, name: str) -> str:
    """A small regular file's text in `directory`, "" when there is none (or it is not a regular
    file: a FIFO or a link planted there is never followed)."""
    try:
        descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=directory)
    except OSError:
        return ""
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return ""
        return handle.read(MAX_STARTUP_FILE_BYTES).decode("utf-8", errors="replace")


def file_replace(directory: int, name: str, text: str, entry: pwd.struct_passwd, mode: int) -> None:
    """Replace `name` in `directory` atomically by a file of the user's with `text`."""
    temporary = f".{name}.everx-agent.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary, dir_fd=directory)
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode,
                             dir_fd=directory)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fchown(handle.fileno(), entry.pw_uid, entry.pw_gid)
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except OSError as error:
        raise SystemCommandError(f"{name} could not be written: {error.strerror or error}") from None
