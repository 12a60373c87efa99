"""GPU device nodes locked to the rental that has the GPU.

`CUDA_VISIBLE_DEVICES` only tells a program which GPUs to use: any renter can unset it, and a
default driver install leaves every `/dev/nvidiaN` open to all (mode 0666). So each GPU node is
made mode 0660, owned by root:root, and carries one POSIX ACL entry, `user:evx-<id>:rw`, for the
rental whose GPU it is; a GPU nobody rents carries none. The driver's shared control nodes
(`nvidiactl`, `nvidia-uvm`, `nvidia-uvm-tools`, `nvidia-modeset`) are left as the driver made them:
a process needs them to reach any GPU, and opening them gives none.

The ACL is written as the kernel stores it (the `system.posix_acl_access` extended attribute), so
the host needs no `setfacl`. `devices_lock` reads every node first and writes only where a node
differs from what it should be (a node recreated by udev or a driver reload, `chmod 0666` by
`nvidia-modprobe`): it returns those differences, from which the agent reports as drift the
ones it did not make itself (`DriftQueue`). A GPU goes to its next rental only once no process of
the previous one holds its node open and `nvidia-smi` lists no process on it.
"""

from __future__ import annotations

import errno
import grp
import logging
import os
import re
import shutil
import stat
import struct
import subprocess
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .system import SYSTEM_PATH

LOG = logging.getLogger("everx_agent.devices")

ACL_XATTR = "system.posix_acl_access"
ACL_VERSION = 2
# A file system without ACLs answers a read or removal of the attribute as if it held none.
NO_ACL_ERRORS = frozenset({errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP})
# Tags and permissions of the kernel's POSIX ACL format (linux/posix_acl_xattr.h).
USER_OBJ, USER, GROUP_OBJ, MASK, OTHER = 0x01, 0x02, 0x04, 0x10, 0x20
READ_WRITE = 0o6
NO_ID = 0xFFFFFFFF
GPU_NODE = re.compile(r"nvidia(0|[1-9][0-9]{0,2})")
LOCKED_MODE = 0o660


@dataclass(frozen=True)
class NodeState:
    """What matters of a GPU node: its permission bits, owner, group and its ACL attribute as
    stored (b"" for none), compared whole: an extra entry someone added is a difference too."""

    mode: int
    uid: int
    gid: int
    acl: bytes

    @property
    def acl_users(self) -> tuple[int, ...]:
        return acl_users(self.acl)

    def text(self) -> str:
        users = ",".join(str(uid) for uid in self.acl_users) or "none"
        return f"mode {self.mode:04o}, owner {self.uid}:{self.gid}, ACL users {users}"


@dataclass(frozen=True)
class Drift:
    """A node found unlike its lock, and repaired."""

    index: int
    found: NodeState
    wanted: NodeState

    def to_json(self) -> dict:
        return {"gpu_index": self.index, "found": self.found.text(), "wanted": self.wanted.text()}


# The protocol's limit: a heartbeat carries at most this many drifts, the latest ones.
MAX_DRIFTS_QUEUED = 64
DRIFT_TEXT_LIMIT = 200  # an ACL someone filled with entries makes a long text


@dataclass(frozen=True)
class DriftEvent:
    """A repaired drift as the heartbeat reports it; `number` orders them, to drop those sent."""

    number: int
    at: str
    node: str
    found: str

    def to_json(self) -> dict:
        return {"at": self.at, "node": self.node, "found": self.found}


class DriftQueue:
    """The drifts repaired since the exchange last heard of them: kept until a heartbeat that
    carried them was answered, the oldest dropped first past `limit`. The loop and the device
    watch use it from two threads."""

    def __init__(self, *, limit: int = MAX_DRIFTS_QUEUED):
        self._events: deque[DriftEvent] = deque(maxlen=limit)
        self._numbered = 0
        self._lock = threading.Lock()

    def add(self, drifts: Iterable[Drift], *, at: str) -> None:
        with self._lock:
            for drift in drifts:
                self._numbered += 1
                self._events.append(DriftEvent(number=self._numbered, at=at, node=f"nvidia{drift.index}",
                                               found=drift.found.text()[:DRIFT_TEXT_LIMIT]))

    def pending(self) -> list[DriftEvent]:
        with self._lock:
            return list(self._events)

    def drop(self, sent: list[DriftEvent]) -> None:
        """Forget `sent` (the exchange has them), not what was queued meanwhile."""
        if not sent:
            return
        with self._lock:
            while self._events and self._events[0].number <= sent[-1].number:
                self._events.popleft()

    def __iter__(self):
        return iter(self.pending())

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)


def acl_encode(users: tuple[int, ...]) -> bytes:
    """The extended attribute for mode 0660 plus read and write for each of `users`."""
    entries = [(USER_OBJ, READ_WRITE, NO_ID)]
    entries += [(USER, READ_WRITE, uid) for uid in sorted(users)]
    entries += [(GROUP_OBJ, READ_WRITE, NO_ID), (MASK, READ_WRITE, NO_ID), (OTHER, 0, NO_ID)]
    return struct.pack("<I", ACL_VERSION) + b"".join(struct.pack("<HHI", *entry) for entry in entries)


def acl_users(data: bytes) -> tuple[int, ...]:
    """The users an ACL attribute names with both read and write; () for one it cannot read."""
    if len(data) < 4 or (len(data) - 4) % 8 or struct.unpack_from("<I", data)[0] != ACL_VERSION:
        return ()
    entries = [struct.unpack_from("<HHI", data, offset) for offset in range(4, len(data), 8)]
    return tuple(sorted(uid for tag, perm, uid in entries if tag == USER and perm & READ_WRITE == READ_WRITE))


def gpu_nodes(device_dir: Path) -> dict[int, Path]:
    """`/dev/nvidiaN` by GPU index: character devices only, the shared control nodes left out."""
    nodes = {}
    try:
        names = os.listdir(device_dir)
    except FileNotFoundError:
        return nodes
    for name in names:
        found = GPU_NODE.fullmatch(name)
        path = device_dir / name
        if found and stat.S_ISCHR(os.lstat(path).st_mode):
            nodes[int(found.group(1))] = path
    return nodes


def node_read(path: Path) -> NodeState:
    status = os.lstat(path)
    try:
        acl = os.getxattr(path, ACL_XATTR, follow_symlinks=False)
    except OSError as error:
        if error.errno not in NO_ACL_ERRORS:
            raise
        acl = b""
    return NodeState(mode=stat.S_IMODE(status.st_mode), uid=status.st_uid, gid=status.st_gid, acl=acl)


def node_wanted(users: tuple[int, ...]) -> NodeState:
    return NodeState(mode=LOCKED_MODE, uid=0, gid=0, acl=acl_encode(users) if users else b"")


def node_lock(path: Path, wanted: NodeState) -> None:
    """Owner and mode first, then the ACL: `chmod` rewrites the ACL's mask, so it goes before."""
    os.chown(path, wanted.uid, wanted.gid, follow_symlinks=False)
    os.chmod(path, wanted.mode)
    if wanted.acl:
        os.setxattr(path, ACL_XATTR, wanted.acl, follow_symlinks=False)
        return
    try:
        os.removexattr(path, ACL_XATTR, follow_symlinks=False)
    except OSError as error:
        if error.errno not in NO_ACL_ERRORS:
            raise


@dataclass
class LockPass:
    """What one pass over the nodes found: the nodes it changed, the state it left each node in,
    and the GPUs it did not hand to their new rental because the previous one may still use them
    (why, by GPU index)."""

    drifts: list[Drift]
    held: dict[int, str]
    left: dict[int, NodeState] = field(default_factory=dict)
    # The renters a GPU was taken from and not yet handed over from, for the next pass: closing
    # its node does not close what they hold open, so they are checked until it goes on.
    waiting: dict[int, frozenset[int]] = field(default_factory=dict)
    # The nodes the kernel would not lock (a /dev without ACLs, a read-only one), why by GPU index.
    failed: dict[int, str] = field(default_factory=dict)


PROC = Path("/proc")
# NVIDIA's daemon that keeps the driver loaded holds every node open, whoever rents the GPU.
PERSISTENCE_DAEMON = "nvidia-persistenced"


def node_holders(path: Path, *, uids: frozenset[int], proc_dir: Path = PROC) -> list[int]:
    """The processes of `uids` that hold `path` open (`/proc/<pid>/fd`), NVIDIA's persistence
    daemon left out. A process that ends while it is read is not a holder."""
    holders = []
    target = str(path)
    with os.scandir(proc_dir) as entries:
        processes = [entry for entry in entries if entry.name.isdigit()]
    for entry in processes:
        try:
            if os.stat(entry.path).st_uid not in uids:
                continue
            if (Path(entry.path) / "comm").read_text().strip() == PERSISTENCE_DAEMON:
                continue
            with os.scandir(Path(entry.path) / "fd") as descriptors:
                if any(os.readlink(descriptor.path) == target for descriptor in descriptors):
                    holders.append(int(entry.name))
        except OSError:
            continue
    return sorted(holders)


def devices_lock(*, device_dir: Path, owners: dict[int, int], proc_dir: Path | None = PROC,
                 compute_apps: Callable[[], dict[str, list[int]]] | None = None,
                 uuids: dict[int, str] | None = None,
                 waiting: dict[int, frozenset[int]] | None = None) -> LockPass:
    """Each GPU node of `device_dir` locked to the user id `owners` gives its index (none: nobody).
    Reads every node; writes only those that differ. A GPU changing hands goes to nobody while a
    process of its previous renters (those of its ACL, and `waiting`: the previous pass's)
    holds its node open (`proc_dir` None: not checked) or while `compute_apps`
    (`compute_apps_read`: process ids by GPU UUID; `uuids` gives each index's UUID) lists a
    process on it. `compute_apps` runs once at most, and only when a GPU changes hands."""
    found_pass = LockPass(drifts=[], held={})
    listing = DriverListing(read=compute_apps)
    for index, path in sorted(gpu_nodes(device_dir).items()):
        owner = owners.get(index)
        wanted = node_wanted(() if owner is None else (owner,))
        found = node_read(path)
        previous = (frozenset(found.acl_users) | (waiting or {}).get(index, frozenset())) \
            - frozenset(wanted.acl_users)
        if previous and proc_dir is not None:
            reason = "" if owner is None else handover_refusal(
                path, previous=previous, proc_dir=proc_dir, listing=listing, uuid=(uuids or {}).get(index))
            if owner is None or reason:
                found_pass.waiting[index] = previous
            if reason:
                found_pass.held[index] = reason
                wanted = node_wanted(())
        if found != wanted:
            try:
                node_lock(path, wanted)
            except OSError as error:
                why = error.strerror or error
                found_pass.failed[index] = f"GPU {index}'s node could not be locked: {why}"
                found_pass.left[index] = node_state_or(path, found)
                continue
            found_pass.drifts.append(Drift(index=index, found=found, wanted=wanted))
        found_pass.left[index] = wanted
    return found_pass


def node_state_or(path: Path, fallback: NodeState) -> NodeState:
    """The node as a failed lock left it (part of it may have been written), else `fallback`."""
    try:
        return node_read(path)
    except OSError:
        return fallback


def handover_refusal(path: Path, *, previous: frozenset[int], proc_dir: Path, listing: DriverListing,
                     uuid: str | None) -> str:
    """Why the GPU of node `path` may not go to its next rental yet, "" when it may: a process of
    the `previous` renters holds the node open, or the driver lists a process on the GPU."""
    holders = node_holders(path, uids=previous, proc_dir=proc_dir)
    if holders:
        return f"processes {pids_text(holders)} of the previous rental hold its node open"
    if listing.read is None:
        return ""
    found = listing.apps()
    if found is None:
        return listing.problem
    if uuid is None:
        # Without the rental's UUIDs the agent cannot tell which GPU a process is on: any one holds.
        pids = sorted(pid for gpu_pids in found.values() for pid in gpu_pids)
        return f"nvidia-smi lists processes {pids_text(pids)} on a GPU it cannot name" if pids else ""
    pids = sorted(found.get(uuid, []))
    return f"nvidia-smi lists processes {pids_text(pids)} on it" if pids else ""


def pids_text(pids: list[int]) -> str:
    return ",".join(str(pid) for pid in pids)


@dataclass
class DriverListing:
    """The driver's compute processes by GPU UUID, read at most once per pass, when a GPU first
    changes hands; None (and `problem`) when they could not be read."""

    read: Callable[[], dict[str, list[int]]] | None
    problem: str = ""
    _apps: dict[str, list[int]] | None = None
    _done: bool = False

    def apps(self) -> dict[str, list[int]] | None:
        if not self._done and self.read is not None:
            self._done = True
            try:
                self._apps = self.read()
            except ComputeAppsUnknown as error:
                self.problem = str(error)
        return self._apps


class ComputeAppsUnknown(Exception):
    """nvidia-smi did not say which processes use the GPUs: a GPU changing hands waits."""


NVIDIA_SMI = "nvidia-smi"
COMPUTE_APPS_ARGS = ("--query-compute-apps=gpu_uuid,pid", "--format=csv,noheader")
COMPUTE_APPS_TIMEOUT_SECONDS = 10.0
NO_PROCESSES = "No running processes found"


def compute_apps_read(*, search_path: str | None = None,
                      timeout: float = COMPUTE_APPS_TIMEOUT_SECONDS) -> dict[str, list[int]]:
    """The process ids nvidia-smi lists per GPU UUID; {} without nvidia-smi (no driver: nothing
    can run on a GPU), `ComputeAppsUnknown` when it fails, hangs or answers what it cannot read."""
    binary = shutil.which(NVIDIA_SMI, path=search_path or os.environ.get("PATH") or SYSTEM_PATH)
    if binary is None:
        return {}
    try:
        result = subprocess.run([binary, *COMPUTE_APPS_ARGS], capture_output=True, text=True,
                                timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ComputeAppsUnknown(f"nvidia-smi did not list the GPUs' processes within {timeout:g} s") \
            from None
    except OSError as error:
        raise ComputeAppsUnknown(f"nvidia-smi could not be run: {error.strerror or error}") from None
    if result.returncode != 0:
        raise ComputeAppsUnknown(f"nvidia-smi could not list the GPUs' processes (exit code "
                                 f"{result.returncode})")
    return compute_apps_parse(result.stdout)


def compute_apps_parse(text: str) -> dict[str, list[int]]:
    apps: dict[str, list[int]] = {}
    for line in text.splitlines():
        if not line.strip() or line.strip().startswith(NO_PROCESSES):
            continue
        uuid, comma, pid = (part.strip() for part in line.partition(","))
        if not comma or not uuid.startswith("GPU-") or not pid.isdigit():
            raise ComputeAppsUnknown(f"nvidia-smi listed the GPUs' processes in a way the agent cannot "
                                     f"read: {line.strip()[:80]!r}")
        apps.setdefault(uuid, []).append(int(pid))
    return apps


# Will the driver undo the locks? -------------------------------------------------------------

DRIVER_PARAMS = Path("/proc/driver/nvidia/params")
MODPROBE_FILE = Path("/etc/modprobe.d/everx-nvidia.conf")
# The driver's own settings that make it create and repair nodes as the lock wants them.
MODPROBE_OPTIONS = "options nvidia NVreg_DeviceFileUID=0 NVreg_DeviceFileGID=0 NVreg_DeviceFileMode=0660\n"
OTHERS_BITS = 0o007


@dataclass(frozen=True)
class DriverPermissions:
    """Whether the NVIDIA driver leaves the locks alone. `nvidia-modprobe` (setuid root, which
    CUDA runs when nodes look wrong, and any user can run) puts a node back to the driver's
    `DeviceFileMode`, owner and group whenever they differ from them, and `chmod 0666` on a node
    with an ACL opens it to everyone."""

    keeps: bool
    detail: str


def driver_params_parse(text: str) -> dict[str, str]:
    params = {}
    for line in text.splitlines():
        key, colon, value = line.partition(":")
        if colon:
            params[key.strip()] = value.strip()
    return params


def group_exists(gid: int) -> bool:
    try:
        grp.getgrgid(gid)
    except KeyError:
        return False
    return True


def driver_permissions_read(*, path: Path = DRIVER_PARAMS,
                            renter_gids: frozenset[int] = frozenset()) -> DriverPermissions | None:
    """The driver's parameters (`/proc/driver/nvidia/params`) judged; None without a driver."""
    try:
        params = driver_params_parse(path.read_text(encoding="utf-8", errors="replace"))
    except FileNotFoundError:
        return None
    except OSError as error:
        return DriverPermissions(keeps=False, detail=f"its parameters cannot be read: {error}")
    if params.get("ModifyDeviceFiles") == "0":
        return DriverPermissions(keeps=True, detail="it does not change device files (ModifyDeviceFiles: 0)")
    try:
        mode, uid, gid = (int(params[key]) for key in ("DeviceFileMode", "DeviceFileUID", "DeviceFileGID"))
    except (KeyError, ValueError):
        return DriverPermissions(keeps=False, detail="its parameters do not say how it makes device files")
    problems = []
    if mode & OTHERS_BITS:
        problems.append(f"it makes device files mode {mode:04o}, open to every user")
    if uid != 0:
        problems.append(f"it gives them to user {uid}")
    if gid in renter_gids:
        problems.append(f"it gives them to the group {gid} of a rental")
    elif gid != 0 and not group_exists(gid):
        problems.append(f"it gives them to the group {gid}, which does not exist: a new rental's may "
                        "become it")
    if problems:
        return DriverPermissions(keeps=False, detail="; ".join(problems))
    return DriverPermissions(keeps=True, detail=f"it makes device files mode {mode:04o}, owner {uid}:{gid}")


def harden_text(permissions: DriverPermissions | None) -> str:
    """What `everx-agent harden` says of the driver, and the fix when it needs one."""
    if permissions is None:
        return "No NVIDIA driver is loaded: nothing to harden until it is.\n"
    if permissions.keeps:
        return f"The NVIDIA driver keeps the GPUs' device permissions: {permissions.detail}.\n"
    return (f"The NVIDIA driver would undo the GPUs' device permissions: {permissions.detail}.\n"
            f"Fix: write this line to {MODPROBE_FILE} (everx-agent harden --apply does):\n"
            f"  {MODPROBE_OPTIONS}"
            "It takes effect after a reboot or once the nvidia module is loaded again "
            "(rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && modprobe nvidia).\n")
