"""How strongly a server keeps its renters apart: the published function from the host agent's
isolation report to the level the server is sold at (the market rules page says it to buyers;
docs/agent.md, "The isolation report", says what the agent sends).

The agent only reports facts it measured on its host; every rule is here, in one place:
- **container**: each rental is a container of an operator-curated image, with its own GPUs, CPU,
  memory, processes, disk and process list;
- **shared server**: each rental is a Unix user in its own sandbox, its GPUs locked to it and CPU,
  memory, processes and disk limited to its share;
- **whole server**: one rental at a time takes all the server's GPUs, so there is nothing to share.

A server is sold at the highest level its facts reach. No report (an older agent), a report that
does not parse, MIG-enabled GPUs, or a share of under one core, 1 GiB of memory or 1 GB of disk per
GPU once the seller's reserves are set aside: "whole server", the level that needs no boundary.
"""

import json
from dataclasses import dataclass
from hashlib import sha256

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

REPORT_VERSION = 1


class IsolationLevel(models.TextChoices):
    CONTAINER = "container", pgettext_lazy("isolation level", "Container")
    SHARED = "shared", pgettext_lazy("isolation level", "Shared server")
    WHOLE = "whole", pgettext_lazy("isolation level", "Whole server")


# Highest first: the order in which a server's facts are tried.
LEVELS_BY_STRENGTH = (IsolationLevel.CONTAINER, IsolationLevel.SHARED, IsolationLevel.WHOLE)



def levels_text(levels) -> str:
    """A set of levels as stored on a bid: their values, strongest first, joined by commas."""
    chosen = set(levels)
    return ",".join(level.value for level in LEVELS_BY_STRENGTH if level in chosen)


def levels_of_text(text: str) -> tuple[str, ...]:
    return tuple(text.split(",")) if text else ()


# Every non-empty set of levels a bid may accept, as stored (the bids' check constraint).
LEVEL_SETS = tuple(
    levels_text(level for position, level in enumerate(LEVELS_BY_STRENGTH) if mask & (1 << position))
    for mask in range(1, 2 ** len(LEVELS_BY_STRENGTH))
)
ANY_LEVEL = levels_text(LEVELS_BY_STRENGTH)

# The facts an agent reports (docs/agent.md, "The isolation report"), with what each one means to
# a buyer. Each is a measurement on the host, true only when the agent saw it hold.
FACTS = {
    "devices_locked": _("Each GPU's device node opens only for its own rental"),
    "driver_keeps_permissions": _("The GPU driver leaves the device permissions as set"),
    "device_cgroup": _("A device filter of the kernel also keeps other GPUs closed"),
    "cpu_limited": _("CPU limited to the rental's share"),
    "memory_limited": _("Memory limited to the rental's share, without swap"),
    "processes_limited": _("Number of processes limited"),
    "disk_limited": _("Disk limited to the rental's share"),
    "tmp_private": _("Private /tmp and /dev/shm"),
    "processes_hidden": _("Other rentals' processes hidden"),
    "login_sandboxed": _("Logins start inside the rental's sandbox"),
    "host_login_closed": _("No other way in: the host's SSH, cron and at refuse the rentals' users"),
    "mig_enabled": _("MIG (multi-instance GPU) is on"),
}
# What a shared server needs, all of it. Hidden processes and the second device filter are shown
# but not required: many hosts cannot have them, and neither lets a renter reach another's GPUs,
# memory or files.
SHARED_FACTS = (
    "devices_locked", "driver_keeps_permissions", "cpu_limited", "memory_limited", "processes_limited",
    "disk_limited", "tmp_private", "login_sandboxed", "host_login_closed",
)
LIMIT_FACTS = ("cpu_limited", "memory_limited", "processes_limited")
BACKENDS = ("systemd", "v2", "v1", "none")
RUNTIMES = ("docker", "podman")
MAX_TEMPLATES = 32
MAX_VERSION = 40


@dataclass(frozen=True)
class Reserves:
    """What the seller keeps for the host itself; the rest is shared out by GPU."""

    cpu_cores: int
    memory_mib: int
    disk_gb: int

    @classmethod
    def of_settings(cls) -> "Reserves":
        return cls(
            cpu_cores=settings.ISOLATION_RESERVE_CPU_CORES,
            memory_mib=settings.ISOLATION_RESERVE_MEMORY_GIB * 1024,
            disk_gb=settings.ISOLATION_RESERVE_DISK_GB,
        )


@dataclass(frozen=True)
class Sellable:
    """The server's hardware once the reserves are set aside: what its rentals share."""

    cpu_cores: int
    memory_mib: int
    disk_gb: int

    @classmethod
    def of(cls, *, hardware: dict, reserves: Reserves) -> "Sellable":
        return cls(
            cpu_cores=max(hardware["cpu_cores"] - reserves.cpu_cores, 0),
            memory_mib=max(hardware["memory_mib"] - reserves.memory_mib, 0),
            disk_gb=max(hardware["disk_gb"] - reserves.disk_gb, 0),
        )

    def enough_for(self, gpu_count: int) -> bool:
        """At least one core, 1 GiB and 1 GB per GPU: a share of less is no sandbox to sell."""
        return (
            self.cpu_cores >= gpu_count and self.memory_mib >= 1024 * gpu_count and self.disk_gb >= gpu_count
        )


@dataclass(frozen=True)
class RentalLimits:
    """What a rental of `g` of the server's `G` GPUs may use: ⌊sellable·g/G⌋ of each, so that the
    rentals of one server never add up to more than it has (the floor of each share is at most
    its exact part). Processes: a fixed number per GPU."""

    cpu_cores: int
    memory_mib: int
    disk_gb: int
    processes: int

    @classmethod
    def of(cls, *, sellable: Sellable, gpus: int, gpu_count: int, processes_per_gpu: int) -> "RentalLimits":
        return cls(
            cpu_cores=max(sellable.cpu_cores * gpus // gpu_count, 1),
            memory_mib=sellable.memory_mib * gpus // gpu_count,
            disk_gb=sellable.disk_gb * gpus // gpu_count,
            processes=processes_per_gpu * gpus,
        )

    def as_dict(self) -> dict:
        return {"cpu_cores": self.cpu_cores, "memory_mib": self.memory_mib, "disk_gb": self.disk_gb,
                "processes": self.processes}


class ReportInvalid(ValueError):
    """An isolation report that does not follow the protocol: `field` names where (the API's
    `{field, code, detail}`), `detail` says what is wrong, in English (the agent's language)."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field
        self.detail = detail


def _exact_keys(where: str, value, keys) -> None:
    if not isinstance(value, dict):
        raise ReportInvalid(where, "an object is expected")
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise ReportInvalid(f"{where}.{unknown[0]}" if where else unknown[0], "not a field of the report")
    missing = sorted(set(keys) - set(value))
    if missing:
        raise ReportInvalid(f"{where}.{missing[0]}" if where else missing[0], "this field is required")


def _whole_number(where: str, value, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise ReportInvalid(where, f"a whole number from 0 to {high} is expected")


def _short_text(where: str, value, *, allow_empty: bool) -> None:
    printable = isinstance(value, str) and value.isprintable() and len(value) <= MAX_VERSION
    if not printable or (not allow_empty and not value.strip()):
        raise ReportInvalid(where, f"a printable text of 1 to {MAX_VERSION} characters is expected")


def _container_check(container) -> None:
    if container is None:
        return
    if isinstance(container, dict) and "paused" in container:  # the one key an agent may leave out
        if not isinstance(container["paused"], bool):
            raise ReportInvalid("container.paused", "true or false is expected")
        container = {name: value for name, value in container.items() if name != "paused"}
    _exact_keys("container", container, (
        "runtime", "runtime_version", "toolkit_version", "gpus_by_uuid", "self_test", "disk_limited",
        "templates",
    ))
    if container["runtime"] not in RUNTIMES:
        raise ReportInvalid("container.runtime", "docker or podman is expected")
    # A runtime without a version did not answer: it is no runtime (an impossible combination).
    _short_text("container.runtime_version", container["runtime_version"], allow_empty=False)
    _short_text("container.toolkit_version", container["toolkit_version"], allow_empty=True)
    for name in ("gpus_by_uuid", "self_test", "disk_limited"):
        if not isinstance(container[name], bool):
            raise ReportInvalid(f"container.{name}", "true or false is expected")
    templates = container["templates"]
    if not isinstance(templates, list) or len(templates) > MAX_TEMPLATES:
        raise ReportInvalid("container.templates", f"a list of at most {MAX_TEMPLATES} digests is expected")
    for position, digest in enumerate(templates):
        if not _is_digest(digest):
            raise ReportInvalid(
                f"container.templates.{position}", "a digest sha256:<64 hex digits> is expected"
            )


def _is_digest(value) -> bool:
    if not isinstance(value, str) or not value.startswith("sha256:") or len(value) != 71:
        return False
    return all(character in "0123456789abcdef" for character in value[7:])


def isolation_report_check(report, *, server_id: int) -> None:
    """Raise `ReportInvalid` unless `report` is a sound isolation report of server `server_id`."""
    _exact_keys("", report, ("version", "server_id", "hardware", "backend", "facts", "container"))
    # Exact types: in Python true == 1 and 3.0 == 3, which the protocol does not mean.
    if type(report["version"]) is not int or report["version"] != REPORT_VERSION:
        raise ReportInvalid("version", f"version {REPORT_VERSION} is expected")
    measured_for = report["server_id"]
    if measured_for is not None and (type(measured_for) is not int or measured_for != server_id):
        raise ReportInvalid("server_id", "this report was measured for another server")
    _exact_keys("hardware", report["hardware"], ("cpu_cores", "memory_mib", "disk_gb"))
    _whole_number("hardware.cpu_cores", report["hardware"]["cpu_cores"], 4096)
    _whole_number("hardware.memory_mib", report["hardware"]["memory_mib"], 2**31)
    _whole_number("hardware.disk_gb", report["hardware"]["disk_gb"], 10**7)
    if report["backend"] not in BACKENDS:
        raise ReportInvalid("backend", "one of systemd, v2, v1, none is expected")
    facts = report["facts"]
    _exact_keys("facts", facts, FACTS)
    for name, value in facts.items():
        if not isinstance(value, bool):
            raise ReportInvalid(f"facts.{name}", "true or false is expected")
    if report["backend"] == "none" and any(facts[name] for name in LIMIT_FACTS):
        # Limits need a cgroup: an agent claiming them without one contradicts itself.
        raise ReportInvalid("backend", "limits are reported without a cgroup backend")
    _container_check(report["container"])


def isolation_report_digest(report) -> str:
    """The report's SHA-256 over its canonical JSON: equal reports, equal digests, whatever the
    order of their keys (the exchange stores a report only when its digest changes)."""
    canonical = json.dumps(report, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return sha256(canonical.encode()).hexdigest()


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.strip().lstrip("v").split("."):
        digits = "".join(character for character in part if character.isdigit()) if part else ""
        if not digits or not part.startswith(digits):
            break
        parts.append(int(digits))
    return tuple(parts)


def toolkit_is_current(version: str, minimum: str) -> bool:
    """Whether the NVIDIA Container Toolkit `version` is at least `minimum` (both like 1.17.8);
    an unreadable version is not."""
    found = _version_tuple(version)
    return bool(found) and found >= _version_tuple(minimum)


def facts_reach(level: str, *, report: dict, toolkit_minimum: str) -> bool:
    """Whether the report's facts reach `level` (before the share and MIG rules)."""
    if level == IsolationLevel.WHOLE:
        return True
    if level == IsolationLevel.SHARED:
        return all(report["facts"][name] for name in SHARED_FACTS)
    container = report["container"]
    return container is not None and not container.get("paused") and container["gpus_by_uuid"] and (
        container["self_test"] and container["disk_limited"]
        and toolkit_is_current(container["toolkit_version"], toolkit_minimum)
    )


def containers_paused(report, **level_of) -> bool:
    """Whether the report's container runtime stopped answering (`paused`) on a host whose
    containers reach "container" otherwise (`level_of`: isolation_level_of's arguments): no new
    container is sold, but those it runs keep their boundary."""
    container = report.get("container") if isinstance(report, dict) else None
    if not isinstance(container, dict) or container.get("paused") is not True:
        return False
    answering = {**report, "container": {**container, "paused": False}}
    return isolation_level_of(answering, **level_of) == IsolationLevel.CONTAINER


def isolation_level_of(
    report, *, server_id: int, gpu_count: int, reserves: Reserves, toolkit_minimum: str,
    devices_held: bool = False,
) -> str:
    """The level server `server_id` with `gpu_count` GPUs is sold at, from its agent's report
    (None: an agent without one). `devices_held`: an operator has not yet cleared repeated device
    drifts, so the GPUs' locks count as not holding."""
    try:
        isolation_report_check(report, server_id=server_id)
    except ReportInvalid:
        return IsolationLevel.WHOLE
    if report["facts"]["mig_enabled"]:
        return IsolationLevel.WHOLE
    if not Sellable.of(hardware=report["hardware"], reserves=reserves).enough_for(gpu_count):
        return IsolationLevel.WHOLE
    if devices_held:
        report = {**report, "facts": {**report["facts"], "devices_locked": False}}
    for level in LEVELS_BY_STRENGTH:
        if facts_reach(level, report=report, toolkit_minimum=toolkit_minimum):
            return level
    return IsolationLevel.WHOLE  # unreachable: WHOLE always holds


REPORT_REFUSED = _("The agent's last isolation report did not hold.")


def level_shortfall(level: str, *, report, server_id: int, gpu_count: int, reserves: Reserves,
                    toolkit_minimum: str, devices_held: bool = False) -> list[str]:
    """Why a report does not reach `level`, as a seller reads it: each reason translated, in the
    order the level function tries them; [] when it does reach it (or for "whole server")."""
    if level == IsolationLevel.WHOLE:
        return []
    if report is None:
        return [str(_("The agent sends no isolation report (an older agent)."))]
    try:
        isolation_report_check(report, server_id=server_id)
    except ReportInvalid:
        return [str(REPORT_REFUSED)]
    reasons = []
    if report["facts"]["mig_enabled"]:
        reasons.append(str(FACTS["mig_enabled"]))
    if not Sellable.of(hardware=report["hardware"], reserves=reserves).enough_for(gpu_count):
        reasons.append(str(_("Once your reserves are set aside, a GPU's share is under one core, 1 GiB of "
                             "memory or 1 GB of disk.")))
    facts = report["facts"]
    if level == IsolationLevel.SHARED:
        if devices_held:  # a container passes its own GPUs: only a sandbox relies on the locks
            reasons.append(str(_("The GPU locks were found changed too often; an operator has not yet "
                                 "trusted them again.")))
        reasons += [str(FACTS[name]) for name in SHARED_FACTS if not facts[name]]
    else:
        reasons += _container_shortfall(report["container"], toolkit_minimum=toolkit_minimum)
    return reasons


def _container_shortfall(container, *, toolkit_minimum: str) -> list[str]:
    if container is None:
        return [str(_("No container runtime answered."))]
    reasons = []
    if container.get("paused"):
        reasons.append(str(_("The container runtime stopped answering: the containers it runs keep "
                             "running, and no new one is sold until it answers again.")))
    if not container["gpus_by_uuid"]:
        reasons.append(str(_("The container runtime cannot give GPUs by their UUID.")))
    if not container["self_test"]:
        reasons.append(str(_("The container self-test failed.")))
    if not container["disk_limited"]:
        reasons.append(str(_("Containers' disks are not limited.")))
    if not toolkit_is_current(container["toolkit_version"], toolkit_minimum):
        # The product's name is a placeholder: it is not translated (nor is its "Container").
        reasons.append(str(_("The %(toolkit)s is older than %(version)s.")
                           % {"toolkit": "NVIDIA Container Toolkit", "version": toolkit_minimum}))
    return reasons


def facts_missing(level: str, *, report: dict) -> list[str]:
    """The facts a report lacks for `level`, in FACTS' order (the seller portal's checklist)."""
    if level != IsolationLevel.SHARED:
        return []
    return [name for name in FACTS if name in SHARED_FACTS and not report["facts"].get(name)]
