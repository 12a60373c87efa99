"""The agent's configuration and its files on disk.

The configuration (`/etc/everx-agent/config.json`) holds the exchange's address and the server's
agent token, so it is readable by root only. Every file the agent keeps is written atomically
(a temporary file in the same directory, then `os.replace`): a crash or a full disk leaves the
previous version, never half of one.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

DEFAULT_CONFIG_PATH = Path("/etc/everx-agent/config.json")
DEFAULT_STATE_DIR = Path("/var/lib/everx-agent")
# Where the GPU device nodes are; a setting so that tests lock stand-in nodes in a folder of theirs.
DEFAULT_DEVICE_DIR = "/dev"
# The rentals' groups are `<cgroup_base>/everx/rental-<id>` in each hierarchy; a setting so that
# tests keep theirs under a parent group of their own.
DEFAULT_CGROUP_BASE = ""
CONFIG_ENV = "EVERX_AGENT_CONFIG"
STATE_DIR_ENV = "EVERX_AGENT_STATE_DIR"
DEFAULT_HEARTBEAT_SECONDS = 30
# Container mode (containers.py): rentals' ports are published on this address (all of the
# machine's by default).
DEFAULT_CONTAINER_LISTEN_ADDRESS = "0.0.0.0"  # noqa: S104 (buyers reach their rental from anywhere)
# The isolation report is measured again this often (and whenever the GPU nodes or the driver change).
DEFAULT_ISOLATION_MINUTES = 10
# How long a container runtime's call (`docker info`, `podman run`, ...) may take before the runtime
# counts as absent and container mode as unavailable.
DEFAULT_RUNTIME_TIMEOUT_SECONDS = 60.0
DEFAULT_DEVICE_CHECK_SECONDS = 2.0  # how often the GPU nodes are checked between heartbeats
# Each rental's own sshd (sshd.py) listens on a port of this range, set at enrolment.
DEFAULT_SSH_PORT_FIRST = 41000
DEFAULT_SSH_PORT_LAST = 41099
# The rental sshds' configurations, keys files and pid files; and the host's own ways in, which
# `everx-agent harden` closes and the agent measures (settings, so tests use files of theirs).
LOGIN_PATH_DEFAULTS = {
    "run_dir": "/run/everx-agent",
    "ssh_listen_address": "0.0.0.0",  # noqa: S104 (renters connect from anywhere)
    "host_sshd_config": "/etc/ssh/sshd_config",
    "host_sshd_drop_in": "/etc/ssh/sshd_config.d/50-everx.conf",
    "cron_deny": "/etc/cron.deny",
    "at_deny": "/etc/at.deny",
}
# The NVIDIA driver's parameters (devices.py: will it undo the GPU nodes' locks?); a setting so that
# tests measure a stand-in file.
DEFAULT_DRIVER_PARAMS = "/proc/driver/nvidia/params"
# Every rental's sandbox mounts its own folders over these: a folder of the agent's under one would
# not be there for the rental's sshd, started inside (its configuration, keys and host key).
SANDBOX_COVERED = ("/tmp", "/var/tmp", "/dev/shm")  # noqa: S108
# A token is `evxa_` and URL-safe characters; only its start ever appears in a log or on screen.
TOKEN_PATTERN = re.compile(r"^evxa_[A-Za-z0-9_-]{20,200}$")
TOKEN_HINT_LENGTH = 12
LOCAL_HOSTS = frozenset({"localhost"})


class ConfigError(Exception):
    """The configuration is missing or unusable; the message says what to do."""


@dataclass
class AgentConfig:
    url: str
    token: str
    heartbeat_seconds: int = DEFAULT_HEARTBEAT_SECONDS
    remove_home: bool = False
    state_dir: str = ""
    device_dir: str = DEFAULT_DEVICE_DIR
    container_listen_address: str = DEFAULT_CONTAINER_LISTEN_ADDRESS
    # The images the seller offers as containers, each {"image": "name@sha256:…", "ports": [22, …],
    # "key_path", "command", "files", "mounts"} (containers.template_read checks them).
    container_templates: list = field(default_factory=list)
    isolation_minutes: int = DEFAULT_ISOLATION_MINUTES
    runtime_timeout_seconds: float = DEFAULT_RUNTIME_TIMEOUT_SECONDS
    device_check_seconds: float = DEFAULT_DEVICE_CHECK_SECONDS
    cgroup_base: str = DEFAULT_CGROUP_BASE
    ssh_port_first: int = DEFAULT_SSH_PORT_FIRST
    ssh_port_last: int = DEFAULT_SSH_PORT_LAST
    run_dir: str = LOGIN_PATH_DEFAULTS["run_dir"]
    ssh_listen_address: str = LOGIN_PATH_DEFAULTS["ssh_listen_address"]
    host_sshd_config: str = LOGIN_PATH_DEFAULTS["host_sshd_config"]
    host_sshd_drop_in: str = LOGIN_PATH_DEFAULTS["host_sshd_drop_in"]
    cron_deny: str = LOGIN_PATH_DEFAULTS["cron_deny"]
    at_deny: str = LOGIN_PATH_DEFAULTS["at_deny"]
    driver_params: str = DEFAULT_DRIVER_PARAMS

    def state_path(self) -> Path:
        return state_dir_resolve(configured=self.state_dir)

    def __repr__(self) -> str:
        # A configuration may end up in a traceback or a log line: never with its token.
        return (f"AgentConfig(url={self.url!r}, token={token_hint(self.token)!r}, "
                f"heartbeat_seconds={self.heartbeat_seconds}, remove_home={self.remove_home}, "
                f"state_dir={self.state_dir!r}, device_dir={self.device_dir!r}, "
                f"container_listen_address={self.container_listen_address!r}, "
                f"container_templates=<{len(self.container_templates)}>, "
                f"isolation_minutes={self.isolation_minutes}, "
                f"runtime_timeout_seconds={self.runtime_timeout_seconds}, "
                f"device_check_seconds={self.device_check_seconds}, "
                f"cgroup_base={self.cgroup_base!r}, "

                f"ssh_ports={self.ssh_port_first}-{self.ssh_port_last})")


def token_hint(token: str) -> str:
    """What may be shown of a token: its first characters, enough to tell two apart."""
    return token[:TOKEN_HINT_LENGTH] + "…"


def config_path_resolve(*, explicit: str | None = None) -> Path:
    """`--config`, else `$EVERX_AGENT_CONFIG`, else /etc/everx-agent/config.json."""
    if explicit:
        return Path(explicit)
    from_env = os.environ.get(CONFIG_ENV)
    return Path(from_env) if from_env else DEFAULT_CONFIG_PATH


def state_dir_resolve(*, configured: str = "") -> Path:
    """`$EVERX_AGENT_STATE_DIR`, else the configuration's `state_dir`, else /var/lib/everx-agent."""
    from_env = os.environ.get(STATE_DIR_ENV)
    if from_env:
        return Path(from_env)
    return Path(configured) if configured else DEFAULT_STATE_DIR


def url_check(url: str) -> str:
    """The exchange's address without a trailing slash, or `ConfigError`: the token travels in
    every request, so plain http is accepted only to this machine (tests, a local exchange)."""
    url = url.strip().rstrip("/")
    if url.endswith("/api/v1"):
        url = url[: -len("/api/v1")]
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ConfigError(f"{url!r} is not an address like https://exchange.example.")
    if parts.scheme == "http" and not host_is_local(parts.hostname):
        raise ConfigError("The exchange's address must start with https:// (the token would travel "
                          "in clear); http:// is accepted for 127.0.0.1, localhost and ::1 only.")
    return url


def host_is_local(host: str) -> bool:
    if host.lower() in LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def token_check(token: str) -> str:
    token = token.strip()
    if not TOKEN_PATTERN.match(token):
        raise ConfigError("This is not an agent token: it starts with evxa_ (copy it from the "
                          "server's page of the seller portal).")
    return token


def ssh_ports_check(first: int, last: int) -> tuple[int, int]:
    if not 1024 <= first <= last <= 65535:
        raise ConfigError(f"The SSH port range {first}-{last} will not do: two ports from 1024 to 65535, "
                          "the first not above the last (default 41000-41099).")
    return first, last


def config_load(*, path: Path) -> AgentConfig:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"No configuration at {path}: run `everx-agent enroll` first.") from None
    except (OSError, ValueError) as error:
        raise ConfigError(f"The configuration {path} cannot be read: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("url"), str) \
            or not isinstance(data.get("token"), str):
        raise ConfigError(f"The configuration {path} has no url or token: run `everx-agent enroll`.")
    heartbeat = data.get("heartbeat_seconds", DEFAULT_HEARTBEAT_SECONDS)
    first, last = (data.get(key, default) for key, default in (
        ("ssh_port_first", DEFAULT_SSH_PORT_FIRST), ("ssh_port_last", DEFAULT_SSH_PORT_LAST)))
    if not all(isinstance(port, int) and not isinstance(port, bool) for port in (first, last)):
        raise ConfigError(f"The configuration {path} has an SSH port that is not a whole number.")
    ssh_port_first, ssh_port_last = ssh_ports_check(first, last)
    login_paths = {key: value if isinstance(value := data.get(key), str) and value else default
                   for key, default in LOGIN_PATH_DEFAULTS.items()}
    return AgentConfig(
        url=data["url"],
        token=data["token"],
        heartbeat_seconds=heartbeat if isinstance(heartbeat, int) and heartbeat > 0
        else DEFAULT_HEARTBEAT_SECONDS,
        remove_home=data.get("remove_home") is True,
        state_dir=data.get("state_dir") if isinstance(data.get("state_dir"), str) else "",
        device_dir=device_dir if isinstance(device_dir := data.get("device_dir"), str) and device_dir
        else DEFAULT_DEVICE_DIR,
        container_listen_address=address if address_is_ip(address := data.get("container_listen_address"))
        else DEFAULT_CONTAINER_LISTEN_ADDRESS,
        container_templates=templates if isinstance(templates := data.get("container_templates"), list)
        else [],
        isolation_minutes=positive_int(data.get("isolation_minutes"), DEFAULT_ISOLATION_MINUTES),
        runtime_timeout_seconds=positive_seconds(data.get("runtime_timeout_seconds"),
                                                 DEFAULT_RUNTIME_TIMEOUT_SECONDS),
        device_check_seconds=positive_seconds(data.get("device_check_seconds"), DEFAULT_DEVICE_CHECK_SECONDS),
        cgroup_base=cgroup_base_check(data.get("cgroup_base")),
        ssh_port_first=ssh_port_first, ssh_port_last=ssh_port_last, **login_paths,
        driver_params=params if isinstance(params := data.get("driver_params"), str) and params
        else DEFAULT_DRIVER_PARAMS,
    )


def sandbox_paths_check(config: AgentConfig) -> None:
    """`ConfigError` when the state or run folder is under /tmp, /var/tmp or /dev/shm: each rental's
    sandbox has its own there, so the sshd started in it would find neither its configuration nor
    its host key."""
    defaults = {"state_dir": DEFAULT_STATE_DIR, "run_dir": LOGIN_PATH_DEFAULTS["run_dir"]}
    for name, path in (("state_dir", config.state_path()), ("run_dir", Path(config.run_dir))):
        resolved = Path(os.path.realpath(path))
        for covered in SANDBOX_COVERED:
            top = Path(os.path.realpath(covered))
            if resolved == top or top in resolved.parents:
                raise ConfigError(
                    f"{name} {str(path)[:200]} is under {covered}, which each rental's sandbox replaces "
                    "with its own: the rentals' sshds would not find their files there. Choose a folder "
                    f"elsewhere (default {defaults[name]}).")


def address_is_ip(value: object) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def positive_int(value: object, default: int) -> int:
    """A setting that must be a whole number above 0; anything else is the default."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def positive_seconds(value: object, default: float) -> float:
    """A setting that must be a number of seconds above 0; anything else is the default."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return default


def cgroup_base_check(value: object) -> str:
    """A relative path of plain names (never `..`, never absolute: it is joined to /sys/fs/cgroup)."""
    if not isinstance(value, str) or not value:
        return DEFAULT_CGROUP_BASE
    parts = value.split("/")
    if value.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise ConfigError(f"cgroup_base {value[:40]!r} must be a relative path like everx-test/one.")
    return value


def config_save(*, path: Path, config: AgentConfig) -> None:
    private_dir_make(path=path.parent)
    private_file_write(path=path, text=json.dumps(asdict(config), indent=2) + "\n")


def private_dir_make(*, path: Path) -> None:
    """A directory only root reads (the state holds the buyers' public keys and user names)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)


def private_file_write(*, path: Path, text: str, mode: int = 0o600) -> None:
    """Write `text` to `path` atomically with `mode` from its first byte (never briefly readable
    by others, as a write then chmod would be)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)  # the umask may have taken bits away at creation
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def json_file_read(*, path: Path) -> dict[str, Any]:
    """A JSON object from a file of ours, or {} when it is missing or damaged."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
