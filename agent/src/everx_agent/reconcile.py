"""From the exchange's desired state to the logins on this machine.

The heartbeat's answer lists exactly the logins that must exist now. `desired_logins_read` checks
every entry (an answer may be hostile or buggy: it never names `root` or anyone but
`evx-<rental id>`), `reconcile_plan` compares it with what the agent manages and says what to do
(pure, no system calls), and `Reconciler` does it through the system and keeps its state.

Idempotent by construction: the plan is a difference, so a duplicated answer plans nothing, and
the state file records a user BEFORE `useradd` runs, so a restart anywhere in between finds the
user it was creating and finishes, rather than calling it someone else's. Users the agent did not
create are never touched.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import struct
import subprocess
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from .clock import rfc3339_format, utc_now
from .config import json_file_read, private_dir_make, private_file_write
from .devices import Drift, DriftQueue, NodeState, compute_apps_read, devices_lock, gpu_nodes
from .sandbox import Sandboxes, SandboxLimits, SandboxSpec
from .sshd import RentalSshd, Spawn
from .system import DeliveryRefused, DisprovedFacts, SystemCommandError, login_failure_state

LOG = logging.getLogger("everx_agent.reconcile")

USERNAME = re.compile(r"evx-[1-9][0-9]{0,17}")
KEY_TYPES = frozenset({
    "ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com",
})
BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
MAX_KEY_LENGTH = 16 * 1024
MAX_GPU_INDEX = 63
GPU_UUID = re.compile(r"GPU-[0-9A-Za-z-]{1,80}")
SHOWN_NAME_LENGTH = 40
STATE_FILE = "logins.json"


# A rental's sshd runs detached from the agent, as `sshd.process_spawn` starts it: no terminal or
# pipe of the agent's (a piped `run --once` would otherwise never end), its own session.
SANDBOXED_SSHD_OPTIONS = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL,
                          "stderr": subprocess.DEVNULL, "start_new_session": True}


def user_comment(rental_id: int) -> str:
    return f"EverXCloud rental {rental_id} (everx-agent)"


@dataclass(frozen=True)
class DesiredLogin:
    rental_id: int
    username: str
    ssh_public_key: str
    gpu_indices: tuple[int, ...]
    gpu_uuids: tuple[str, ...] = ()  # in the order of gpu_indices; () when the answer has none
    limits: SandboxLimits | None = None  # its sandbox's share; None: no sandbox (no report yet)


@dataclass(frozen=True)
class ManagedLogin:
    """A user the agent created, as the state file records it. `ready` is false from the moment
    it is recorded (before `useradd`) until its files are written."""

    rental_id: int
    username: str
    ssh_public_key: str
    gpu_indices: tuple[int, ...]
    created_at: str
    ready: bool = False
    gpu_uuids: tuple[str, ...] = ()
    limits: SandboxLimits | None = None

    def matches(self, desired: DesiredLogin) -> bool:
        return (self.ready and self.ssh_public_key == desired.ssh_public_key
                and self.gpu_indices == desired.gpu_indices and self.gpu_uuids == desired.gpu_uuids
                and self.limits == desired.limits)


@dataclass(frozen=True)
class LoginReport:
    rental_id: int
    username: str
    # "ready"; "failed" (tried again at every pass); or "refused": this host cannot deliver it as
    # sold (`system.DeliveryRefused`), and the exchange ends it as not delivered at once.
    state: str
    gpu_indices: tuple[int, ...] = ()
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"rental_id": self.rental_id, "username": self.username, "state": self.state,
                "gpu_indices": list(self.gpu_indices), "detail": self.detail}


@dataclass
class DesiredState:
    """An answer's logins once read: the valid ones, the listed ones that are not valid (reported
    failed, left as they are), and how many entries were ignored outright."""

    logins: dict[str, DesiredLogin] = field(default_factory=dict)
    invalid: dict[str, LoginReport] = field(default_factory=dict)
    ignored: int = 0

    def listed(self) -> set[str]:
        return set(self.logins) | set(self.invalid)


@dataclass(frozen=True)
class Action:
    kind: str  # "create", "update", "remove", "foreign", or "container" (containers.py)
    username: str
    desired: DesiredLogin | None = None


class LoginInvalid(ValueError):
    """An entry of the answer that names a proper login but cannot be set up as sent."""


# Reading the answer --------------------------------------------------------------------------

def desired_logins_read(*, entries: object) -> DesiredState:
    state = DesiredState()
    if not isinstance(entries, list):
        LOG.warning("the answer's logins are not a list: nothing will be created or removed")
        raise LoginInvalid("the answer's logins are not a list")
    for entry in entries:
        username = login_identity(entry)
        if username is None or username in state.listed():
            state.ignored += 1
            continue
        rental_id = entry["rental_id"]
        try:
            state.logins[username] = DesiredLogin(
                rental_id=rental_id, username=username,
                ssh_public_key=ssh_public_key_check(entry.get("ssh_public_key")),
                gpu_indices=gpu_indices_check(entry.get("gpu_indices")),
                gpu_uuids=gpu_uuids_check(entry.get("gpu_uuids"), entry.get("gpu_indices")),
                limits=limits_check(entry.get("limits")),
            )
        except LoginInvalid as error:
            LOG.warning("rental %s: %s", rental_id, error)
            state.invalid[username] = LoginReport(rental_id=rental_id, username=username,
                                                  state="failed", detail=str(error))
    return state


def is_container_entry(entry: object) -> bool:
    return isinstance(entry, dict) and entry.get("isolation") == "container"


def container_entries_refuse(entries: list[Any]) -> tuple[list[Any], dict[str, LoginReport]]:
    """Without container mode (no runtime answered at the agent's start): the entries whose
    `isolation` is "container" are reported failed, never made Unix users; the others as they came."""
    others, refused = [], {}
    for entry in entries:
        if not is_container_entry(entry):
            others.append(entry)
        elif (name := login_identity(entry)) is not None:
            refused[name] = LoginReport(rental_id=entry["rental_id"], username=name, state="failed",
                                        detail="this server has no container runtime")
    return others, refused


def login_identity(entry: object) -> str | None:
    """`evx-<rental id>` when the entry names exactly that, else None (and a warning that shows
    at most the start of whatever the answer put there)."""
    if not isinstance(entry, dict):
        LOG.warning("ignored a login entry of the answer that is not an object")
        return None
    rental_id, username = entry.get("rental_id"), entry.get("username")
    valid_id = isinstance(rental_id, int) and not isinstance(rental_id, bool) and rental_id > 0
    if not (valid_id and isinstance(username, str) and USERNAME.fullmatch(username)
            and username == f"evx-{rental_id}"):
        shown = str(username)[:SHOWN_NAME_LENGTH]
        LOG.warning("ignored a login the agent may not manage: username %r, rental %r", shown,
                    str(rental_id)[:SHOWN_NAME_LENGTH])
        return None
    return username


def ssh_public_key_check(text: object) -> str:
    """`type base64 [comment]` on one line, of a known type whose decoded body says that type;
    the reason it is not, in `LoginInvalid`, without the key itself."""
    if not isinstance(text, str) or not text.strip():
        raise LoginInvalid("the SSH public key is missing")
    if len(text) > MAX_KEY_LENGTH:
        raise LoginInvalid("the SSH public key is too long")
    if any(ord(character) < 32 or ord(character) == 127 for character in text):
        raise LoginInvalid("the SSH public key is not one line of printable text")
    parts = text.strip().split(None, 2)
    if len(parts) < 2 or parts[0] not in KEY_TYPES:
        raise LoginInvalid("the SSH public key is not of a known type")
    key_type, body = parts[0], parts[1]
    if not BASE64.fullmatch(body):
        raise LoginInvalid("the SSH public key's body is not base64")
    try:
        blob = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise LoginInvalid("the SSH public key's body is not base64") from None
    if len(blob) < 4:
        raise LoginInvalid("the SSH public key's body is too short")
    (length,) = struct.unpack(">I", blob[:4])
    if blob[4:4 + length] != key_type.encode():
        raise LoginInvalid("the SSH public key's body is not of the type it says")
    comment = " ".join(parts[2].split()) if len(parts) == 3 else ""
    return f"{key_type} {body} {comment}" if comment else f"{key_type} {body}"


def gpu_indices_check(value: object) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise LoginInvalid("the GPU indices are missing")
    if not all(isinstance(index, int) and not isinstance(index, bool) and 0 <= index <= MAX_GPU_INDEX
               for index in value):
        raise LoginInvalid(f"the GPU indices must be whole numbers from 0 to {MAX_GPU_INDEX}")
    if len(set(value)) != len(value):
        raise LoginInvalid("the GPU indices repeat")
    return tuple(sorted(value))


def gpu_uuids_check(value: object, indices: object) -> tuple[str, ...]:
    """The UUIDs of the answer's GPUs in the order of their sorted indices, () when the answer
    gives none (an exchange that knows none names the GPUs by index)."""
    if value is None or value == []:
        return ()
    if not isinstance(value, list) or not isinstance(indices, list) or len(value) != len(indices):
        raise LoginInvalid("the GPU UUIDs do not match the GPU indices")
    well_formed = all(isinstance(uuid, str) and GPU_UUID.fullmatch(uuid) for uuid in value)
    if not well_formed or len(set(value)) != len(value):
        raise LoginInvalid("the GPU UUIDs must be distinct and look like GPU-…")
    by_index = dict(zip(indices, value))
    return tuple(by_index[index] for index in sorted(by_index))


def desired_gpus_check(state: DesiredState, *, seen: frozenset[int] | None) -> None:
    """Refuse, in `state`, the logins whose GPUs are not on this machine (`seen`: the indices of
    its GPU nodes; None: not checked) or that share a GPU with another login: none of them is
    created, each is reported failed, and the others go ahead."""
    rentals_of: dict[int, list[DesiredLogin]] = {}
    for login in state.logins.values():
        for index in login.gpu_indices:
            rentals_of.setdefault(index, []).append(login)
    refused: dict[str, str] = {}
    for index, logins in sorted(rentals_of.items()):
        if seen is not None and index not in seen:
            shown = ", ".join(str(gpu) for gpu in sorted(seen)) or "none"
            for login in logins:
                refused.setdefault(login.username, f"GPU {index} is not on this server (its GPUs: {shown})")
        elif len(logins) > 1:
            rentals = " and ".join(str(rental) for rental in sorted(login.rental_id for login in logins))
            for login in logins:
                refused.setdefault(login.username, f"GPU {index} is given to rentals {rentals} at once")
    for username, detail in refused.items():
        login = state.logins.pop(username)
        LOG.warning("rental %s refused: %s", login.rental_id, detail)
        state.invalid[username] = LoginReport(rental_id=login.rental_id, username=username, state="failed",
                                              gpu_indices=login.gpu_indices, detail=detail)


def limits_check(value: object) -> SandboxLimits | None:
    """None when the answer carries none (the exchange has no isolation report yet)."""
    if value is None:
        return None
    limits = SandboxLimits.from_desired(value)
    if limits is None:
        raise LoginInvalid("the limits must be positive whole numbers of cores, MiB, GB and processes")
    return limits


# Planning -------------------------------------------------------------------------------------

def reconcile_plan(*, desired: DesiredState, managed: dict[str, ManagedLogin],
                   user_exists: Callable[[str], bool]) -> list[Action]:
    """What to do, in order: removals first (they free GPUs for the logins that follow)."""
    actions = [Action(kind="remove", username=name)
               for name in sorted(managed, key=rental_order) if name not in desired.listed()]
    for name in sorted(desired.logins, key=rental_order):
        wanted, ours = desired.logins[name], managed.get(name)
        exists = user_exists(name)
        if ours is None:
            actions.append(Action(kind="foreign" if exists else "create", username=name, desired=wanted))
        elif not exists:
            actions.append(Action(kind="create", username=name, desired=wanted))
        elif not ours.matches(wanted):
            actions.append(Action(kind="update", username=name, desired=wanted))
    return actions


def rental_order(username: str) -> int:
    return int(username.split("-", 1)[1])


# The login's files ----------------------------------------------------------------------------

def authorized_keys_text(login: DesiredLogin | ManagedLogin) -> str:
    gpus = gpu_list(login)
    return (f'environment="CUDA_VISIBLE_DEVICES={gpus}",environment="NVIDIA_VISIBLE_DEVICES={gpus}",'
            f'environment="CUDA_DEVICE_ORDER=PCI_BUS_ID" {login.ssh_public_key}\n')


def gpu_exports_text(login: DesiredLogin) -> str:
    gpus = gpu_list(login)
    return ("# Written by everx-agent: the GPUs of EverXCloud rental "
            f"{login.rental_id}. Rewritten when they change.\n"
            f"export CUDA_VISIBLE_DEVICES={gpus} NVIDIA_VISIBLE_DEVICES={gpus} "
            "CUDA_DEVICE_ORDER=PCI_BUS_ID\n")


def gpu_list(login: DesiredLogin | ManagedLogin) -> str:
    """The GPUs by UUID when the answer gives them: once the other GPUs' nodes cannot be opened,
    CUDA numbers the rental's own from 0, and an index would name the wrong one; a UUID cannot."""
    if login.gpu_uuids:
        return ",".join(login.gpu_uuids)
    return ",".join(str(index) for index in login.gpu_indices)


# Doing it -------------------------------------------------------------------------------------

class StateStore:
    """The users the agent created, in `<state dir>/logins.json` (0600, atomic)."""

    def __init__(self, *, state_dir: Path):
        self.path = state_dir / STATE_FILE

    def load(self) -> dict[str, ManagedLogin]:
        logins: dict[str, ManagedLogin] = {}
        for name, entry in json_file_read(path=self.path).get("logins", {}).items():
            try:
                login = ManagedLogin(
                    rental_id=int(entry["rental_id"]), username=str(entry["username"]),
                    ssh_public_key=str(entry["ssh_public_key"]),
                    gpu_indices=tuple(int(index) for index in entry["gpu_indices"]),
                    created_at=str(entry["created_at"]), ready=entry.get("ready") is True,
                    gpu_uuids=tuple(str(uuid) for uuid in entry.get("gpu_uuids", [])),
                    limits=SandboxLimits(**entry["limits"]) if entry.get("limits") else None,
                )
            except (KeyError, TypeError, ValueError):
                LOG.error("the state file has an unreadable entry for %r: kept as is", name[:40])
                continue
            if USERNAME.fullmatch(login.username) and login.username == name:
                logins[name] = login
        return logins

    def save(self, logins: dict[str, ManagedLogin]) -> None:
        private_dir_make(path=self.path.parent)
        data = {"version": 1, "logins": {
            name: {**asdict(login), "gpu_indices": list(login.gpu_indices),
                   "gpu_uuids": list(login.gpu_uuids)}
            for name, login in sorted(logins.items(), key=lambda item: rental_order(item[0]))
        }}
        private_file_write(path=self.path, text=json.dumps(data, indent=2) + "\n")


class Reconciler:
    """Converges the machine to the desired state and knows what to report about each login."""

    def __init__(self, *, system: Any, store: StateStore, now: Callable[[], str] | None = None,
                 device_dir: Path | None = None, containers: Any = None,
                 compute_apps: Callable[[], dict[str, list[int]]] = compute_apps_read,
                 sandboxes: Sandboxes | None = None, sshd: RentalSshd | None = None,
                 spawn_for: Callable[[str], Spawn] | None = None, disproved: DisprovedFacts | None = None):

        self.system = system
        # Rentals whose isolation is "container" (containers.ContainerReconciler); None: no runtime.
        self.containers = containers
        # Each login with limits runs in its sandbox (sandbox.py); None: no sandboxes here.
        self.sandboxes = sandboxes
        self.restored = False
        self.store = store
        # Each ready login's own sshd (sshd.py), started in the login's sandbox when it has one
        # (so every session inherits its groups and mounts), or through `spawn_for(username)` when
        # given; None: logins through the host's sshd and the home's keys (tests of the logins alone).
        self.sshd = sshd
        self.spawn_for = spawn_for
        # GPU nodes are locked to their logins after every pass (devices.py); None: not here (tests
        # of the logins alone, on machines whose /dev is not theirs to change).
        self.device_dir = device_dir
        self.compute_apps = compute_apps  # nvidia-smi's processes by GPU, read when a GPU changes hands
        self.device_drifts = DriftQueue()  # repairs the next heartbeat reports
        self.nodes_left: dict[int, NodeState] = {}  # each GPU node as the last pass left it
        self.gpus_held: dict[int, str] = {}  # GPU index -> why it is not handed to its rental yet
        self.container_gpus: dict[int, tuple[int, ...]] = {}  # container rental id -> its GPU indices
        self.gpus_waiting: dict[int, frozenset[int]] = {}  # GPU index -> the renters it was taken from
        self.gpus_refused: dict[int, str] = {}  # GPU index -> why the kernel would not lock its node
        # The isolation facts a refused rental showed false here, for the isolation report.
        self.disproved = disproved or DisprovedFacts()
        # The loop's pass and the device watch (loop.DeviceWatch) both lock nodes: one at a time.
        self.device_lock = threading.Lock()
        self.now = now or (lambda: rfc3339_format(utc_now()))
        self.managed = store.load()
        # This pass's problems, by user name: reported `failed` until a pass solves them.
        self.failures: dict[str, LoginReport] = {}

    def templates_take(self, entries: object) -> None:
        """The desired state's container templates, for container mode (without it: nothing to do)."""
        if self.containers is not None:
            self.containers.templates_take(entries)

    def reconcile(self, *, entries: object, remove_home: bool) -> list[Action]:
        """One pass; returns the changes it made (the actions that succeeded, a foreign user is
        never one). Never raises for a login's failure."""
        container_changes, refused, container_entries = [], {}, None
        if not self.restored:  # a reboot recreated the GPU nodes open: locked before anything starts
            self.devices_check()
        if self.containers is not None and isinstance(entries, list):
            # Run after the Unix users' pass: a GPU a sandbox rental gives up is free of its
            # processes (its cgroup killed) before a container is given it.
            container_entries = entries
            entries = [entry for entry in entries if not is_container_entry(entry)]
        elif isinstance(entries, list):
            entries, refused = container_entries_refuse(entries)
        try:
            desired = desired_logins_read(entries=entries)
        except LoginInvalid:
            return []
        desired.invalid.update(refused)
        seen = None if self.device_dir is None else frozenset(gpu_nodes(self.device_dir))
        desired_gpus_check(desired, seen=seen)
        actions = reconcile_plan(desired=desired, managed=self.managed,
                                 user_exists=lambda name: self.system.user_exists(username=name))
        failures = dict(desired.invalid)
        if not self.restored:
            failures.update(self._restore())
        changes = []
        for action in actions:
            state, problem = self._do(action, remove_home=remove_home)
            if problem:
                LOG.warning("%s %s: %s", action.kind, action.username, problem)
                rental_id = rental_order(action.username)
                indices = action.desired.gpu_indices if action.desired else ()
                failures[action.username] = LoginReport(rental_id=rental_id, username=action.username,
                                                        state=state, gpu_indices=indices, detail=problem)
            else:
                LOG.info("%s %s: done", action.kind, action.username)
                changes.append(action)
        if container_entries is not None:
            _others, container_changes = self.containers.reconcile(entries=container_entries)
            self._container_gpus_note()
        self.sshds_supervise(failures)
        self.failures = failures
        self.devices_check()
        return changes + container_changes

    def _container_gpus_note(self) -> None:
        """The GPUs each container rental has, kept while its container is listed (a runtime that
        hangs may keep one of an ended rental running): no Unix login gets them meanwhile."""
        listed = set(self.containers.found or {})
        kept = {rental_id: gpus for rental_id, gpus in self.container_gpus.items() if rental_id in listed}
        wanted = {login.rental_id: login.gpu_indices for login in self.containers.wanted.values()}
        self.container_gpus = {**kept, **wanted}

    def sshds_supervise(self, failures: dict[str, LoginReport]) -> None:
        """Every ready login's sshd running (started again if it died); cheap when they all run."""
        if self.sshd is None:
            return
        for name, login in sorted(self.managed.items(), key=lambda item: rental_order(item[0])):
            if not login.ready or name in failures:
                continue
            try:
                self._sshd_ensure(login)
            except SystemCommandError as error:
                LOG.warning("sshd of %s: %s", name, error)
                failures[name] = self._failure(login, error)

    def _failure(self, login: ManagedLogin, error: BaseException) -> LoginReport:
        """The report of a login that `error` stopped; a refusal's fact is false from now on."""
        self.disproved.add(error)
        return LoginReport(rental_id=login.rental_id, username=login.username,
                           state=login_failure_state(error), gpu_indices=login.gpu_indices, detail=str(error))

    def _sshd_ensure(self, login: DesiredLogin | ManagedLogin) -> None:
        # The host's sshd refuses this group: a login in no other is closed to everything but its own.
        self.system.renter_group_join(username=login.username)
        self.sshd.ensure(username=login.username, authorized_keys=authorized_keys_text(login),
                         spawn=self._spawn_of(login))

    def _spawn_of(self, login: DesiredLogin | ManagedLogin) -> Spawn | None:
        """How the login's sshd is started: in its sandbox when it has one; None: a plain process."""
        if self.spawn_for is not None:
            return self.spawn_for(login.username)
        spec = self.sandbox_spec(login)
        if spec is None:
            return None
        return lambda argv: self.sandboxes.spawn(spec, argv, **SANDBOXED_SSHD_OPTIONS)

    def devices_check(self) -> list[Drift]:
        """Each GPU node locked to the ready login that has it, others closed to every renter; the
        nodes found otherwise (and repaired) are kept as drift to report. Never raises: a node it
        cannot lock is logged, and the next pass tries again."""
        if self.device_dir is None:
            return []
        with self.device_lock:
            return self._devices_check()

    def _devices_check(self) -> list[Drift]:
        owners, uuids = {}, {}
        for name, login in self.managed.items():
            if login.ready:
                try:
                    uid = self.system.user_uid(username=name)
                except KeyError:
                    continue
                owners.update(dict.fromkeys(login.gpu_indices, uid))
                uuids.update(zip(login.gpu_indices, login.gpu_uuids))
        in_containers = {index: f"the container of rental {rental_id} still runs on it"
                         for rental_id, indices in self.container_gpus.items() for index in indices
                         if index in owners}
        for index in in_containers:
            del owners[index]
        try:
            found = devices_lock(device_dir=self.device_dir, owners=owners, compute_apps=self.compute_apps,
                                 uuids=uuids, waiting=self.gpus_waiting)
        except OSError as error:
            LOG.error("the GPU device nodes could not be locked: %s", error)
            return []
        found.held.update(in_containers)
        for index, reason in found.held.items():
            if self.gpus_held.get(index) != reason:
                LOG.warning("GPU %s is not handed over yet: %s", index, reason)
        for index, reason in found.failed.items():
            if self.gpus_refused.get(index) != reason:
                LOG.error("%s", reason)
            self.disproved.add(DeliveryRefused(reason, fact="devices_locked"))
        self.gpus_held, self.gpus_waiting, self.gpus_refused = found.held, found.waiting, found.failed
        # A drift is a node found unlike the pass before left it (udev, a driver reload,
        # nvidia-modprobe); the agent's own changes (a GPU handed over) and the first pass after a
        # start or a new node are not.
        drifts = [drift for drift in found.drifts
                  if drift.index in self.nodes_left and drift.found != self.nodes_left[drift.index]]
        for drift in found.drifts:
            if drift in drifts:
                LOG.warning("GPU %s's node was %s: repaired to %s",
                            drift.index, drift.found.text(), drift.wanted.text())
            else:
                LOG.info("GPU %s's node set to %s", drift.index, drift.wanted.text())
        self.nodes_left = found.left
        self.device_drifts.add(drifts, at=self.now())  # kept until a heartbeat carrying them is answered
        return drifts

    def reports(self) -> list[dict[str, Any]]:
        """Every login the agent manages now, and those it was asked for but could not set up."""
        reports = dict(self.failures)
        for name, login in self.managed.items():
            if name in reports:
                continue
            held = [index for index in login.gpu_indices if index in self.gpus_held]
            refused = [index for index in login.gpu_indices if index in self.gpus_refused]
            if login.ready and refused:
                # Its GPU is open to every renter or to none: it cannot be delivered as sold here.
                reports[name] = LoginReport(rental_id=login.rental_id, username=name, state="refused",
                                            gpu_indices=login.gpu_indices,
                                            detail=self.gpus_refused[refused[0]])
            elif login.ready and held:
                # Not ready for its buyer until its GPUs are: a rental is delivered on "ready".
                reports[name] = LoginReport(rental_id=login.rental_id, username=name, state="failed",
                                            gpu_indices=login.gpu_indices,
                                            detail=f"GPU {held[0]} is not handed over yet: "
                                                   f"{self.gpus_held[held[0]]}")
            elif login.ready:
                reports[name] = LoginReport(rental_id=login.rental_id, username=name, state="ready",
                                            gpu_indices=login.gpu_indices)
            else:
                reports[name] = LoginReport(rental_id=login.rental_id, username=name, state="failed",
                                            gpu_indices=login.gpu_indices,
                                            detail="interrupted before it was ready")
        listed = {name: report.to_json() for name, report in reports.items()}
        if self.sshd is not None:
            for report in listed.values():
                ready = report["state"] == "ready"
                report["ssh_port"] = self.sshd.port_of(report["username"]) if ready else None
        if self.containers is not None:
            listed.update({report["username"]: report for report in self.containers.reports()})
        return [listed[name] for name in sorted(listed, key=rental_order)]

    def _do(self, action: Action, *, remove_home: bool) -> tuple[str, str]:
        """("", "") when the action is done, else the login's state and why not."""
        try:
            if action.kind == "foreign":
                return "failed", f"a user {action.username} exists that the agent did not create"
            if action.kind == "remove":
                self._remove(action.username, remove_home=remove_home)
            elif action.kind == "create":
                self._create(action.desired)
            else:
                self._write(action.desired)
        except SystemCommandError as error:
            self.disproved.add(error)
            return login_failure_state(error), str(error)
        except OSError as error:  # the state file could not be saved: the change waits for the next pass
            return "failed", f"the agent's state could not be saved: {error.strerror or error}"
        return "", ""

    def _create(self, login: DesiredLogin) -> None:
        if login.username not in self.managed:
            # Recorded first: a crash after useradd then finds "our" user, not a foreign one; with
            # its limits, so that a login refused half-way has its sandbox (its mounted home) ended.
            self._remember(ManagedLogin(rental_id=login.rental_id, username=login.username,
                                        ssh_public_key=login.ssh_public_key, gpu_indices=login.gpu_indices,
                                        gpu_uuids=login.gpu_uuids, limits=login.limits,
                                        created_at=self.now()))
        try:
            self.system.user_create(username=login.username, comment=user_comment(login.rental_id))
        except SystemCommandError:
            # useradd may fail because someone else created the user meanwhile: then it is theirs.
            if self.system.user_comment(username=login.username) != user_comment(login.rental_id):
                self._forget(login.username)
            raise
        self._write(login)

    def _restore(self) -> dict[str, LoginReport]:
        """The first pass after a start: GPU nodes locked before any sandbox is touched (a reboot
        recreated them open), then each ready login's sandbox made sure of. One that still
        exists is found by its group name and changed only where it differs: none is made twice."""
        self.restored = True
        if self.sandboxes is None:
            return {}
        self.devices_check()
        found = self.sandboxes.rentals()
        problems = {}
        for name, login in sorted(self.managed.items()):
            if not login.ready or login.limits is None:
                continue
            try:
                self._sandbox_ensure(login)
            except (SystemCommandError, OSError) as error:
                LOG.warning("the sandbox of %s could not be restored: %s", name, error)
                problems[name] = self._failure(login, error)
        LOG.info("%d sandboxes found running, %d logins with limits", len(found),
                 sum(login.limits is not None for login in self.managed.values()))
        return problems

    def sandbox_spec(self, login: DesiredLogin | ManagedLogin) -> SandboxSpec | None:
        """The login's sandbox (what `Sandboxes.spawn` starts a command in), None without one."""
        if self.sandboxes is None or login.limits is None:
            return None
        uid, gid, home = self.system.user_account(username=login.username)
        return SandboxSpec(rental_id=login.rental_id, uid=uid, gid=gid, home=home, limits=login.limits,
                           gpu_minors=login.gpu_indices)

    def _sandbox_ensure(self, login: DesiredLogin | ManagedLogin) -> None:
        spec = self.sandbox_spec(login)
        if spec is not None:
            self.sandboxes.ensure(spec)

    def _write(self, login: DesiredLogin) -> None:
        self._sandbox_ensure(login)  # first: the home image is mounted before the files go in it
        # With its own sshd, the login's keys are in the agent's file, never in the home.
        home_keys = None if self.sshd else authorized_keys_text(login)
        self.system.login_files_write(username=login.username, authorized_keys=home_keys,
                                      gpu_exports=gpu_exports_text(login))
        if self.sshd:
            self._sshd_ensure(login)
        current = self.managed[login.username]
        self._remember(replace(current, ssh_public_key=login.ssh_public_key, gpu_indices=login.gpu_indices,
                               gpu_uuids=login.gpu_uuids, limits=login.limits, ready=True))

    def _remove(self, username: str, *, remove_home: bool) -> None:
        comment = self.system.user_comment(username=username)
        ours = comment is not None and comment == user_comment(rental_order(username))
        if ours:  # first: no process of the rental opens a GPU while it ends
            self._gpus_revoke(username)
        if self.sshd:  # then nobody logs in any more while the rest goes
            self.sshd.stop(username=username)
        if comment is not None and not ours:
            # Recorded, yet not made by us (a useradd that lost a race before a crash): not ours.
            LOG.warning("%s was not created by the agent: forgotten, not removed", username)
        elif ours:
            self.system.login_files_remove(username=username)
            self._sandbox_end(username, remove_home=remove_home)
            self.system.user_processes_kill(username=username)
            self.system.user_delete(username=username, remove_home=remove_home)
        self._forget(username)

    def _gpus_revoke(self, username: str) -> None:
        """The login's GPU nodes lose its ACL entries now: it is no longer ready, so no longer
        their owner."""
        login = self.managed.get(username)
        if login is not None and login.ready:
            self._remember(replace(login, ready=False))
        self.devices_check()

    def _sandbox_end(self, username: str, *, remove_home: bool) -> None:
        """Everything in the sandbox killed, its home unmounted, its group removed (its GPUs'
        ACL entries went first, `_gpus_revoke`)."""
        login = self.managed.get(username)
        spec = self.sandbox_spec(login) if login is not None else None
        if spec is not None:
            self.sandboxes.end(spec, remove_home=remove_home)

    def _remember(self, login: ManagedLogin) -> None:
        # On disk first: what the agent believes it created is never ahead of the state file.
        logins = {**self.managed, login.username: login}
        self.store.save(logins)
        self.managed = logins

    def _forget(self, username: str) -> None:
        if username in self.managed:
            logins = {name: login for name, login in self.managed.items() if name != username}
            self.store.save(logins)
            self.managed = logins
