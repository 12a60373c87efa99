"""Each rental's sandbox on a shared server: its cgroup, its mount namespace and its home image.

A rental gets the group `everx/rental-<id>` with the limits the desired state carries (CPU quota,
memory without swap, processes), through the first backend this machine measurably has: a
transient systemd unit `everx-rental-<id>.service` where systemd runs the machine, cgroup v2
files where a v2 hierarchy has the cpu, memory and pids controllers, else cgroup v1 files. On v1
the `devices` controller is a second lock on the GPUs: the rental's group refuses every GPU
node (character major 195) but its own, whatever the node's ACL says.

A command runs in the sandbox (`Sandboxes.spawn`: the per-rental sshd, a test's shell) in a new
mount namespace with private propagation, where `/tmp` and `/var/tmp` are directories of the
rental's home, `/dev/shm` a tmpfs of half its memory and `/proc` a second proc mount with
`hidepid=invisible` (Linux 5.8 and later only: before, proc options were shared by every mount
and the host's own `/proc` would change). Every session the sshd opens inherits all of it.

The home is an ext4 image of the rental's disk share (a sparse file under the agent's state
directory) loop-mounted `nosuid,nodev` on the home directory: the disk limit needs no quota
support in the kernel. A larger share grows it in place (ext4 grows while mounted); a smaller one
is not taken back while the rental runs, since a mounted ext4 cannot shrink.

Nothing here is believed: `sandbox_facts` probes each guarantee once (a probe group written and
read back, a tiny image mounted, a private mount seen from outside) and reports only what held.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import platform
import re
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .system import SYSTEM_PATH, DeliveryRefused, SystemCommandError

LOG = logging.getLogger("everx_agent.sandbox")

CGROUP_MOUNTS = Path("/proc/self/mounts")
PROC_MOUNTINFO = Path("/proc/self/mountinfo")
SYSTEMD_RUNNING = Path("/run/systemd/system")  # present exactly when systemd is PID 1
GROUP_DIR = "everx"
GROUP_NAME = re.compile(r"rental-([1-9][0-9]{0,17})")
UNIT_NAME = re.compile(r"everx-rental-([1-9][0-9]{0,17})\.service")
GPU_MAJOR = 195
GPU_MINORS = range(64)  # every index the desired state may name (reconcile.MAX_GPU_INDEX)
SHARED_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
CFS_PERIOD_US = 100_000
V1_CONTROLLERS = ("cpu", "memory", "pids", "devices")
V2_CONTROLLERS = ("cpu", "memory", "pids")
COMMANDS = ("unshare", "mount", "umount", "mkfs.ext4", "losetup", "resize2fs", "setpriv", "systemd-run",
            "systemctl")
COMMAND_TIMEOUT_SECONDS = 60.0
KILL_DEADLINE_SECONDS = 5.0
KILL_PAUSE_SECONDS = 0.05
OUTPUT_LIMIT = 300
# Below 5.8 the proc options are the pid namespace's, not the mount's (see the module's text).
PER_MOUNT_PROC_OPTIONS = (5, 8)
HOME_IMAGES = "homes"
# The sandbox's own folders of these names, in its home (not the host's: the sandbox has no other).
TMP_DIRS = {"/tmp": ".everx-tmp", "/var/tmp": ".everx-var-tmp"}  # noqa: S108
PROBE_IMAGE_BYTES = 8 * 1024 * 1024
PROBE_MEMORY_BYTES = 64 * 1024 * 1024
NOBODY = 65534


class SandboxError(SystemCommandError):
    """A sandbox could not be set up or ended; the reconciler reports the login failed."""


class SandboxRefused(SandboxError, DeliveryRefused):
    """The kernel refused the sandbox a limit or its home: it cannot be delivered as sold here."""


# The isolation fact a refused write of a cgroup file shows false, by the file's controller.
CGROUP_FILE_FACTS = {"cpu": "cpu_limited", "memory": "memory_limited", "pids": "processes_limited",
                     "devices": "device_cgroup"}


@dataclass(frozen=True)
class SandboxLimits:
    cpu_cores: float
    memory_bytes: int
    disk_bytes: int
    processes: int

    @classmethod
    def from_desired(cls, value: object) -> SandboxLimits | None:
        """The desired state's `limits` (cores, MiB, GB, processes), or None when it carries
        none or they are not all positive whole numbers."""
        if not isinstance(value, dict):
            return None
        numbers = [value.get(key) for key in ("cpu_cores", "memory_mib", "disk_gb", "processes")]
        if not all(isinstance(number, int) and not isinstance(number, bool) and number > 0
                   for number in numbers):
            return None
        cores, memory_mib, disk_gb, processes = numbers
        return cls(cpu_cores=cores, memory_bytes=memory_mib * 1024 * 1024, disk_bytes=disk_gb * 10**9,
                   processes=processes)


@dataclass(frozen=True)
class SandboxSpec:
    """One rental's sandbox: whose it is, its home, its limits and its GPUs' minor numbers."""

    rental_id: int
    uid: int
    gid: int
    home: Path
    limits: SandboxLimits
    gpu_minors: tuple[int, ...] = ()


# Running commands ------------------------------------------------------------------------------

def commands_find() -> dict[str, str | None]:
    search_path = os.pathsep.join([os.environ.get("PATH", ""), SYSTEM_PATH])
    return {name: shutil.which(name, path=search_path) for name in COMMANDS}


def command_run(commands: dict[str, str | None], name: str, arguments: list[str],
                timeout: float = COMMAND_TIMEOUT_SECONDS) -> subprocess.CompletedProcess:
    path = commands.get(name)
    if not path:
        raise SandboxError(f"{name} is not installed")
    try:
        result = subprocess.run([path, *arguments], capture_output=True, text=True,  # noqa: S603
                                timeout=timeout,
                                check=False, env={"PATH": SYSTEM_PATH, "LC_ALL": "C"})
    except subprocess.TimeoutExpired:
        raise SandboxError(f"{name} did not finish within {timeout:g} seconds") from None
    except OSError as error:
        raise SandboxError(f"{name} could not be run: {error.strerror or error}") from None
    if result.returncode != 0:
        said = " ".join((result.stderr or result.stdout).split())[:OUTPUT_LIMIT]
        raise SandboxError(f"{name} failed (exit code {result.returncode})" + (f": {said}" if said else ""))
    return result


# Cgroup files --------------------------------------------------------------------------------

def cgroup_write(path: Path, value: str) -> None:
    """One write of `value`, as the kernel wants it (one value per write), or `SandboxRefused`: a
    limit the kernel refuses is refused again at the next try."""
    try:
        descriptor = os.open(path, os.O_WRONLY)
        try:
            os.write(descriptor, value.encode())
        finally:
            os.close(descriptor)
    except OSError as error:
        why = error.strerror or error
        raise SandboxRefused(f"{path.name} of {path.parent.name} refused {value!r}: {why}",
                             fact=CGROUP_FILE_FACTS.get(path.name.split(".", 1)[0], "")) from None


def cgroup_read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def cgroup_set(path: Path, value: str) -> None:
    """Write only when different: an unchanged reconcile writes nothing."""
    if cgroup_read(path) != value:
        cgroup_write(path, value)


def cgroup_pids(procs: Path) -> list[int]:
    return [int(pid) for pid in cgroup_read(procs).split()]


def cgroup_mounts(text: str) -> tuple[dict[str, Path], Path | None]:
    """From /proc/self/mounts: each v1 controller's mount point, and the v2 hierarchy's."""
    v1: dict[str, Path] = {}
    v2 = None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        target, fstype, options = Path(fields[1]), fields[2], fields[3].split(",")
        if fstype == "cgroup":
            for controller in V1_CONTROLLERS:
                if controller in options:
                    v1.setdefault(controller, target)
        elif fstype == "cgroup2" and v2 is None:
            v2 = target
    return v1, v2


def groups_in(folder: Path) -> set[int]:
    try:
        names = os.listdir(folder)
    except OSError:
        return set()
    return {int(found.group(1)) for name in names if (found := GROUP_NAME.fullmatch(name))}


def group_kill(procs: Path, *, pause: float = KILL_PAUSE_SECONDS) -> None:
    """SIGKILL every process listed in `procs` until none is left (one may fork meanwhile)."""
    deadline = time.monotonic() + KILL_DEADLINE_SECONDS
    while pids := cgroup_pids(procs):
        if time.monotonic() >= deadline:
            raise SandboxError(f"{len(pids)} processes of {procs.parent.name} survived SIGKILL")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(pause)


def group_rmdir(folder: Path) -> None:
    """A group emptied a moment ago may still be busy while its last process is released."""
    deadline = time.monotonic() + KILL_DEADLINE_SECONDS
    while True:
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as error:
            if error.errno != errno.EBUSY or time.monotonic() >= deadline:
                raise SandboxError(f"the group {folder} cannot be removed: {error.strerror}") from None
            time.sleep(KILL_PAUSE_SECONDS)


class Backend(Protocol):
    name: str

    def apply(self, spec: SandboxSpec) -> None: ...
    def procs_files(self, rental_id: int) -> list[Path]: ...
    def end(self, rental_id: int) -> None: ...
    def rentals(self) -> set[int]: ...


class CgroupV1:
    """One group per controller (cpu, memory, pids, devices), each `<base>/everx/rental-<id>`."""

    name = "v1"

    def __init__(self, *, mounts: dict[str, Path], base: str = ""):
        self.mounts = mounts
        self.base = base

    def folder(self, controller: str, rental_id: int) -> Path:
        return self.mounts[controller] / self.base / GROUP_DIR / f"rental-{rental_id}"

    def apply(self, spec: SandboxSpec) -> None:
        folders = {controller: self.folder(controller, spec.rental_id) for controller in self.mounts}
        for folder in folders.values():
            folder.mkdir(parents=True, exist_ok=True)
        self.limits_write(folders, spec.limits)
        if "devices" in folders:
            gpus_restrict(folders["devices"], spec.gpu_minors)

    def limits_write(self, folders: dict[str, Path], limits: SandboxLimits) -> None:
        cpu, memory, pids = folders["cpu"], folders["memory"], folders["pids"]
        cgroup_set(cpu / "cpu.cfs_period_us", str(CFS_PERIOD_US))
        cgroup_set(cpu / "cpu.cfs_quota_us", str(round(limits.cpu_cores * CFS_PERIOD_US)))
        memory_v1_set(memory, limits.memory_bytes)
        cgroup_set(pids / "pids.max", str(limits.processes))

    def procs_files(self, rental_id: int) -> list[Path]:
        return [self.folder(controller, rental_id) / "cgroup.procs" for controller in self.mounts]

    def end(self, rental_id: int) -> None:
        # The pids group counts every task: once it is empty, every group of the rental is.
        group_kill(self.folder("pids", rental_id) / "cgroup.procs")
        for controller in self.mounts:
            group_rmdir(self.folder(controller, rental_id))

    def rentals(self) -> set[int]:
        return groups_in(self.mounts["pids"] / self.base / GROUP_DIR)


def memory_v1_set(folder: Path, limit: int) -> None:
    """Memory and memory plus swap both at `limit` (no swap); the kernel wants memsw never below
    the memory limit, so the order depends on whether the limit goes up or down. Without memsw
    (swap accounting off) the group is told not to swap."""
    memory, memsw = folder / "memory.limit_in_bytes", folder / "memory.memsw.limit_in_bytes"
    current = int(cgroup_read(memory) or 0)
    if not memsw.exists():
        cgroup_set(memory, str(limit))
        cgroup_set(folder / "memory.swappiness", "0")
        return
    order = (memsw, memory) if limit > current else (memory, memsw)
    for path in order:
        if int(cgroup_read(path) or 0) != limit:
            cgroup_write(path, str(limit))


def gpus_restrict(folder: Path, own_minors: tuple[int, ...]) -> None:
    """The device group lets the rental open every device but the GPUs that are not its own.
    v1 does not list a default-allow group's exceptions, so they are written each time."""
    for minor in GPU_MINORS:
        rule = "devices.allow" if minor in own_minors else "devices.deny"
        cgroup_write(folder / rule, f"c {GPU_MAJOR}:{minor} rwm")


class CgroupV2:
    """`<base>/everx/rental-<id>` in the unified hierarchy; no device filter (that needs BPF)."""

    name = "v2"

    def __init__(self, *, root: Path, base: str = ""):
        self.root = root
        self.base = base

    def folder(self, rental_id: int) -> Path:
        return self.root / self.base / GROUP_DIR / f"rental-{rental_id}"

    def apply(self, spec: SandboxSpec) -> None:
        folder = self.folder(spec.rental_id)
        self.controllers_enable(folder.parent)
        folder.mkdir(exist_ok=True)
        limits = spec.limits
        cgroup_set(folder / "cpu.max", f"{round(limits.cpu_cores * CFS_PERIOD_US)} {CFS_PERIOD_US}")
        cgroup_set(folder / "memory.max", str(limits.memory_bytes))
        cgroup_set(folder / "memory.swap.max", "0")
        cgroup_set(folder / "pids.max", str(limits.processes))

    def controllers_enable(self, parent: Path) -> None:
        """Each group from the root down to `parent` hands cpu, memory and pids to its children."""
        parent.mkdir(parents=True, exist_ok=True)
        for folder in [*reversed(parent.parents), parent]:
            if folder != self.root and self.root not in folder.parents:
                continue
            enabled = cgroup_read(folder / "cgroup.subtree_control").split()
            missing = [name for name in V2_CONTROLLERS if name not in enabled]
            if missing:
                cgroup_write(folder / "cgroup.subtree_control", " ".join(f"+{name}" for name in missing))

    def procs_files(self, rental_id: int) -> list[Path]:
        return [self.folder(rental_id) / "cgroup.procs"]

    def end(self, rental_id: int) -> None:
        folder = self.folder(rental_id)
        if not folder.exists():
            return
        if (folder / "cgroup.kill").exists():
            cgroup_write(folder / "cgroup.kill", "1")
        group_kill(folder / "cgroup.procs")
        group_rmdir(folder)

    def rentals(self) -> set[int]:
        return groups_in(self.root / self.base / GROUP_DIR)


class Systemd:
    """A transient service per rental, started by `spawn` with the sandbox's command; systemd
    then keeps the limits, the device allow-list, the private /tmp and the hidden processes."""

    name = "systemd"

    def __init__(self, *, commands: dict[str, str | None], device_dir: Path = Path("/dev")):
        self.commands = commands
        self.device_dir = device_dir

    @staticmethod
    def unit(rental_id: int) -> str:
        return f"everx-rental-{rental_id}.service"

    def properties(self, spec: SandboxSpec) -> list[str]:
        limits = spec.limits
        allowed = ["char-pts rw", "/dev/ptmx rw", "/dev/tty rw"]
        allowed += [f"{self.device_dir / name} rw" for name in SHARED_NODES]
        allowed += [f"{self.device_dir / f'nvidia{minor}'} rw" for minor in spec.gpu_minors]
        return [
            f"CPUQuota={round(limits.cpu_cores * 100)}%", f"MemoryMax={limits.memory_bytes}",
            "MemorySwapMax=0", f"TasksMax={limits.processes}", "DevicePolicy=closed",
            *(f"DeviceAllow={entry}" for entry in allowed),
            "PrivateTmp=yes", f"TemporaryFileSystem=/dev/shm:size={limits.memory_bytes // 2},mode=1777",
            "ProtectProc=invisible",
        ]

    def run_arguments(self, spec: SandboxSpec, argv: list[str], user: tuple[int, int] | None) -> list[str]:
        arguments = ["--unit", self.unit(spec.rental_id), "--collect", "--quiet"]
        arguments += [f"--property={entry}" for entry in self.properties(spec)]
        if user:
            arguments += [f"--uid={user[0]}", f"--gid={user[1]}"]
        return [*arguments, "--", *argv]

    def apply(self, spec: SandboxSpec) -> None:
        """The unit starts with its command (`spawn`); a running one gets changed limits."""
        if spec.rental_id in self.rentals():
            limits = [entry for entry in self.properties(spec)
                      if entry.split("=", 1)[0] in ("CPUQuota", "MemoryMax", "TasksMax")]
            command_run(self.commands, "systemctl", ["set-property", "--runtime", self.unit(spec.rental_id),
                                                     *limits])

    def procs_files(self, rental_id: int) -> list[Path]:
        return []

    def end(self, rental_id: int) -> None:
        if rental_id not in self.rentals():
            return
        unit = self.unit(rental_id)
        command_run(self.commands, "systemctl", ["kill", "--signal=SIGKILL", unit])
        command_run(self.commands, "systemctl", ["stop", unit])

    def rentals(self) -> set[int]:
        listed = command_run(self.commands, "systemctl", [
            "list-units", "--all", "--plain", "--no-legend", "everx-rental-*.service"]).stdout
        return {int(found.group(1)) for line in listed.splitlines() if line.split()
                and (found := UNIT_NAME.fullmatch(line.split()[0]))}


def backend_detect(*, commands: dict[str, str | None], base: str = "", mounts_text: str | None = None,
                   systemd_running: Path = SYSTEMD_RUNNING,
                   device_dir: Path = Path("/dev")) -> Backend | None:
    """systemd when it runs the machine, else v2 with cpu, memory and pids, else v1 with them;
    None when none is there. The facts then say which of its promises held."""
    if systemd_running.is_dir() and commands.get("systemd-run") and commands.get("systemctl"):
        return Systemd(commands=commands, device_dir=device_dir)
    v1, v2 = cgroup_mounts(CGROUP_MOUNTS.read_text() if mounts_text is None else mounts_text)
    if v2 is not None and set(V2_CONTROLLERS) <= set(cgroup_read(v2 / "cgroup.controllers").split()):
        return CgroupV2(root=v2, base=base)
    if set(V2_CONTROLLERS) <= set(v1):
        return CgroupV1(mounts=v1, base=base)
    return None


# The sandboxes ---------------------------------------------------------------------------------

def kernel_at_least(version: tuple[int, int], release: str | None = None) -> bool:
    found = re.match(r"(\d+)\.(\d+)", release or platform.release())
    return bool(found) and (int(found.group(1)), int(found.group(2))) >= version


def proc_options(mountinfo: Path = PROC_MOUNTINFO) -> str:
    """The host's /proc mount line without its mount id (what a sandbox must never change)."""
    for line in mountinfo.read_text().splitlines():
        fields = line.split()
        if len(fields) > 4 and fields[4] == "/proc":
            return " ".join(fields[2:])
    return ""


CAP_SYS_RESOURCE = 24


def capability_held(number: int, status: Path = Path("/proc/self/status")) -> bool:
    """Whether this process's effective capabilities hold capability `number`."""
    try:
        found = re.search(r"^CapEff:\s*([0-9a-f]+)$", status.read_text(), re.MULTILINE)
    except OSError:
        return False
    return bool(found) and bool(int(found.group(1), 16) >> number & 1)


def loop_mounts(mountinfo: Path = PROC_MOUNTINFO) -> dict[Path, Path]:
    """Each mount point of a loop device, with the file behind the device."""
    return {point: backing for point, (_device, backing) in loop_devices(mountinfo).items()}


def loop_devices(mountinfo: Path = PROC_MOUNTINFO) -> dict[Path, tuple[str, Path]]:
    """Each mount point of a loop device, with the device and the file behind it."""
    found = {}
    for line in mountinfo.read_text().splitlines():
        fields, _, after = line.partition(" - ")
        source = after.split()[1:2]
        if not source or not source[0].startswith("/dev/loop"):
            continue
        backing = Path("/sys/block") / Path(source[0]).name / "loop" / "backing_file"
        with contextlib.suppress(OSError, IndexError):
            found[Path(fields.split()[4])] = (source[0], Path(backing.read_text().strip()))
    return found


def spawn_script(*, procs_files: list[Path], tmp_dirs: dict[str, UserDir], shm_bytes: int,
                 hide_processes: bool, user: tuple[int, int] | None,
                 other_homes: tuple[Path, ...] = ()) -> str:
    """What the sandbox's first process does, as root in its new mount namespace, before it
    becomes the command: join the groups (so every child is counted from the start), let go of
    the other rentals' home images (else this namespace would keep them mounted, and their loop
    devices taken, after their rentals end), mount the private folders, drop to the user when
    one is given."""
    lines = ["set -e"]
    lines += [f"echo $$ > {shlex.quote(str(path))}" for path in procs_files]
    lines += [f"umount -l {shlex.quote(str(home))}" for home in other_homes]
    for target, source in tmp_dirs.items():
        # The renter may have swapped the folder for a link since it was checked: what got mounted
        # must be the very folder checked, else the sandbox does not start.
        lines.append(f"mount --bind {shlex.quote(str(source.path))} {target}")
        lines.append(f'[ "$(stat -c %d:%i {target})" = {source.identity} ]')
    lines.append(f"mount -t tmpfs -o nosuid,nodev,mode=1777,size={shm_bytes} everx-shm /dev/shm")
    if hide_processes:
        lines.append("mount -t proc -o nosuid,nodev,noexec,hidepid=invisible proc /proc")
    if user:
        lines.append(f'exec setpriv --reuid={user[0]} --regid={user[1]} --clear-groups -- "$@"')
    else:
        lines.append('exec "$@"')
    return "\n".join(lines)


@dataclass(frozen=True)
class UserDir:
    path: Path
    identity: str  # device:inode, as `stat -c %d:%i` prints it


class Sandboxes:
    """The rentals' sandboxes on this machine, through one backend."""

    def __init__(self, *, state_dir: Path, backend: Backend | None,
                 commands: dict[str, str | None] | None = None, device_dir: Path = Path("/dev"),
                 mountinfo: Path = PROC_MOUNTINFO):
        self.state_dir = state_dir
        self.backend = backend
        self.commands = commands if commands is not None else commands_find()
        self.device_dir = device_dir
        self.mountinfo = mountinfo
        self.host_proc = proc_options(mountinfo)
        self.hide_processes = kernel_at_least(PER_MOUNT_PROC_OPTIONS)
        # ext4 grows while mounted only for CAP_SYS_RESOURCE, which some containers' root lacks.
        self.can_grow = capability_held(CAP_SYS_RESOURCE)
        self._facts: dict[str, Any] | None = None

    @classmethod
    def detect(cls, *, state_dir: Path, device_dir: Path = Path("/dev"), base: str = "") -> Sandboxes:
        commands = commands_find()
        return cls(state_dir=state_dir, commands=commands, device_dir=device_dir,
                   backend=backend_detect(commands=commands, base=base, device_dir=device_dir))

    # Set up, run, end --------------------------------------------------------------------------

    def ensure(self, spec: SandboxSpec) -> None:
        """The sandbox as `spec` says, changing only what differs (a restart finds its groups
        and mounts and duplicates nothing). What the machine lacks (no backend, no loop device)
        is left out, as its facts say: the exchange then sells the server whole, and the whole
        server's rental still starts."""
        self.proc_check()  # after the previous sandboxes mounted their own /proc
        if self.backend is not None:
            self.backend.apply(spec)
        if not os.path.ismount(spec.home) and self.facts()["disk_limited"]:
            self.home_mount(spec)
        self.home_grow(spec)
        for folder in TMP_DIRS.values():
            self.user_dir(spec, folder)

    def spawn(self, spec: SandboxSpec, argv: list[str], *, user: tuple[int, int] | None = None,
              **popen: Any) -> subprocess.Popen:
        """`argv` started in the rental's sandbox (as `user`, a uid and gid, when given)."""
        if isinstance(self.backend, Systemd):
            return subprocess.Popen([self.command("systemd-run"),  # noqa: S603 (an argument list)
                                     *self.backend.run_arguments(spec, argv, user)], **popen)
        tmp_dirs = {target: self.user_dir(spec, folder) for target, folder in TMP_DIRS.items()}
        groups = self.backend.procs_files(spec.rental_id) if self.backend is not None else []
        script = spawn_script(procs_files=groups, tmp_dirs=tmp_dirs,
                              shm_bytes=spec.limits.memory_bytes // 2,
                              hide_processes=self.hide_processes and self.facts()["processes_hidden"],
                              user=user, other_homes=self.other_homes(spec))
        return subprocess.Popen(self.namespace_argv(script, argv), **popen)  # noqa: S603 (a list)

    def other_homes(self, spec: SandboxSpec) -> tuple[Path, ...]:
        images = (self.state_dir / HOME_IMAGES).resolve()
        return tuple(sorted(point for point, image in loop_mounts(self.mountinfo).items()
                            if image.parent == images and point != spec.home))

    def namespace_argv(self, script: str, argv: list[str]) -> list[str]:
        """`script` run by sh in a new mount namespace whose mounts propagate nowhere, then `argv`."""
        return [self.command("unshare"), "--mount", "--propagation", "private", "--",
                "/bin/sh", "-c", script, "everx-sandbox", *argv]

    def end(self, spec: SandboxSpec, *, remove_home: bool) -> None:
        """Every process of the sandbox killed, its home unmounted, its group removed; the image
        deleted when the home goes. (The GPU nodes' ACLs are taken away before, by devices.py.)"""
        if self.backend is not None:
            self.backend.end(spec.rental_id)
        if os.path.ismount(spec.home):
            command_run(self.commands, "umount", [str(spec.home)])
        if remove_home:
            self.image_path(spec.rental_id).unlink(missing_ok=True)

    def rentals(self) -> set[int]:
        """The rentals whose sandbox exists, found by group (or unit) name."""
        return self.backend.rentals() if self.backend is not None else set()

    # The home image ----------------------------------------------------------------------------

    def image_path(self, rental_id: int) -> Path:
        return self.state_dir / HOME_IMAGES / f"rental-{rental_id}.ext4"

    def home_mount(self, spec: SandboxSpec) -> None:
        if os.path.ismount(spec.home):
            return
        image = self.image_path(spec.rental_id)
        if not image.exists():
            self.image_make(image, size=spec.limits.disk_bytes, owner=(spec.uid, spec.gid), content=spec.home)
        try:
            command_run(self.commands, "mount", ["-o", "loop,nosuid,nodev", str(image), str(spec.home)])
        except SandboxError as error:  # no loop device left, or none at all: the disk is not limited
            raise SandboxRefused(f"the home image could not be mounted: {error}",
                                 fact="disk_limited") from None
        os.chown(spec.home, spec.uid, spec.gid)
        os.chmod(spec.home, 0o700)

    def home_grow(self, spec: SandboxSpec) -> None:
        """The mounted home image grown to a larger disk share, at once and in place (the file,
        the loop device's size, then ext4 online). A smaller share changes nothing: the rental
        keeps the disk it had. A grow that fails is logged; the rental goes on with its disk."""
        image = self.image_path(spec.rental_id)
        mounted = loop_devices(self.mountinfo).get(spec.home)
        if mounted is None or mounted[1] != image.resolve():
            return
        size = image.stat().st_size
        if size >= spec.limits.disk_bytes:
            return
        if not (self.can_grow and self.commands.get("losetup") and self.commands.get("resize2fs")):
            LOG.warning("the home of rental %s stays at %d bytes: growing it needs losetup, resize2fs and "
                        "CAP_SYS_RESOURCE", spec.rental_id, size)
            return
        device, wanted = mounted[0], spec.limits.disk_bytes
        try:
            os.truncate(image, wanted)
            try:
                command_run(self.commands, "losetup", ["--set-capacity", device])
            except SandboxError:
                os.truncate(image, size)  # the device never saw it: the next change tries again
                raise
            command_run(self.commands, "resize2fs", [device])
        except (SandboxError, OSError) as error:
            LOG.warning("the home of rental %s could not grow to %d bytes: %s", spec.rental_id, wanted, error)
            return
        LOG.info("the home of rental %s grew from %d to %d bytes", spec.rental_id, size, wanted)

    def image_make(self, image: Path, *, size: int, owner: tuple[int, int], content: Path | None) -> None:
        """A sparse file of `size` bytes with an ext4 file system owned by `owner`, holding what
        `content` holds (the skeleton useradd put in the home)."""
        image.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        partial = image.with_name(f".{image.name}.partial")
        with open(partial, "wb") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.truncate(size)
        try:
            populate = ["-d", str(content)] if content is not None and content.is_dir() else []
            command_run(self.commands, "mkfs.ext4", [
                "-q", "-F", "-m", "0", "-E", f"root_owner={owner[0]}:{owner[1]}", *populate, str(partial)])
            os.replace(partial, image)
        finally:
            partial.unlink(missing_ok=True)

    def user_dir(self, spec: SandboxSpec, name: str) -> UserDir:
        """A directory of the user's in the home, made by root if missing; a link or a file the
        user put there instead is refused, never followed into a bind mount."""
        path = spec.home / name
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
            os.chown(path, spec.uid, spec.gid)
        status = os.lstat(path)
        if not stat.S_ISDIR(status.st_mode) or status.st_uid != spec.uid:
            raise SandboxError(f"~/{name} of rental {spec.rental_id} is not the user's own directory")
        return UserDir(path=path, identity=f"{status.st_dev}:{status.st_ino}")

    def command(self, name: str) -> str:
        path = self.commands.get(name)
        if not path:
            raise SandboxError(f"{name} is not installed")
        return path

    # What holds --------------------------------------------------------------------------------

    def proc_check(self) -> None:
        """After a sandbox mounted its own /proc, the host's must be as it was; if it is not, the
        processes are not hidden and the fact says so from now on."""
        if self.hide_processes and proc_options(self.mountinfo) != self.host_proc:
            self.hide_processes = False
            if self._facts is not None:
                self._facts["processes_hidden"] = False

    def facts(self) -> dict[str, Any]:
        """Measured once, then kept (`proc_check` may still take `processes_hidden` back)."""
        if self._facts is None:
            self._facts = facts_measure(self)
        return self._facts


# Probes ---------------------------------------------------------------------------------------

FACT_KEYS = ("cpu_limited", "memory_limited", "processes_limited", "disk_limited", "tmp_private",
             "processes_hidden", "device_cgroup")


def facts_measure(sandboxes: Sandboxes) -> dict[str, Any]:
    backend = sandboxes.backend
    facts: dict[str, Any] = {"backend": backend.name if backend else "none",
                             **dict.fromkeys(FACT_KEYS, False)}
    probe_dir = sandboxes.state_dir / "probe"
    probe_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        if isinstance(backend, Systemd):
            facts.update(systemd_probe(backend))
        else:
            if backend is not None:
                facts.update(cgroup_probe(backend, probe_dir))
            facts["tmp_private"] = tmp_private_probe(sandboxes, probe_dir)
            facts["processes_hidden"] = sandboxes.hide_processes and processes_hidden_probe(sandboxes)
        facts["disk_limited"] = disk_probe(sandboxes, probe_dir)
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)
    return facts


PROBE_LIMITS = SandboxLimits(cpu_cores=0.5, memory_bytes=PROBE_MEMORY_BYTES, disk_bytes=PROBE_IMAGE_BYTES,
                             processes=16)


def cgroup_probe(backend: CgroupV1 | CgroupV2, probe_dir: Path) -> dict[str, bool]:
    """A probe group with limits written and read back, then removed; on v1 a stand-in GPU
    node opened from inside it must be refused by the device group."""
    probe_id = 10**17 + os.getpid()
    spec = SandboxSpec(rental_id=probe_id, uid=0, gid=0, home=probe_dir, limits=PROBE_LIMITS, gpu_minors=(1,))
    found = dict.fromkeys(("cpu_limited", "memory_limited", "processes_limited", "device_cgroup"), False)
    try:
        backend.apply(spec)
        found = probe_read_back(backend, probe_id)
        if isinstance(backend, CgroupV1) and "devices" in backend.mounts:
            found["device_cgroup"] = device_probe(backend.procs_files(probe_id), probe_dir)
    except (SandboxError, OSError):
        pass
    finally:
        with contextlib.suppress(SandboxError, OSError):
            backend.end(probe_id)
    return found


def probe_read_back(backend: CgroupV1 | CgroupV2, probe_id: int) -> dict[str, bool]:
    quota, memory = str(round(PROBE_LIMITS.cpu_cores * CFS_PERIOD_US)), str(PROBE_MEMORY_BYTES)
    if isinstance(backend, CgroupV1):
        memory_folder = backend.folder("memory", probe_id)
        swap_off = (cgroup_read(memory_folder / "memory.memsw.limit_in_bytes") == memory
                    or cgroup_read(memory_folder / "memory.swappiness") == "0")
        return {"cpu_limited": cgroup_read(backend.folder("cpu", probe_id) / "cpu.cfs_quota_us") == quota,
                "memory_limited": cgroup_read(memory_folder / "memory.limit_in_bytes") == memory and swap_off,
                "processes_limited": cgroup_read(backend.folder("pids", probe_id) / "pids.max") == "16",
                "device_cgroup": False}
    folder = backend.folder(probe_id)
    return {"cpu_limited": cgroup_read(folder / "cpu.max") == f"{quota} {CFS_PERIOD_US}",
            "memory_limited": cgroup_read(folder / "memory.max") == memory
            and cgroup_read(folder / "memory.swap.max") == "0",
            "processes_limited": cgroup_read(folder / "pids.max") == "16", "device_cgroup": False}


def device_probe(procs_files: list[Path], probe_dir: Path) -> bool:
    """A stand-in node 195:0 open to all, opened by a child in the probe group: EPERM from the
    device group is the proof (ENXIO would mean it let the open through to the absent driver)."""
    node = probe_dir / "nvidia0"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(GPU_MAJOR, 0))
    os.chmod(node, 0o666)  # noqa: S103 (open to all: only the device group may refuse it)
    child = os.fork()
    if child == 0:  # pragma: no cover - the child answers by its exit code
        code = 1
        try:
            for path in procs_files:
                cgroup_write(path, str(os.getpid()))
            os.close(os.open(node, os.O_RDWR))
        except SandboxError:
            code = 2
        except OSError as error:
            code = 0 if error.errno == errno.EPERM else 3
        os._exit(code)
    _, status = os.waitpid(child, 0)
    node.unlink()
    return os.waitstatus_to_exitcode(status) == 0


def probe_spec(sandboxes: Sandboxes, probe_dir: Path) -> SandboxSpec:
    home = probe_dir / "home"
    home.mkdir(exist_ok=True)
    os.chown(home, NOBODY, NOBODY)
    return SandboxSpec(rental_id=10**17 + os.getpid(), uid=NOBODY, gid=NOBODY, home=home, limits=PROBE_LIMITS)


def namespace_run(sandboxes: Sandboxes, spec: SandboxSpec, shell: str) -> bool:
    """`shell` run as nobody in a sandbox's namespace without its groups: True when it exits 0."""
    tmp_dirs = {target: sandboxes.user_dir(spec, folder) for target, folder in TMP_DIRS.items()}
    script = spawn_script(procs_files=[], tmp_dirs=tmp_dirs, shm_bytes=spec.limits.memory_bytes // 2,
                          hide_processes=sandboxes.hide_processes, user=(spec.uid, spec.gid))
    try:
        result = subprocess.run(sandboxes.namespace_argv(script, ["/bin/sh", "-c", shell]),  # noqa: S603
                                capture_output=True, timeout=COMMAND_TIMEOUT_SECONDS, check=False)
    except (SandboxError, OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def tmp_private_probe(sandboxes: Sandboxes, probe_dir: Path) -> bool:
    """A file written to /tmp inside lands in the home's folder, and not in the host's /tmp."""
    spec = probe_spec(sandboxes, probe_dir)
    marker = f"everx-probe-{os.getpid()}"
    written = namespace_run(sandboxes, spec, f"echo probe > /tmp/{marker} && test -w /dev/shm")
    inside = spec.home / TMP_DIRS["/tmp"] / marker  # noqa: S108
    private = written and inside.exists() and not (Path("/tmp") / marker).exists()  # noqa: S108
    return private and proc_options(sandboxes.mountinfo) == sandboxes.host_proc


def processes_hidden_probe(sandboxes: Sandboxes) -> bool:
    """Inside, nobody sees no process of root (pid 1 included); outside, /proc is unchanged."""
    with tempfile.TemporaryDirectory(dir=sandboxes.state_dir / "probe") as folder:
        spec = probe_spec(sandboxes, Path(folder))
        hidden = namespace_run(sandboxes, spec, "test ! -e /proc/1 && test -e /proc/self/status")
    return hidden and proc_options(sandboxes.mountinfo) == sandboxes.host_proc


def disk_probe(sandboxes: Sandboxes, probe_dir: Path) -> bool:
    """A tiny image mounted over a folder, written to, unmounted."""
    image, target = probe_dir / "probe.ext4", probe_dir / "mounted"
    target.mkdir(exist_ok=True)
    try:
        sandboxes.image_make(image, size=PROBE_IMAGE_BYTES, owner=(0, 0), content=None)
        command_run(sandboxes.commands, "mount", ["-o", "loop,nosuid,nodev", str(image), str(target)])
    except (SandboxError, OSError):
        return False
    try:
        (target / "probe").write_text("probe")
        return os.path.ismount(target)
    except OSError:
        return False
    finally:
        with contextlib.suppress(SandboxError):
            command_run(sandboxes.commands, "umount", [str(target)])


def systemd_probe(backend: Systemd) -> dict[str, bool]:
    """A transient unit with every property run to its end: systemd refuses one it cannot
    enforce, so a clean run is the measurement."""
    spec = SandboxSpec(rental_id=10**17 + os.getpid(), uid=0, gid=0, home=Path("/"), limits=PROBE_LIMITS)
    arguments = backend.run_arguments(spec, ["/bin/true"], None)
    try:
        command_run(backend.commands, "systemd-run", ["--wait", *arguments])
    except SandboxError:
        return {key: False for key in FACT_KEYS if key != "disk_limited"}
    return {key: True for key in FACT_KEYS if key != "disk_limited"}


# The published functions ------------------------------------------------------------------------

def sandbox_facts(sandboxes: Sandboxes) -> dict[str, Any]:
    """backend, cpu_limited, memory_limited, processes_limited, disk_limited, tmp_private,
    processes_hidden, device_cgroup: each true only once probed on this machine."""
    return sandboxes.facts()


def sandbox_spawn(sandboxes: Sandboxes, spec: SandboxSpec, argv: list[str],
                  **options: Any) -> subprocess.Popen:
    """`argv` run inside the rental's sandbox (its groups and mount namespace)."""
    return sandboxes.spawn(spec, argv, **options)
