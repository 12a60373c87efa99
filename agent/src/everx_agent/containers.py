"""Container mode: each rental whose desired `isolation` is "container" runs as a container of the
host's runtime (Docker or Podman) instead of a Unix user.

The container `evx-<id>` carries the label `everx.rental=<id>`, and the agent only ever lists,
starts or removes containers with that label: a restarted agent finds its containers by label and
never makes a second one, and a labelled container the desired state no longer lists is removed.
Its image is pinned by digest (`name@sha256:…`) and checked after every pull. It gets exactly its
GPUs (by UUID), the limits the desired state carries, no privilege it does not need (sshd's
capabilities only, no-new-privileges), and none of the host's namespaces, devices or the
runtime's socket; the buyer's key is a file of the agent's mounted read-only, and its sshd is
published on a port of the rental's own. A template that takes a token (Jupyter's) gets the
rental's, which the exchange made and shows the buyer once, in its variable and in a file.

Every runtime call has a timeout: a runtime that hangs makes container mode unavailable (the
running containers are left alone) until it answers again. A pass whose desired state matches
what the last listing found calls the runtime not at all.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import os
import re
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from .config import (
    DEFAULT_CONTAINER_LISTEN_ADDRESS,
    DEFAULT_RUNTIME_TIMEOUT_SECONDS,
    private_dir_make,
    private_file_write,
)
from .devices import GPU_NODE
from .reconcile import (
    Action,
    LoginInvalid,
    LoginReport,
    gpu_indices_check,
    gpu_uuids_check,
    login_identity,
    rental_order,
    ssh_public_key_check,
)
from .sshd import PortBook, port_bindable
from .system import SYSTEM_PATH, DeliveryRefused, login_failure_state

LOG = logging.getLogger("everx_agent.containers")

LABEL = "everx.rental"
CONFIG_LABEL = "everx.config"
PORTS_LABEL = "everx.ports"
# What sshd needs to log a buyer in and give them a shell as root of the container; nothing else
# (no SYS_ADMIN, NET_ADMIN, NET_RAW, MKNOD, SYS_PTRACE...).
CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID", "SYS_CHROOT", "KILL",
                "NET_BIND_SERVICE", "AUDIT_WRITE")
DEFAULT_PORTS = range(41000, 41100)
# Where the buyer's key is mounted when the template does not say: outside every home of the
# container, so nothing the buyer writes there adds a key; the template's sshd names it in
# `AuthorizedKeysFile`.
DEFAULT_KEY_PATH = "/etc/ssh/everx_authorized_keys"
SSH_PORT = 22
# How long a pass trusts the last listing (a container removed by hand is recreated within it),
# and how long after a hang the runtime is tried again.
LIST_SECONDS = 300.0
RETRY_SECONDS = 300.0
GPU_MODES = ("gpus", "cdi", "nodes")  # Docker's --gpus, CDI devices, stand-in nodes (tests)
FORBIDDEN_NETWORKS = ("host", "container:", "ns:")
# A directory holding one of these would hand the runtime to the renter: never mounted.
RUNTIME_SOCKETS = ("/run/docker.sock", "/var/run/docker.sock", "/run/podman/podman.sock",
                   "/var/run/podman/podman.sock", "/run/containerd/containerd.sock")
# name@sha256:<64 hex>, no tag: an optional registry (with its port), then a path without ':'.
IMAGE_BY_DIGEST = re.compile(r"(?:[a-z0-9.-]+(?::[0-9]{1,5})?/)?[a-z0-9._/-]+@sha256:[0-9a-f]{64}")
CONTAINER_PATH = re.compile(r"/[A-Za-z0-9._/-]{1,200}")
TOKEN_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# A rental's token as the exchange makes it (URL-safe base64): nothing that could break the
# runtime's env file or a URL.
SERVICE_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,128}")
# Where a container that takes a token finds it too: the buyer reads it there over SSH.
TOKEN_PATH = "/etc/everx/service-token"  # noqa: S105 (a path, not a secret)
OUTPUT_LIMIT = 300
MAX_TEMPLATES = 32  # as the isolation report carries at most
# A pull may take minutes for a large image: it has a timeout of its own, and runs in a thread.
PULL_TIMEOUT_SECONDS = 3600.0
STATE_SUBDIR = "containers"
MOUNTINFO = Path("/proc/self/mountinfo")


class RuntimeHung(Exception):
    """A runtime call did not finish within the timeout."""


class RuntimeFailed(Exception):
    """A runtime call failed or answered what it should not; short English for the report."""


class PortsExhausted(RuntimeFailed, DeliveryRefused):
    """Every port of the range is taken: the rental is refused, not retried."""


class TemplateInvalid(ValueError):
    """A template of the configuration that cannot be used; the message says why."""


# What is run --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Template:
    """An image and how a rental's container runs it. `files` are (path in the container, text),
    written per rental and mounted read-only (an sshd configuration, say); `mounts` are (host
    path, path in the container), read-only, and come from the seller's own configuration only."""

    image: str
    ports: tuple[int, ...] = (SSH_PORT,)
    key_path: str = DEFAULT_KEY_PATH
    command: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()
    mounts: tuple[tuple[str, str], ...] = ()
    min_driver: str = ""  # the oldest GPU driver it runs on ("550.54"); empty for any
    token_env: str = ""  # the variable its image reads the rental's token from; empty for none

    @property
    def digest(self) -> str:
        return self.image.rsplit("@", 1)[1]

    def runs_on(self, driver: str) -> bool:
        """Whether the host's driver version (empty: unknown) is at least the template's minimum."""
        if not self.min_driver:
            return True
        return bool(driver) and version_tuple(driver) >= version_tuple(self.min_driver)


@dataclass(frozen=True)
class Limits:
    cpu_cores: int
    memory_mib: int
    disk_gb: int
    processes: int


@dataclass(frozen=True)
class ContainerLogin:
    """A rental the desired state wants as a container."""

    rental_id: int
    ssh_public_key: str
    gpu_indices: tuple[int, ...]
    gpu_uuids: tuple[str, ...]
    limits: Limits
    template: Template
    service_token: str = ""  # the rental's secret from the exchange; "" when it sent none

    @property
    def name(self) -> str:
        return f"evx-{self.rental_id}"

    @property
    def token(self) -> str:
        """The token its container gets: only a template that takes one gets it."""
        return self.service_token if self.template.token_env else ""


def template_read(data: object) -> Template:
    """A template of the configuration (`container_templates`), or `TemplateInvalid`."""
    if not isinstance(data, dict) or not isinstance(data.get("image"), str):
        raise TemplateInvalid("a template needs an image")
    image = data["image"]
    if not IMAGE_BY_DIGEST.fullmatch(image):
        raise TemplateInvalid(f"the image {image[:80]!r} is not pinned by digest (name@sha256:…, no tag)")
    ports = data.get("ports", [SSH_PORT])
    if not (isinstance(ports, list) and SSH_PORT in ports and len(set(ports)) == len(ports)
            and all(isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536
                    for port in ports)):
        raise TemplateInvalid("a template's ports are distinct port numbers, 22 among them")
    key_path = data.get("key_path", DEFAULT_KEY_PATH)
    command = data.get("command", [])
    if not isinstance(command, list) or not all(isinstance(part, str) for part in command):
        raise TemplateInvalid("a template's command is a list of strings")
    files = data.get("files", {})
    mounts = data.get("mounts", {})
    if not isinstance(files, dict) or not all(isinstance(text, str) for text in files.values()):
        raise TemplateInvalid("a template's files map a path in the container to a text")
    if not isinstance(mounts, dict) or not all(isinstance(host, str) for host in mounts):
        raise TemplateInvalid("a template's mounts map a host path to a path in the container")
    for path in [key_path, *files, *mounts.values()]:
        if not isinstance(path, str) or not CONTAINER_PATH.fullmatch(path) or ".." in path.split("/"):
            raise TemplateInvalid(f"{str(path)[:80]!r} is not an absolute path in the container")
    for host in mounts:
        mount_check(host)
    token_env = data.get("token_env", "")
    if not isinstance(token_env, str) or (token_env and not TOKEN_ENV.fullmatch(token_env)):
        raise TemplateInvalid("a template's token variable is the name of an environment variable")
    return Template(image=image, ports=tuple(sorted(ports)), key_path=key_path, command=tuple(command),
                    files=tuple(sorted(files.items())), mounts=tuple(sorted(mounts.items())),
                    token_env=token_env)


# What a template of the exchange may say: the operators curate it for every seller's host, so it
# names no host path and writes no file of its own (a seller's configuration may).
EXCHANGE_TEMPLATE_KEYS = frozenset({"image", "ports", "key_path", "command", "min_driver", "token_env"})
DRIVER_VERSION = re.compile(r"[0-9]{1,4}(\.[0-9]{1,4}){0,2}")
# /proc/driver/nvidia/version: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  ..." or,
# for the open modules, "... Open Kernel Module for x86_64  550.54.14  ...".
DRIVER_VERSION_LINE = re.compile(r"Kernel Module(?: for \S+)?\s+([0-9]+(?:\.[0-9]+)+)")


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def exchange_template_read(data: object) -> Template:
    """A template of the exchange's desired state (`templates`), or `TemplateInvalid`."""
    if not isinstance(data, dict) or set(data) - EXCHANGE_TEMPLATE_KEYS:
        raise TemplateInvalid("a template of the exchange names only its image, ports, key path, command, "
                              "minimum driver and token variable")
    min_driver = data.get("min_driver", "")
    if not isinstance(min_driver, str) or (min_driver and not DRIVER_VERSION.fullmatch(min_driver)):
        raise TemplateInvalid("a template's minimum driver is a version such as 550.54")
    return replace(template_read(data), min_driver=min_driver)


def exchange_templates_read(entries: object) -> tuple[Template, ...]:
    """The exchange's templates that can be used (at most MAX_TEMPLATES); each other one is logged
    and left out. Not a list (an older exchange): none."""
    if not isinstance(entries, list):
        return ()
    templates = []
    for number, entry in enumerate(entries[:MAX_TEMPLATES], start=1):
        try:
            templates.append(exchange_template_read(entry))
        except TemplateInvalid as error:
            LOG.error("the exchange's container template %d is not used: %s", number, error)
    return tuple(templates)


def driver_version_read(path: Path) -> str:
    """The NVIDIA driver's version from its /proc file; "" when there is none (no driver)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    found = DRIVER_VERSION_LINE.search(text)
    return found.group(1) if found else ""


def container_templates_read(entries: list[Any]) -> tuple[Template, ...]:
    """The configuration's templates that can be used; each other one is logged and left out."""
    templates = []
    for number, entry in enumerate(entries, start=1):
        try:
            templates.append(template_read(entry))
        except TemplateInvalid as error:
            LOG.error("container template %d is not used: %s", number, error)
    return tuple(templates)


def mount_check(host: str) -> None:
    """A host path may be mounted unless it is a socket or a folder holding the runtime's."""
    path = Path(host)
    if not path.is_absolute():
        raise TemplateInvalid(f"the host path {host[:80]!r} is not absolute")
    if ":" in host or "," in host:  # they separate the parts of --volume
        raise TemplateInvalid(f"the host path {host[:80]!r} holds a ':' or ','")
    resolved = path.resolve()
    if resolved.exists() and stat.S_ISSOCK(resolved.stat().st_mode):
        raise TemplateInvalid(f"the host path {host[:80]!r} is a socket")
    for socket_path in RUNTIME_SOCKETS:
        if Path(socket_path) == resolved or resolved in Path(socket_path).parents:
            raise TemplateInvalid(f"the host path {host[:80]!r} holds the container runtime's socket")


def limits_check(value: object) -> Limits:
    names = ("cpu_cores", "memory_mib", "disk_gb", "processes")
    if value is None:
        raise LoginInvalid("the exchange has sent no limits for this rental yet")
    if not isinstance(value, dict) or not all(
            isinstance(value.get(name), int) and not isinstance(value.get(name), bool) and value[name] > 0
            for name in names):
        raise LoginInvalid("the limits must be positive whole numbers of cpu_cores, memory_mib, disk_gb "
                           "and processes")
    return Limits(**{name: value[name] for name in names})


def run_arguments(*, login: ContainerLogin, ports: dict[int, int], files_dir: Path, gpu_mode: str,
                  device_dir: Path, listen_address: str, network: str, storage_quota: bool,
                  config: str) -> list[str]:
    """The arguments of `<runtime> run` for a rental's container, ports = container -> host."""
    limits, template = login.limits, login.template
    arguments = [
        "run", "--detach", "--name", login.name, "--hostname", login.name,
        "--label", f"{LABEL}={login.rental_id}", "--label", f"{CONFIG_LABEL}={config}",
        "--label", f"{PORTS_LABEL}={ports_label(ports)}",
        *gpu_arguments(mode=gpu_mode, uuids=login.gpu_uuids, indices=login.gpu_indices,
                       device_dir=device_dir),
        "--cpus", str(limits.cpu_cores),
        # Swap equal to memory: no swap at all on top of the limit.
        "--memory", f"{limits.memory_mib}m", "--memory-swap", f"{limits.memory_mib}m",
        "--pids-limit", str(limits.processes),
        "--shm-size", f"{max(1, limits.memory_mib // 2)}m",
    ]
    if storage_quota:  # only overlay on XFS with pquota enforces it; elsewhere the runtime refuses it
        arguments += ["--storage-opt", f"size={limits.disk_gb}G"]
    arguments += ["--security-opt", "no-new-privileges", "--cap-drop", "ALL"]
    for capability in CAPABILITIES:
        arguments += ["--cap-add", capability]
    if network:
        arguments += ["--network", network]
    for container_port, host_port in sorted(ports.items()):
        arguments += ["--publish", f"{listen_address}:{host_port}:{container_port}"]
    arguments += ["--volume", f"{files_dir / 'authorized_keys'}:{template.key_path}:ro"]
    if login.token:  # in a file, not on the command line, where the host's `ps` would show it
        arguments += ["--env-file", str(files_dir / "token.env"),
                      "--volume", f"{files_dir / 'service-token'}:{TOKEN_PATH}:ro"]
    for number, (path, _text) in enumerate(template.files):
        arguments += ["--volume", f"{files_dir / f'file-{number}'}:{path}:ro"]
    for host, path in template.mounts:
        arguments += ["--volume", f"{host}:{path}:ro"]
    return [*arguments, template.image, *template.command]


def gpu_arguments(*, mode: str, uuids: tuple[str, ...], indices: tuple[int, ...],
                  device_dir: Path) -> list[str]:
    if mode == "gpus":
        # The quotes are Docker's: its --gpus value is CSV, and a list of devices has commas.
        return ["--gpus", f'"device={",".join(uuids)}"']
    if mode == "cdi":
        return [argument for uuid in uuids for argument in ("--device", f"nvidia.com/gpu={uuid}")]
    return [argument for index in indices
            for argument in ("--device", f"{device_dir / f'nvidia{index}'}:/dev/nvidia{index}")]


def ports_label(ports: dict[int, int]) -> str:
    """`22:41003;8888:41004`: Docker lists labels as one comma-separated text, so no commas."""
    return ";".join(f"{inside}:{outside}" for inside, outside in sorted(ports.items()))


def ports_label_read(text: str) -> dict[int, int]:
    ports = {}
    for item in text.split(";"):
        inside, _, outside = item.partition(":")
        if inside.isdigit() and outside.isdigit():
            ports[int(inside)] = int(outside)
    return ports


def config_digest(*, login: ContainerLogin, gpu_mode: str, listen_address: str, network: str,
                  storage_quota: bool) -> str:
    """What, when it changes, needs a new container (the key does not: its file is rewritten)."""
    # Without the minimum driver: a template the exchange came to name needs no new container.
    # Without an empty token variable: the containers of agents from before tokens stay as they are.
    template = {name: value for name, value in asdict(login.template).items()
                if name != "min_driver" and (name != "token_env" or value)}
    what = {"template": template, "gpu_uuids": login.gpu_uuids,
            "gpu_indices": login.gpu_indices, "limits": asdict(login.limits), "gpu_mode": gpu_mode,
            "listen_address": listen_address, "network": network, "storage_quota": storage_quota}
    if login.token:  # by its hash: the digest is a label anyone listing the containers reads
        what["token"] = hashlib.sha256(login.token.encode()).hexdigest()
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


# Reading the desired state ------------------------------------------------------------------

@dataclass
class ContainerDesired:
    logins: dict[str, ContainerLogin] = field(default_factory=dict)
    invalid: dict[str, LoginReport] = field(default_factory=dict)
    others: list[Any] = field(default_factory=list)  # the entries that are not containers


def container_logins_read(*, entries: list[Any], templates: tuple[Template, ...]) -> ContainerDesired:
    """The entries whose `isolation` is "container", read and checked like any login, the template
    chosen by its digest (`template`, default the first of this agent's); the others as they came."""
    desired = ContainerDesired()
    for entry in entries:
        if not (isinstance(entry, dict) and entry.get("isolation") == "container"):
            desired.others.append(entry)
            continue
        name = login_identity(entry)
        if name is None or name in desired.logins or name in desired.invalid:
            continue
        rental_id = entry["rental_id"]
        try:
            desired.logins[name] = ContainerLogin(
                rental_id=rental_id, ssh_public_key=ssh_public_key_check(entry.get("ssh_public_key")),
                gpu_indices=gpu_indices_check(entry.get("gpu_indices")),
                gpu_uuids=container_gpu_uuids_check(entry.get("gpu_uuids"), entry.get("gpu_indices")),
                limits=limits_check(entry.get("limits")),
                template=template_choose(entry.get("template"), templates),
                service_token=service_token_check(entry.get("service_token")),
            )
        except LoginInvalid as error:
            LOG.warning("rental %s: %s", rental_id, error)
            desired.invalid[name] = LoginReport(rental_id=rental_id, username=name, state="failed",
                                                detail=str(error))
    return desired


def container_gpu_uuids_check(value: object, indices: object) -> tuple[str, ...]:
    """A container gets its GPUs by UUID: without them (an exchange that knows none) it is not run."""
    uuids = gpu_uuids_check(value, indices)
    if not uuids:
        raise LoginInvalid("a container rental needs its GPUs' UUIDs")
    return uuids


def service_token_check(value: object) -> str:
    if value is None or value == "":  # an exchange that sends none: the template runs without
        return ""
    if not isinstance(value, str) or not SERVICE_TOKEN.fullmatch(value):
        raise LoginInvalid("the rental's service token must be 16 to 128 letters, digits, '-' or '_'")
    return value


def template_choose(wanted: object, templates: tuple[Template, ...]) -> Template:
    if not templates:
        raise LoginInvalid("this server has no container template")
    if wanted is None:
        return templates[0]
    for template in templates:
        if template.digest == wanted:
            return template
    raise LoginInvalid(f"the template {str(wanted)[:80]} is not on this server")


# The runtime --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Found:
    """A labelled container as the runtime lists it."""

    id: str
    name: str
    rental_id: int | None
    running: bool
    config: str
    ports: dict[int, int]


class ContainerRuntime:
    """`docker` or `podman`, every call with a timeout. `arguments` go before every command (a
    private `--root` in tests), `env` is added to the call's environment (`CONTAINERS_CONF`)."""

    def __init__(self, *, binary: str, gpu_mode: str, timeout: float = DEFAULT_RUNTIME_TIMEOUT_SECONDS,
                 arguments: Iterable[str] = (), env: dict[str, str] | None = None, network: str = "",
                 storage_quota: bool = False, device_dir: Path = Path("/dev")):
        if gpu_mode not in GPU_MODES:
            raise ValueError(f"unknown GPU mode {gpu_mode!r}")
        if network.startswith(FORBIDDEN_NETWORKS):
            raise ValueError(f"a rental never joins the {network!r} network")
        self.binary = binary
        self.gpu_mode = gpu_mode
        self.timeout = timeout
        self.arguments = tuple(arguments)
        self.env = {"PATH": SYSTEM_PATH, "LC_ALL": "C", **(env or {})}
        self.network = network
        self.storage_quota = storage_quota
        self.device_dir = device_dir

    def call(self, *arguments: str) -> str:
        """The command's output, `RuntimeFailed` when it fails, `RuntimeHung` when it hangs."""
        name = Path(self.binary).name
        try:
            result = subprocess.run([self.binary, *self.arguments, *arguments], capture_output=True,
                                    text=True, timeout=self.timeout, check=False, env=self.env)
        except subprocess.TimeoutExpired:
            raise RuntimeHung(f"{name} {arguments[0]} did not finish within {self.timeout:g} seconds") \
                from None
        except OSError as error:
            raise RuntimeFailed(f"{name} could not be run: {error.strerror or error}") from None
        if result.returncode != 0:
            said = " ".join((result.stderr or result.stdout).split())[:OUTPUT_LIMIT]
            raise RuntimeFailed(f"{name} {arguments[0]} failed (exit code {result.returncode})"
                                + (f": {said}" if said else ""))
        return result.stdout

    def containers_list(self) -> list[Found]:
        output = self.call("ps", "--all", "--filter", f"label={LABEL}", "--format", "json")
        return [found for entry in json_entries(output) if (found := container_read(entry)) is not None]

    def image_ensure(self, image: str) -> None:
        """The image present with its digest: pulled by digest when missing; a pulled image whose
        digest is another is deleted, and `RuntimeFailed`."""
        digest = image.rsplit("@", 1)[1]
        try:
            found = self._image_inspect(image)
        except RuntimeFailed:
            LOG.info("pulling %s", image)
            self.call("pull", image)
            found = self._image_inspect(image)
        if digest not in image_digests(found):
            image_id = str(found.get("Id") or found.get("ID") or "")
            if image_id:
                self.call("rmi", "--force", image_id)
            raise RuntimeFailed(f"the image pulled as {image[:120]} has another digest: deleted")

    def image_size(self, image: str) -> int | None:
        try:
            size = self._image_inspect(image).get("Size")
        except RuntimeFailed:
            return None
        return size if isinstance(size, int) else None

    def _image_inspect(self, image: str) -> dict[str, Any]:
        entries = json_entries(self.call("image", "inspect", image))
        if not entries or not isinstance(entries[0], dict):
            raise RuntimeFailed(f"the runtime says nothing of the image {image[:120]}")
        return entries[0]


def json_entries(output: str) -> list[Any]:
    """Podman answers one JSON array, Docker one JSON object a line."""
    text = output.strip()
    if not text:
        return []
    try:
        data = json.loads(text)
        return data if isinstance(data, list) else [data]
    except ValueError:
        pass
    try:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError:
        raise RuntimeFailed("the runtime's answer is not JSON") from None


def container_read(entry: object) -> Found | None:
    if not isinstance(entry, dict):
        return None
    labels = entry.get("Labels") or {}
    if isinstance(labels, str):  # Docker: "a=1,b=2"
        labels = dict(item.partition("=")[::2] for item in labels.split(",") if item)
    if not isinstance(labels, dict) or LABEL not in labels:
        return None
    names = entry.get("Names") or []
    name = names[0] if isinstance(names, list) and names else str(names).split(",")[0]
    value = str(labels[LABEL])
    rental_id = int(value) if value.isdigit() and not value.startswith("0") else None
    return Found(id=str(entry.get("Id") or entry.get("ID") or name), name=str(name), rental_id=rental_id,
                 running=str(entry.get("State", "")).lower() == "running",
                 config=str(labels.get(CONFIG_LABEL, "")),
                 ports=ports_label_read(str(labels.get(PORTS_LABEL, ""))))


def image_digests(found: dict[str, Any]) -> set[str]:
    digests = {str(found.get("Digest") or "")}
    for repo_digest in found.get("RepoDigests") or []:
        digests.add(str(repo_digest).rsplit("@", 1)[-1])
    return digests - {""}


def storage_quota_read(*, driver: str, root: str, mountinfo: Path = MOUNTINFO) -> bool:
    """Whether `--storage-opt size=` is enforced: the runtime's storage (`driver` and `root` as
    `docker info` / `podman info` give them) is overlay on an XFS mounted with project quotas."""
    if not driver.startswith("overlay"):
        return False
    best: tuple[str, str, str] | None = None  # the deepest mount point holding root
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        fields, _, tail = line.partition(" - ")
        parts, rest = fields.split(), tail.split()
        if len(parts) < 6 or len(rest) < 3:
            continue
        point = parts[4].replace("\\040", " ")
        holds_root = root == point or root.startswith(point.rstrip("/") + "/")
        if holds_root and (best is None or len(point) >= len(best[0])):
            best = (point, rest[0], rest[2])
    return best is not None and best[1] == "xfs" and bool({"prjquota", "pquota"} & set(best[2].split(",")))


# Reconciling --------------------------------------------------------------------------------

class ContainerReconciler:
    """The rentals in container mode: `reconcile` takes the desired state's container entries and
    hands back the others (for the Unix users); `reports` says how each container rental is."""

    def __init__(self, *, runtime: ContainerRuntime, templates: Iterable[Template], state_dir: Path,
                 listen_address: str = DEFAULT_CONTAINER_LISTEN_ADDRESS, ports: range = DEFAULT_PORTS,
                 port_book: PortBook | None = None, port_free: Callable[[str, int], bool] = port_bindable,
                 clock: Callable[[], float] = time.monotonic, driver_version: Callable[[], str] = lambda: "",
                 puller: TemplatePuller | None = None):
        self.runtime = runtime
        self.own_templates = tuple(templates)  # the seller's configuration's
        self.exchange_templates: tuple[Template, ...] = ()  # the last desired state's
        self.driver = driver_version()  # read once: a new driver needs a reboot, which restarts the agent
        self.puller = puller
        self.files_root = state_dir / STATE_SUBDIR
        self.listen_address = listen_address
        self.ports = ports
        # The rentals' sshds' book (sshd.PortBook) over the same range: the containers' ports are
        # kept in it as `evx-<id>:<port inside>`, so neither hands out a port the other has.
        self.port_book = port_book
        self.port_free = port_free
        self.clock = clock
        self.available = True
        self.found: dict[int, Found] | None = None  # None: to be listed
        self.listed_at = 0.0
        self.hung_at = 0.0
        self.failures: dict[str, LoginReport] = {}
        self.wanted: dict[str, ContainerLogin] = {}  # the last pass's container rentals

    @property
    def templates(self) -> tuple[Template, ...]:
        """The templates a rental may run here: the exchange's, then the configuration's, each image
        once, those whose minimum driver this host's is not left out."""
        seen: set[str] = set()
        usable = []
        for template in (*self.exchange_templates, *self.own_templates):
            if template.digest not in seen and template.runs_on(self.driver):
                seen.add(template.digest)
                usable.append(template)
        return tuple(usable)

    @property
    def templates_version(self) -> tuple:
        """Changes when the templates held may have: the isolation report is measured again."""
        return (self.exchange_templates, self.puller.version if self.puller else 0)

    def templates_take(self, entries: object) -> None:
        """The desired state's `templates` (absent: an older exchange, the last ones stay)."""
        if entries is None:
            return
        templates = exchange_templates_read(entries)
        if templates != self.exchange_templates:
            LOG.info("the exchange's container templates: %s",
                     ", ".join(template.image for template in templates) or "none")
            self.exchange_templates = templates

    def reconcile(self, *, entries: list[Any]) -> tuple[list[Any], list[Action]]:
        """One pass over the container entries: (the other entries, the changes made). Never raises.
        A pass that changed nothing, with every container rental running, lets the puller fetch the
        next template this host lacks (pulls never delay a rental's container)."""
        desired = container_logins_read(entries=entries, templates=self.templates)
        failures = dict(desired.invalid)
        changes: list[Action] = []
        if not self.available and self.clock() - self.hung_at < RETRY_SECONDS:
            failures.update(self._unavailable(desired))
        else:
            try:
                self._converge(desired, failures, changes)
            except RuntimeHung as error:
                LOG.error("container mode is unavailable: %s; running containers are left as they are", error)
                self.runtime_hung()
                failures.update(self._unavailable(desired))
        self.failures, self.wanted = failures, desired.logins
        if self.puller is not None and self.available and not changes and not failures:
            self.puller.step(self.templates)
        return desired.others, changes

    def runtime_hung(self) -> None:
        """Container mode unavailable until the retry: the last listing stays what is reported,
        and the runtime is listed again once it answers (the isolation report's probe tells too)."""
        self.available, self.hung_at, self.listed_at = False, self.clock(), float("-inf")

    def reports(self) -> list[dict[str, Any]]:
        reports = {name: {**report.to_json(), "ssh_port": None} for name, report in self.failures.items()}
        for rental_id, found in (self.found or {}).items():
            name = f"evx-{rental_id}"
            if name not in reports and found.running:
                indices = self.wanted[name].gpu_indices if name in self.wanted else ()
                ready = LoginReport(rental_id=rental_id, username=name, state="ready", gpu_indices=indices)
                reports[name] = {**ready.to_json(), "ssh_port": found.ports.get(SSH_PORT),
                                 # Its template's other ports (Jupyter's 8888): the buyer reaches them here.
                                 "service_ports": {str(inside): outside for inside, outside
                                                   in sorted(found.ports.items()) if inside != SSH_PORT}}
        return [reports[name] for name in sorted(reports, key=rental_order)]

    def _unavailable(self, desired: ContainerDesired) -> dict[str, LoginReport]:
        """While the runtime does not answer: the containers it last listed are kept (and reported
        as they were), the others fail, and those to remove wait."""
        known = {f"evx-{rental_id}" for rental_id in (self.found or {})}
        failures = {name: LoginReport(rental_id=login.rental_id, username=name, state="failed",
                                      gpu_indices=login.gpu_indices, detail="container mode is unavailable")
                    for name, login in desired.logins.items() if name not in known}
        for name in known - set(desired.logins) - set(desired.invalid):
            failures[name] = LoginReport(
                rental_id=rental_order(name), username=name, state="failed",
                detail="container mode is unavailable: its container is not removed yet")
        return failures

    def _converge(self, desired: ContainerDesired, failures: dict[str, LoginReport],
                  changes: list[Action]) -> None:
        if self.found is None or self.clock() - self.listed_at >= LIST_SECONDS or not self._matches(desired):
            try:
                self._list()
            except RuntimeFailed as error:  # a daemon that is down, say: nothing is changed
                LOG.error("the containers could not be listed: %s", error)
                failures.update({name: LoginReport(rental_id=login.rental_id, username=name, state="failed",
                                                   gpu_indices=login.gpu_indices, detail=str(error))
                                 for name, login in desired.logins.items()
                                 if login.rental_id not in (self.found or {})})
                return
        self.available = True
        for rental_id in sorted(self.found or {}):
            if f"evx-{rental_id}" not in desired.logins and f"evx-{rental_id}" not in desired.invalid:
                self._attempt(Action(kind="remove", username=f"evx-{rental_id}"), failures, changes,
                              lambda rental_id=rental_id: self._remove(rental_id))
        for name, login in sorted(desired.logins.items(), key=lambda item: rental_order(item[0])):
            self._attempt(Action(kind="container", username=name), failures, changes,
                          lambda login=login: self._ensure(login), indices=login.gpu_indices)
        self._book_sync()

    def _book_sync(self) -> None:
        """The port book holds exactly the listed containers' ports (writes only when it changes)."""
        if self.port_book is None:
            return
        held = {f"evx-{rental_id}:{inside}": outside for rental_id, found in (self.found or {}).items()
                for inside, outside in found.ports.items()}
        for name in [name for name in self.port_book.ports if ":" in name and name not in held]:
            self.port_book.set(name, None)
        for name, port in held.items():
            self.port_book.set(name, port)

    def _matches(self, desired: ContainerDesired) -> bool:
        """Whether the last listing already shows the desired state (then no call is needed)."""
        found = self.found or {}
        wanted = {login.rental_id: self._config(login) for login in desired.logins.values()}
        return set(found) == set(wanted) and all(
            found[rental_id].running and found[rental_id].config == config
            for rental_id, config in wanted.items())

    def _attempt(self, action: Action, failures: dict[str, LoginReport], changes: list[Action],
                 work: Callable[[], bool], *, indices: tuple[int, ...] = ()) -> None:
        try:
            changed = work()
        except (RuntimeFailed, OSError) as error:
            detail = str(error) if isinstance(error, RuntimeFailed) else \
                f"the container's files could not be written: {error.strerror or error}"
            LOG.warning("%s %s: %s", action.kind, action.username, detail)
            failures[action.username] = LoginReport(rental_id=rental_order(action.username),
                                                    username=action.username,
                                                    state=login_failure_state(error),
                                                    gpu_indices=indices, detail=detail)
            return
        if changed:
            LOG.info("%s %s: done", action.kind, action.username)
            changes.append(action)

    def _list(self) -> None:
        found: dict[int, Found] = {}
        for container in self.runtime.containers_list():
            if container.rental_id is None or container.rental_id in found \
                    or container.name != f"evx-{container.rental_id}":
                # Labelled as ours but unreadable, or a second one for a rental: never kept.
                LOG.warning("removing the labelled container %s (%s)", container.id[:12], container.name[:40])
                try:
                    self.runtime.call("rm", "--force", container.id)
                except RuntimeFailed as error:
                    LOG.warning("it could not be removed: %s", error)
                continue
            found[container.rental_id] = container
        self.found, self.listed_at = found, self.clock()

    def _ensure(self, login: ContainerLogin) -> bool:
        """The rental's container running as wanted; True when something had to change."""
        assert self.found is not None
        config = self._config(login)
        found = self.found.get(login.rental_id)
        self._key_write(login)
        if found is not None and found.config == config:
            if found.running:
                return False
            self.runtime.call("start", found.id)
            self.found[login.rental_id] = replace(found, running=True)
            return True
        if found is not None:  # other GPUs, limits or template: a new container
            self._remove(login.rental_id, keep_files=True)
        self.runtime.image_ensure(login.template.image)
        ports = self._ports_choose(login.template.ports)
        files_dir = self._files_write(login)
        arguments = run_arguments(login=login, ports=ports, files_dir=files_dir,
                                  gpu_mode=self.runtime.gpu_mode, device_dir=self.runtime.device_dir,
                                  listen_address=self.listen_address,
                                  network=self.runtime.network, storage_quota=self.runtime.storage_quota,
                                  config=config)
        try:
            output = self.runtime.call(*arguments)
        except RuntimeFailed:
            self._half_made_remove(login.name)
            raise
        container_id = output.strip().splitlines()[-1] if output.strip() else login.name
        self.found[login.rental_id] = Found(id=container_id, name=login.name, rental_id=login.rental_id,
                                            running=True, config=config, ports=ports)
        return True

    def _half_made_remove(self, name: str) -> None:
        """A `run` that failed after creating: its container goes, if it is ours (labelled)."""
        try:
            listed = self.runtime.containers_list()
        except RuntimeFailed:
            return
        for container in listed:
            if container.name == name:
                with contextlib.suppress(RuntimeFailed):
                    self.runtime.call("rm", "--force", container.id)

    def _remove(self, rental_id: int, *, keep_files: bool = False) -> bool:
        assert self.found is not None
        self.runtime.call("rm", "--force", self.found[rental_id].id)
        del self.found[rental_id]  # only once it is gone: a failed rm leaves it listed, and tried again
        if not keep_files:
            self._files_remove(rental_id)
        return True

    def _config(self, login: ContainerLogin) -> str:
        return config_digest(login=login, gpu_mode=self.runtime.gpu_mode, listen_address=self.listen_address,
                             network=self.runtime.network, storage_quota=self.runtime.storage_quota)

    def _ports_choose(self, inside: tuple[int, ...]) -> dict[int, int]:
        taken = {port for found in (self.found or {}).values() for port in found.ports.values()}
        if self.port_book is not None:  # the rentals' sshds' (the containers' own are in `found`)
            taken |= {port for name, port in self.port_book.ports.items() if ":" not in name}
        chosen: dict[int, int] = {}
        candidates = (port for port in self.ports
                      if port not in taken and self.port_free(self.listen_address, port))
        for container_port in inside:
            host_port = next(candidates, None)
            if host_port is None:
                raise PortsExhausted(f"no free port is left from {self.ports.start} to {self.ports.stop - 1}")
            chosen[container_port] = host_port
        return chosen

    def _files_dir(self, rental_id: int) -> Path:
        return self.files_root / f"evx-{rental_id}"

    def _files_write(self, login: ContainerLogin) -> Path:
        folder = self._files_dir(login.rental_id)
        for number, (_path, text) in enumerate(login.template.files):
            private_file_write(path=folder / f"file-{number}", text=text, mode=0o644)
        if login.token:
            private_file_write(path=folder / "token.env", text=f"{login.template.token_env}={login.token}\n")
            # Readable in the container by its image's own user (Jupyter's is not root).
            private_file_write(path=folder / "service-token", text=login.token + "\n", mode=0o644)
        return folder

    def _key_write(self, login: ContainerLogin) -> None:
        """The buyer's key, rewritten in place when it changed: the container holds the file's
        inode through its bind mount, so a replaced file would not reach it."""
        folder = self._files_dir(login.rental_id)
        private_dir_make(path=self.files_root)
        private_dir_make(path=folder)
        path, text = folder / "authorized_keys", login.ssh_public_key + "\n"
        try:
            if path.read_text(encoding="utf-8") == text:
                return
        except FileNotFoundError:
            private_file_write(path=path, text=text)
            return
        descriptor = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())

    def _files_remove(self, rental_id: int) -> None:
        folder = self._files_dir(rental_id)
        if folder.is_dir():
            for path in folder.iterdir():
                path.unlink()
            folder.rmdir()


# What the report says ----------------------------------------------------------------------

class TemplatePuller:
    """Fetches the templates this host lacks, one at a time, in a thread of its own with a timeout
    of its own (a pull of a large image takes minutes; the heartbeats go on meanwhile). Each image
    is inspected once per run of the agent: a pass that finds nothing new to fetch starts no
    subprocess. A pull that fails, or brings an image of another digest (deleted), is tried again
    after `retry_seconds`."""

    def __init__(self, *, runtime: ContainerRuntime, timeout: float = PULL_TIMEOUT_SECONDS,
                 retry_seconds: float = RETRY_SECONDS, clock: Callable[[], float] = time.monotonic):
        self.runtime = replace_timeout(runtime, timeout)
        self.retry_seconds = retry_seconds
        self.clock = clock
        self.held: set[str] = set()  # images known present with their digest
        self.failed: dict[str, float] = {}  # image -> when its last pull failed
        self.version = 0  # bumped at each image found or pulled
        self.thread: threading.Thread | None = None

    def step(self, templates: Iterable[Template]) -> None:
        """Start fetching the next template missing, unless a fetch is under way."""
        if self.thread is not None and self.thread.is_alive():
            return
        now = self.clock()
        wanted = [template.image for template in templates if template.image not in self.held
                  and now - self.failed.get(template.image, float("-inf")) >= self.retry_seconds]
        if wanted:
            self.thread = threading.Thread(target=self._fetch, args=(wanted[0],), name="template-pull",
                                           daemon=True)
            self.thread.start()

    def wait(self, timeout: float | None = None) -> None:
        """Until the fetch under way ends (tests, and the agent's stop)."""
        if self.thread is not None:
            self.thread.join(timeout)

    def _fetch(self, image: str) -> None:
        try:
            self.runtime.image_ensure(image)
        except (RuntimeFailed, RuntimeHung) as error:
            LOG.warning("container template %s not fetched: %s", image[:120], error)
            self.failed[image] = self.clock()
            return
        LOG.info("container template %s is held", image[:120])
        self.held.add(image)
        self.failed.pop(image, None)
        self.version += 1


def replace_timeout(runtime: ContainerRuntime, timeout: float) -> ContainerRuntime:
    twin = copy.copy(runtime)
    twin.timeout = timeout
    return twin


def container_templates_held(*, runtime: ContainerRuntime, templates: Iterable[Template]) -> list[str]:
    """The digests of the templates whose image this host holds, for the isolation report (at most
    32, as the exchange reads them). Raises `RuntimeHung`."""
    return [template.digest for template in templates if runtime.image_size(template.image) is not None][:32]


# The self-test ------------------------------------------------------------------------------

def container_self_test(*, runtime: ContainerRuntime, templates: Iterable[Template], gpu_uuid: str,
                        gpu_index: int) -> bool:
    """Runs the smallest template held with one GPU, as a rental's container would run: with real
    GPUs `nvidia-smi -L` lists exactly that GPU, and `/dev` holds no other `nvidiaN`. Never raises."""
    held = [(size, template) for template in templates
            if (size := runtime.image_size(template.image)) is not None]
    if not held:
        LOG.warning("container self-test: no template's image is held")
        return False
    template = min(held, key=lambda pair: pair[0])[1]
    script = "ls -1 /dev" if runtime.gpu_mode == "nodes" else "ls -1 /dev && echo --- && nvidia-smi -L"
    arguments = ["run", "--rm", *gpu_arguments(mode=runtime.gpu_mode, uuids=(gpu_uuid,), indices=(gpu_index,),
                                               device_dir=runtime.device_dir),
                 "--security-opt", "no-new-privileges", "--cap-drop", "ALL",
                 *(["--network", runtime.network] if runtime.network else []),
                 "--entrypoint", "/bin/sh", template.image, "-c", script]
    try:
        output = runtime.call(*arguments)
    except (RuntimeFailed, RuntimeHung) as error:
        LOG.warning("container self-test failed: %s", error)
        return False
    listing, _, smi = output.partition("---")
    nodes = {name for name in listing.split() if GPU_NODE.fullmatch(name)}
    passed = nodes == {f"nvidia{gpu_index}"}
    if runtime.gpu_mode != "nodes":
        passed = passed and re.findall(r"UUID: (GPU-[0-9A-Za-z-]+)", smi) == [gpu_uuid]
    if not passed:
        LOG.warning("container self-test: the container saw %s instead of GPU %s alone",
                    " ".join(sorted(nodes)) or "no GPU node", gpu_uuid)
    return passed
