"""The isolation report: what this host can enforce between its rentals, measured here.

The exchange sells a server as "container", "shared server" or "whole server" from this report
alone (sellers/isolation.py on the exchange, docs/agent.md "The isolation report"), so every fact
is true only when the agent saw it hold, and anything it could not measure is false. The agent
never decides a level.

Measuring starts subprocesses (`nvidia-smi`, `docker info`, `nvidia-ctk`, the container self-test),
so `IsolationReporter` measures at start, when the GPU device nodes or the driver's parameters
change, and every `report_seconds`; each heartbeat carries the last report as it is (the exchange
stores it only when its digest changes). The sandbox's and the logins' facts come from their
modules through two callables, `sandbox_facts()` and `login_facts()`; until a host has them, they
are false. The container object comes from the agent's `ContainerMode` when it has one.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import json
import logging
import os
import pwd
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .containers import (
    ContainerReconciler,
    ContainerRuntime,
    RuntimeHung,
    container_self_test,
    container_templates_held,
)
from .devices import ACL_XATTR, DRIVER_PARAMS, acl_encode, driver_permissions_read, gpu_nodes
from .reconcile import USERNAME
from .system import RENTER_GROUP, SYSTEM_PATH, DisprovedFacts

LOG = logging.getLogger("everx_agent.isolation")

REPORT_VERSION = 1
BACKENDS = ("systemd", "v2", "v1", "none")
# What the sandbox module measures (sandbox.sandbox_facts), and the login module (sshd.login_facts).
SANDBOX_FACTS = ("device_cgroup", "cpu_limited", "memory_limited", "processes_limited", "disk_limited",
                 "tmp_private", "processes_hidden")
LOGIN_FACTS = ("login_sandboxed", "host_login_closed")
# Limits are cgroup settings: without a backend none of them can hold.
LIMIT_FACTS = ("cpu_limited", "memory_limited", "processes_limited")
FACTS = ("devices_locked", "driver_keeps_permissions", "device_cgroup", "cpu_limited", "memory_limited",
         "processes_limited", "disk_limited", "tmp_private", "processes_hidden", "login_sandboxed",
         "host_login_closed", "mig_enabled")
RUNTIMES = ("docker", "podman")
RUNTIME_INFO_ARGS = {"docker": ("info", "--format", "{{json .}}"), "podman": ("info", "--format", "json")}

DEFAULT_REPORT_MINUTES = 10
DEFAULT_RUNTIME_TIMEOUT_SECONDS = 60.0
COMMAND_TIMEOUT_SECONDS = 10.0
MEMINFO = Path("/proc/meminfo")
MOUNTINFO = Path("/proc/self/mountinfo")
# Present when systemd is the running init (sd_booted(3) looks at the same place).
SYSTEMD_RUNTIME_DIR = Path("/run/systemd/system")
CGROUP_CONTROLLERS = frozenset({"cpu", "memory", "pids"})
# The scratch file the ACL check writes in the device folder (removed at once).
ACL_CHECK_NAME = ".everx-acl-check"
ACL_CHECK_UID = 65534  # nobody: the entry only has to be written and read back
OVERLAY_DRIVERS = frozenset({"overlay", "overlay2"})
# XFS's project quotas, which `--storage-opt size=` needs (the kernel shows `prjquota`).
PROJECT_QUOTA_OPTIONS = frozenset({"prjquota", "pquota"})
MIG_ENABLED = "Enabled"
MAX_CPU_CORES = 4096
MAX_MEMORY_MIB = 2**31
MAX_DISK_GB = 10**7
MAX_VERSION = 40
TEXT_LIMIT = 200
TOOLKIT_VERSION = re.compile(r"version\s+v?([0-9][0-9A-Za-z.+~-]*)")
CDI_GPU = "nvidia.com/gpu="


def default_search_path() -> str:
    """Where the probed commands are looked for: the service's PATH (as for nvidia-smi in
    gpus.py), the usual places without one."""
    return os.environ.get("PATH") or SYSTEM_PATH


@dataclass(frozen=True)
class IsolationSettings:
    """Where the measurements read, and how long they may take. Every path is a setting, so tests
    measure stand-in files (a mountinfo, a meminfo, a device folder) and fake commands."""

    state_dir: Path
    device_dir: Path = Path("/dev")
    driver_params: Path = DRIVER_PARAMS
    meminfo: Path = MEMINFO
    mountinfo: Path = MOUNTINFO
    systemd_dir: Path = SYSTEMD_RUNTIME_DIR
    search_path: str = field(default_factory=default_search_path)
    report_seconds: float = DEFAULT_REPORT_MINUTES * 60.0
    runtime_timeout_seconds: float = DEFAULT_RUNTIME_TIMEOUT_SECONDS
    command_timeout_seconds: float = COMMAND_TIMEOUT_SECONDS


# Commands -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Answer:
    """A command's answer: `ran` false when it is not installed, could not start or did not end
    in time; `problem` says that, or how it failed; otherwise its output."""

    ran: bool
    out: str = ""
    problem: str = ""
    hung: bool = False


def command_run(name: str, arguments: tuple[str, ...], *, settings: IsolationSettings,
                timeout: float) -> Answer:
    binary = shutil.which(name, path=settings.search_path)
    if binary is None:
        return Answer(ran=False, problem=f"{name} is not installed")
    try:
        result = subprocess.run([binary, *arguments], capture_output=True, text=True, timeout=timeout,
                                check=False, env={**os.environ, "PATH": settings.search_path, "LC_ALL": "C"})
    except subprocess.TimeoutExpired:
        return Answer(ran=False, problem=f"{name} {arguments[0]} did not answer within {timeout:g} s",
                      hung=True)
    except OSError as error:
        return Answer(ran=False, problem=f"{name} could not be run: {error.strerror or error}")
    if result.returncode != 0:
        said = " ".join((result.stderr or result.stdout).split())[:TEXT_LIMIT]
        return Answer(ran=True, out=result.stdout,
                      problem=f"{name} {arguments[0]} failed (exit code {result.returncode})"
                              + (f": {said}" if said else ""))
    return Answer(ran=True, out=result.stdout)


# Hardware -------------------------------------------------------------------------------------

def hardware_read(settings: IsolationSettings) -> dict[str, int]:
    """What the exchange shares out by GPU: cores this agent may run on, memory, and the disk of
    the filesystem that holds the agent's state (where the rentals' home images go)."""
    return {"cpu_cores": cpu_cores_count(), "memory_mib": memory_mib_read(settings.meminfo),
            "disk_gb": disk_gb_read(settings.state_dir)}


def cpu_cores_count() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 0
    return min(cores, MAX_CPU_CORES)


def memory_mib_read(path: Path) -> int:
    """MemTotal in MiB; 0 when it cannot be read (a share of nothing: the exchange sells the
    server whole)."""
    try:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key == "MemTotal":
                number, _, unit = value.strip().partition(" ")
                if unit.strip() == "kB" and number.isdigit():
                    return min(int(number) // 1024, MAX_MEMORY_MIB)
    except OSError as error:
        LOG.warning("the memory size could not be read from %s: %s", path, error.strerror or error)
        return 0
    LOG.warning("%s does not say the memory size (MemTotal)", path)
    return 0


def disk_gb_read(path: Path) -> int:
    """The size in GB (10⁹ bytes) of the filesystem holding `path`, or of its nearest existing
    folder above (the state folder may not exist yet)."""
    for candidate in (path, *path.parents):
        try:
            return min(shutil.disk_usage(candidate).total // 10**9, MAX_DISK_GB)
        except FileNotFoundError:
            continue
        except OSError as error:
            LOG.warning("the disk size of %s could not be read: %s", candidate, error.strerror or error)
            return 0
    return 0


# The cgroup backend ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Mount:
    point: str
    fstype: str
    options: frozenset[str]  # the mount's and the filesystem's options together


def mounts_read(path: Path) -> list[Mount]:
    """The mounts of `/proc/self/mountinfo`: `id parent dev root point options [tags] - type
    source super-options`, a point's spaces written as octal escapes."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        LOG.warning("the mounts could not be read from %s: %s", path, error.strerror or error)
        return []
    mounts = []
    for line in text.splitlines():
        before, separator, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not separator or len(fields) < 6 or len(tail) < 3:
            continue
        options = frozenset(fields[5].split(",")) | frozenset(tail[2].split(","))
        mounts.append(Mount(point=octal_unescape(fields[4]), fstype=tail[0], options=options))
    return mounts


def octal_unescape(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda found: chr(int(found.group(1), 8)), text)


def backend_detect(settings: IsolationSettings, mounts: list[Mount]) -> str:
    """systemd when it is the init and `systemd-run` is installed; "v2" when the cgroup2 root
    delegates cpu, memory and pids; "v1" when those three v1 controllers are mounted; else "none"."""
    if settings.systemd_dir.is_dir() and shutil.which("systemd-run", path=settings.search_path):
        return "systemd"
    for mount in mounts:
        if mount.fstype == "cgroup2" and cgroup2_controllers(Path(mount.point)) >= CGROUP_CONTROLLERS:
            return "v2"
    v1_controllers = {option for mount in mounts if mount.fstype == "cgroup" for option in mount.options}
    if v1_controllers >= CGROUP_CONTROLLERS:
        return "v1"
    return "none"


def cgroup2_controllers(root: Path) -> frozenset[str]:
    try:
        return frozenset((root / "cgroup.controllers").read_text().split())
    except OSError:
        return frozenset()


def sandbox_facts_unmeasured(settings: IsolationSettings) -> dict[str, Any]:
    """`sandbox_facts` of a host without the sandbox module: the backend found, no fact held."""
    return {"backend": backend_detect(settings, mounts_read(settings.mountinfo)),
            **dict.fromkeys(SANDBOX_FACTS, False)}


def login_facts_unmeasured() -> dict[str, bool]:
    """`login_facts` of a host without the per-rental sshd: no fact held."""
    return dict.fromkeys(LOGIN_FACTS, False)


# Facts of the GPUs ----------------------------------------------------------------------------

def devices_locked_check(device_dir: Path) -> bool:
    """Whether the device folder keeps POSIX ACLs: one written on a scratch file there reads
    back the same (a /dev without ACL support leaves every GPU node open to its group or none)."""
    wanted = acl_encode((ACL_CHECK_UID,))
    path = device_dir / ACL_CHECK_NAME
    try:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # left by an agent that stopped halfway
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        try:
            os.setxattr(path, ACL_XATTR, wanted, follow_symlinks=False)
            kept = os.getxattr(path, ACL_XATTR, follow_symlinks=False) == wanted
        finally:
            path.unlink()
    except OSError as error:
        unsupported = error.errno in (errno.EOPNOTSUPP, errno.ENOTSUP)
        LOG.warning("the GPU nodes in %s cannot be locked: %s", device_dir,
                    "its filesystem has no POSIX ACLs" if unsupported else (error.strerror or error))
        return False
    if not kept:
        LOG.warning("the GPU nodes in %s cannot be locked: an ACL written there reads back otherwise",
                    device_dir)
    return kept


def renter_gids() -> frozenset[int]:
    """Every group a renter is in: each rental user's own, `everx-renters` (all of them) and any
    other that lists one. A driver giving its nodes to one of them gives every GPU to renters."""
    renters = {entry.pw_name for entry in pwd.getpwall() if USERNAME.fullmatch(entry.pw_name)}
    gids = {entry.pw_gid for entry in pwd.getpwall() if entry.pw_name in renters}
    gids |= {group.gr_gid for group in grp.getgrall()
             if group.gr_name == RENTER_GROUP or renters & set(group.gr_mem)}
    return frozenset(gids)


def driver_keeps_check(settings: IsolationSettings) -> bool:
    """Whether the driver leaves the locks alone (devices.driver_permissions_read); no driver:
    not known, false."""
    permissions = driver_permissions_read(path=settings.driver_params, renter_gids=renter_gids())
    if permissions is None:
        LOG.info("no NVIDIA driver parameters at %s: the driver is not known to keep the locks",
                 settings.driver_params)
        return False
    if not permissions.keeps:
        LOG.warning("the NVIDIA driver would undo the GPU locks: %s (everx-agent harden)", permissions.detail)
    return permissions.keeps


def mig_enabled_read(settings: IsolationSettings) -> bool:
    """True only when nvidia-smi says MIG is Enabled on a GPU. An answer it cannot give or the
    agent cannot read is logged and false, as every fact not seen to hold: the heartbeat's `gpus`
    and `gpu_error` tell the exchange the GPUs could not be read."""
    answer = command_run("nvidia-smi", ("--query-gpu=mig.mode.current", "--format=csv,noheader"),
                         settings=settings, timeout=settings.command_timeout_seconds)
    if answer.problem:
        LOG.info("MIG mode not read: %s", answer.problem)
        return False
    modes = [line.strip() for line in answer.out.splitlines() if line.strip()]
    odd = [mode for mode in modes if mode not in (MIG_ENABLED, "Disabled", "[N/A]", "N/A")]
    if odd:
        LOG.warning("nvidia-smi gave a MIG mode the agent cannot read: %r", odd[0][:TEXT_LIMIT])
    return MIG_ENABLED in modes


# Container mode -------------------------------------------------------------------------------

@dataclass(frozen=True)
class RuntimeFound:
    """A runtime whose daemon answered `info`: its name, program, version and whole answer."""

    name: str
    binary: str
    version: str
    info: dict[str, Any]

    def gpu_mode(self) -> str:
        """How a container is given GPUs by UUID: Docker's `--gpus` with NVIDIA's runtime, else CDI."""
        return "gpus" if self.name == "docker" and "nvidia" in mapping(self.info.get("Runtimes")) else "cdi"

    def storage(self) -> tuple[str, str]:
        """The storage driver and root, as `storage_quota_read` takes them ("" when not named)."""
        if self.name == "docker":
            driver, root = self.info.get("Driver"), self.info.get("DockerRootDir")
        else:
            store = mapping(self.info.get("store"))
            driver, root = store.get("graphDriverName"), store.get("graphRoot")
        return (driver if isinstance(driver, str) else "", root if isinstance(root, str) else "")


def runtime_find(settings: IsolationSettings, *, names: tuple[str, ...] = RUNTIMES,
                 on_hang: Callable[[], None] | None = None) -> RuntimeFound | None:
    """The first of `names` whose daemon answers; None without one. A client whose `info` fails
    (no daemon), hangs (then `on_hang()`) or answers no version is no runtime."""
    for runtime in names:
        info = runtime_info(runtime, settings, on_hang=on_hang)
        if info is None:
            continue
        version = runtime_version(runtime, info)
        if not version:
            LOG.warning("%s info names no version: no container mode with it", runtime)
            continue
        return RuntimeFound(name=runtime, binary=shutil.which(runtime, path=settings.search_path) or runtime,
                            version=version, info=info)
    return None


def container_probe(settings: IsolationSettings, *, gpu_uuids: tuple[str, ...], mounts: list[Mount],
                    mode: ContainerMode | None = None) -> dict[str, Any] | None:
    """The report's `container`: the agent's container mode's (`mode`), else the first runtime
    whose daemon answers, which this agent run does not use (no self-test, no template); None
    without one."""
    if mode is not None:
        return mode.report(settings, gpu_uuids=gpu_uuids, mounts=mounts)
    found = runtime_find(settings)
    if found is None:
        return None
    return container_object(found, settings=settings, gpu_uuids=gpu_uuids, mounts=mounts,
                            self_test=False, templates=[])


def container_object(found: RuntimeFound, *, settings: IsolationSettings, gpu_uuids: tuple[str, ...],
                     mounts: list[Mount], self_test: bool, templates: list[str],
                     toolkit_version: str | None = None) -> dict[str, Any]:
    return {
        "runtime": found.name, "runtime_version": found.version,
        "toolkit_version": toolkit_version_read(settings) if toolkit_version is None else toolkit_version,
        "gpus_by_uuid": gpus_by_uuid_check(found.name, found.info, settings=settings, gpu_uuids=gpu_uuids),
        "self_test": self_test,
        "disk_limited": storage_limited(found.name, found.info, mounts=mounts),
        "templates": templates,
    }


class ContainerMode:
    """The agent's container mode as the report says it: the runtime found at start (its answer
    is the first report's, not asked twice), the reconciler of its rentals, and the self-test,
    run at the first report and again only when the runtime's or the toolkit's version, the
    templates held or the GPU tested change. While the reconciler finds the runtime hung, or
    when `info` or an image check hangs here (the reconciler is then told), `container` is the
    last one measured with `"paused": true` (null before any): the exchange sells no container
    while it is, and the running containers, which the agent leaves alone, keep their rentals."""

    def __init__(self, *, found: RuntimeFound, runtime: ContainerRuntime, reconciler: ContainerReconciler):
        self.found_at_start: RuntimeFound | None = found
        self.name = found.name
        self.runtime = runtime
        self.reconciler = reconciler
        self.tested: tuple | None = None  # what the last self-test ran with
        self.self_test = False
        self.last: dict[str, Any] | None = None  # the last container object measured

    @property
    def available(self) -> bool:
        return self.reconciler.available

    def report(self, settings: IsolationSettings, *, gpu_uuids: tuple[str, ...],
               mounts: list[Mount]) -> dict[str, Any] | None:
        if not self.available:
            LOG.info("container mode is unavailable: the %s runtime hung", self.name)
            return self._paused()
        found, self.found_at_start = self.found_at_start, None
        if found is None:
            found = runtime_find(settings, names=(self.name,), on_hang=self.reconciler.runtime_hung)
        if found is None:
            # Hung: paused (its containers still run); answered that it is gone: no container mode.
            return self._paused() if not self.available else None
        try:
            held = container_templates_held(runtime=self.runtime, templates=self.reconciler.templates)
        except RuntimeHung as error:
            LOG.error("container mode is unavailable: %s", error)
            self.reconciler.runtime_hung()
            return self._paused()
        toolkit = toolkit_version_read(settings)
        tested = (found.version, toolkit, tuple(held), gpu_uuids[:1])
        if tested != self.tested:
            self.self_test = self.self_test_run(gpu_uuids)
            self.tested = tested
            LOG.info("container self-test %s", "passed" if self.self_test else "failed")
        self.last = container_object(found, settings=settings, gpu_uuids=gpu_uuids, mounts=mounts,
                                     self_test=self.self_test, templates=held, toolkit_version=toolkit)
        return self.last

    def _paused(self) -> dict[str, Any] | None:
        return {**self.last, "paused": True} if self.last is not None else None

    def self_test_run(self, gpu_uuids: tuple[str, ...]) -> bool:
        """With the first GPU nvidia-smi lists (index 0); without a GPU nothing can pass."""
        if not gpu_uuids:
            LOG.info("container self-test: no GPU to run it with")
            return False
        return container_self_test(runtime=self.runtime, templates=self.reconciler.templates,
                                   gpu_uuid=gpu_uuids[0], gpu_index=0)


def runtime_info(runtime: str, settings: IsolationSettings, *,
                 on_hang: Callable[[], None] | None = None) -> dict[str, Any] | None:
    answer = command_run(runtime, RUNTIME_INFO_ARGS[runtime], settings=settings,
                         timeout=settings.runtime_timeout_seconds)
    if not answer.ran:
        if shutil.which(runtime, path=settings.search_path):
            LOG.warning("%s: no container mode with it", answer.problem)
        if answer.hung and on_hang is not None:
            on_hang()
        return None
    if answer.problem:
        LOG.info("%s: no container mode with it", answer.problem)
        return None
    try:
        info = json.loads(answer.out)
    except ValueError:
        LOG.warning("%s info did not answer JSON: no container mode with it", runtime)
        return None
    if not isinstance(info, dict) or info.get("ServerErrors"):
        LOG.info("%s info reports no daemon: no container mode with it", runtime)
        return None
    return info


def runtime_version(runtime: str, info: dict[str, Any]) -> str:
    if runtime == "docker":
        return short_text(info.get("ServerVersion"))
    return short_text(mapping(info.get("version")).get("Version"))


def short_text(value: object) -> str:
    """A version as the report takes it: printable, at most 40 characters, else ""."""
    if not isinstance(value, str):
        return ""
    value = value.strip()
    return value if value.isprintable() and len(value) <= MAX_VERSION else ""


def mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def toolkit_version_read(settings: IsolationSettings) -> str:
    """The NVIDIA Container Toolkit's version (`nvidia-ctk --version`), "" without one."""
    answer = command_run("nvidia-ctk", ("--version",), settings=settings,
                         timeout=settings.command_timeout_seconds)
    if answer.problem:
        LOG.info("no NVIDIA Container Toolkit version: %s", answer.problem)
        return ""
    found = TOOLKIT_VERSION.search(answer.out)
    return short_text(found.group(1)) if found else ""


def gpus_by_uuid_check(runtime: str, info: dict[str, Any], *, settings: IsolationSettings,
                       gpu_uuids: tuple[str, ...]) -> bool:
    """Whether the runtime can be given each GPU by its UUID: Docker with NVIDIA's runtime
    (`--gpus device=GPU-…`), or a CDI device `nvidia.com/gpu=<uuid>` for every GPU."""
    if not gpu_uuids:
        return False
    if runtime == "docker" and "nvidia" in mapping(info.get("Runtimes")):
        return True
    answer = command_run("nvidia-ctk", ("cdi", "list"), settings=settings,
                         timeout=settings.command_timeout_seconds)
    if answer.problem:
        LOG.info("no CDI devices: %s", answer.problem)
        return False
    listed = {word[len(CDI_GPU):] for word in answer.out.split() if word.startswith(CDI_GPU)}
    missing = [uuid for uuid in gpu_uuids if uuid not in listed]
    if missing:
        LOG.info("the CDI devices do not name GPU %s: the runtime cannot be given it by UUID", missing[0])
    return not missing


def storage_limited(runtime: str, info: dict[str, Any], *, mounts: list[Mount]) -> bool:
    """Whether `--storage-opt size=` can hold: overlay storage on XFS mounted with project quotas."""
    if runtime == "docker":
        driver, root = info.get("Driver"), info.get("DockerRootDir")
        status = info.get("DriverStatus")
        pairs = {pair[0]: pair[1] for pair in status if isinstance(pair, list) and len(pair) == 2
                 and isinstance(pair[0], str)} if isinstance(status, list) else {}
    else:
        store = mapping(info.get("store"))
        driver, root = store.get("graphDriverName"), store.get("graphRoot")
        pairs = mapping(store.get("graphStatus"))
    if not (isinstance(driver, str) and isinstance(root, str)):
        return False
    if driver not in OVERLAY_DRIVERS or pairs.get("Backing Filesystem") != "xfs":
        return False
    mount = mount_of(root, mounts)
    return mount is not None and mount.fstype == "xfs" and bool(mount.options & PROJECT_QUOTA_OPTIONS)


def mount_of(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount holding `path`: the last of those with the longest point above it."""
    best = None
    for mount in mounts:
        point = mount.point.rstrip("/") or "/"
        inside = path == point or path.startswith(point if point.endswith("/") else point + "/")
        if inside and (best is None or len(point) >= len(best.point.rstrip("/") or "/")):
            best = mount
    return best


# The report -----------------------------------------------------------------------------------

def facts_taken(provider: Callable[[], dict[str, Any]], names: tuple[str, ...], what: str) -> dict[str, Any]:
    """The provider's answer: each named fact true only when it says exactly true (anything else,
    or a provider that fails, is false)."""
    try:
        given = provider()
    except Exception:  # a bug in a provider must not cost the whole report: logged, facts false
        LOG.exception("the %s facts could not be measured", what)
        given = {}
    given = mapping(given)
    return {"backend": given.get("backend"), **{name: given.get(name) is True for name in names}}


def isolation_measure(settings: IsolationSettings, *, gpu_uuids: tuple[str, ...],
                      sandbox_facts: Callable[[], dict[str, Any]],
                      login_facts: Callable[[], dict[str, bool]],
                      containers: ContainerMode | None = None) -> dict[str, Any]:
    """The report without its `server_id`, measured now (starts subprocesses)."""
    mounts = mounts_read(settings.mountinfo)
    sandbox = facts_taken(sandbox_facts, SANDBOX_FACTS, "sandbox")
    login = facts_taken(login_facts, LOGIN_FACTS, "login")
    backend = sandbox["backend"] if sandbox["backend"] in BACKENDS else backend_detect(settings, mounts)
    if backend == "none":
        sandbox.update(dict.fromkeys(LIMIT_FACTS, False))
    measured = {
        "devices_locked": devices_locked_check(settings.device_dir),
        "driver_keeps_permissions": driver_keeps_check(settings),
        **{name: sandbox[name] for name in SANDBOX_FACTS},
        **{name: login[name] for name in LOGIN_FACTS},
        "mig_enabled": mig_enabled_read(settings),
    }
    return {
        "version": REPORT_VERSION,
        "hardware": hardware_read(settings),
        "backend": backend,
        "facts": {name: measured[name] for name in FACTS},
        "container": container_probe(settings, gpu_uuids=gpu_uuids, mounts=mounts, mode=containers),
    }


# What `everx-agent harden` says of a fact the last report did not measure to hold (the driver's
# and the host logins' have sections of their own, with fixes `--apply` writes).
FACT_ADVICE = {
    "devices_locked": "the GPU nodes could not be locked with a POSIX ACL: the device folder must be a "
                      "filesystem with ACLs (devtmpfs has them) and the agent must run as root.",
    "device_cgroup": "no device filter: it needs cgroup v1 with the devices controller mounted, or systemd "
                     "(DevicePolicy); on cgroup v2 without systemd the ACL stays the only lock.",
    "cpu_limited": "the cpu controller is missing: on cgroup v2 enable it in the parent group's "
                   "cgroup.subtree_control (systemd does), on cgroup v1 mount it.",
    "memory_limited": "the memory controller is missing, or swap is not counted: enable the controller "
                      "(as for cpu) and, on cgroup v1, boot with swapaccount=1.",
    "processes_limited": "the pids controller is missing: enable it as for cpu.",
    "disk_limited": "home images need a loop device and mkfs.ext4: modprobe loop (add loop to "
                    "/etc/modules), install e2fsprogs, and keep loop devices free.",
    "tmp_private": "a private /tmp needs mount namespaces: util-linux's unshare, run as root.",
    "processes_hidden": "hiding other renters' processes needs Linux 5.8 or later (hidepid=invisible per "
                        "mount): upgrade the kernel.",
    "login_sandboxed": "the rentals' own sshd could not start in a sandbox: install openssh-server and "
                       "keep the SSH port range free for the agent.",
    "mig_enabled": "MIG is on: turn it off with sudo nvidia-smi -mig 0, then reset the GPUs or reboot.",
}
OWN_SECTIONS = ("driver_keeps_permissions", "host_login_closed")


def facts_advice_text(report: object) -> str:
    """What `everx-agent harden` says of each fact the last isolation report (status.json) did
    not measure to hold: why, and what to change on the host."""
    if not isinstance(report, dict) or not isinstance(report.get("facts"), dict):
        return ("No isolation report was measured yet: start the agent (systemctl start everx-agent), "
                "then run everx-agent harden again for the other facts.\n")
    facts = report["facts"]
    missing = [name for name in FACTS if name not in OWN_SECTIONS
               and (facts.get(name) is True if name == "mig_enabled" else facts.get(name) is not True)]
    if not missing:
        return "Every other isolation fact held at the last report.\n"
    return "".join(f"{name} does not hold: {FACT_ADVICE[name]}\n" for name in missing)


def report_summary(report: dict[str, Any]) -> str:
    held = [name for name, value in report["facts"].items() if value]
    container = report["container"]
    return (f"backend {report['backend']}, facts held: {', '.join(held) or 'none'}; container mode: "
            + (f"{container['runtime']} {container['runtime_version']}" if container else "none"))


class IsolationReporter:
    """The last isolation report, measured again only when it may have changed: at the first
    report, when the GPU nodes (by inode), the driver's parameters, the GPUs' UUIDs or the
    container runtime's availability change, and every `report_seconds`. Otherwise `report()`
    reads a few files and starts nothing."""

    def __init__(self, *, settings: IsolationSettings,
                 sandbox_facts: Callable[[], dict[str, Any]] | None = None,
                 login_facts: Callable[[], dict[str, bool]] | None = None,
                 containers: ContainerMode | None = None, clock: Callable[[], float] = time.monotonic,
                 disproved: DisprovedFacts | None = None):
        self.settings = settings
        # The facts a refused rental showed false (`system.DisprovedFacts`): false whatever is measured.
        self.disproved = disproved or DisprovedFacts()
        self.sandbox_facts = sandbox_facts or (lambda: sandbox_facts_unmeasured(settings))
        self.login_facts = login_facts or login_facts_unmeasured
        self.containers = containers  # the agent's container mode; None: no runtime at start
        self.clock = clock
        self.measured: dict[str, Any] | None = None
        self.measured_at = 0.0
        self.signature: tuple | None = None

    def report(self, *, server_id: int | None, gpu_uuids: tuple[str, ...]) -> dict[str, Any] | None:
        """The report for this heartbeat; None when it has never been measured (a bug in a
        measurement costs the report, never the heartbeat)."""
        signature = (self.host_signature(), gpu_uuids)
        due = self.clock() - self.measured_at >= self.settings.report_seconds
        if self.measured is None or due or signature != self.signature:
            self.remeasure(gpu_uuids=gpu_uuids)
            # Taken again: the ACL check's scratch file itself changed the device folder.
            self.signature = (self.host_signature(), gpu_uuids)
        if self.measured is None:
            return None
        return {"version": self.measured["version"], "server_id": server_id,
                **{key: value for key, value in self.measured.items() if key != "version"}}

    def remeasure(self, *, gpu_uuids: tuple[str, ...]) -> None:
        self.measured_at = self.clock()  # a failed measurement too waits for the next occasion
        try:
            measured = isolation_measure(self.settings, gpu_uuids=gpu_uuids, sandbox_facts=self.sandbox_facts,
                                         login_facts=self.login_facts, containers=self.containers)
        except Exception:
            LOG.exception("the isolation report could not be measured: the last one stands")
            return
        disproved = self.disproved.facts & set(FACTS)
        measured["facts"].update(dict.fromkeys(disproved, False))
        if measured != self.measured:
            LOG.info("isolation measured: %s", report_summary(measured))
        self.measured = measured

    def host_signature(self) -> tuple:
        """What changes when the measurements may: the device folder's entries and GPU nodes (a
        driver reload or udev makes new ones), the driver's parameters, and whether the container
        runtime answers (a hang the reconciler met withdraws container mode at the next heartbeat)
        and the templates it may hold (the exchange's list, an image pulled), and the facts a
        refused rental disproved."""
        try:
            folder = os.stat(self.settings.device_dir).st_mtime_ns
        except OSError:
            folder = None
        nodes = []
        for index, path in sorted(gpu_nodes(self.settings.device_dir).items()):
            try:
                status = os.lstat(path)
            except OSError:
                continue
            nodes.append((index, status.st_ino, status.st_rdev))
        try:
            params = self.settings.driver_params.read_bytes()
        except OSError:
            params = None
        containers = (self.containers.available, self.containers.reconciler.templates_version) \
            if self.containers else None
        return folder, tuple(nodes), params, containers, self.disproved.facts
