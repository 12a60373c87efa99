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
`nvidia-modprobe`): it returns those differences, which the agent reports as drift. A GPU goes
to its next rental only once no process of the previous one holds its node open.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

ACL_XATTR = "system.posix_acl_access"
ACL_VERSION = 2
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
        if error.errno != errno.ENODATA:
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
        if error.errno != errno.ENODATA:
            raise


@dataclass
class LockPass:
    """What one pass over the nodes found: the nodes it repaired, and the GPUs it did not hand to
    their new rental because a process of the previous one still holds the node open (by pid)."""

    drifts: list[Drift]
    held: dict[int, list[int]]


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


def devices_lock(*, device_dir: Path, owners: dict[int, int], proc_dir: Path | None = PROC) -> LockPass:
    """Each GPU node of `device_dir` locked to the user id `owners` gives its index (none: nobody).
    Reads every node; writes only those that differ. A GPU whose node a process of its previous
    renter still holds open goes to nobody until it is let go (`proc_dir` None: not checked)."""
    found_pass = LockPass(drifts=[], held={})
    for index, path in sorted(gpu_nodes(device_dir).items()):
        owner = owners.get(index)
        wanted = node_wanted(() if owner is None else (owner,))
        found = node_read(path)
        previous = frozenset(found.acl_users) - frozenset(wanted.acl_users)
        if owner is not None and previous and proc_dir is not None:
            holders = node_holders(path, uids=previous, proc_dir=proc_dir)
            if holders:
                found_pass.held[index] = holders
                wanted = node_wanted(())
        if found != wanted:
            node_lock(path, wanted)
            found_pass.drifts.append(Drift(index=index, found=found, wanted=wanted))
    return found_pass


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
