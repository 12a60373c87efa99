"""`everx-agent enroll | run | status`: the command line of the host agent.

Exit codes: 0 done, 1 the exchange did not answer (`run --once`) or systemd refused, 2 wrong
usage, a refused token or an address that will not do.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import __version__
from .client import ExchangeClient, ExchangeUnreachable, ProblemError
from .config import (
    CONFIG_ENV,
    DEFAULT_CONFIG_PATH,
    DEFAULT_SSH_PORT_FIRST,
    DEFAULT_SSH_PORT_LAST,
    AgentConfig,
    ConfigError,
    config_load,
    config_path_resolve,
    config_save,
    private_file_write,
    sandbox_paths_check,
    ssh_ports_check,
    state_dir_resolve,
    token_check,
    token_hint,
    url_check,
)
from .containers import (
    ContainerReconciler,
    ContainerRuntime,
    TemplatePuller,
    container_templates_read,
    driver_version_read,
    storage_quota_read,
)
from .devices import DRIVER_PARAMS, MODPROBE_FILE, MODPROBE_OPTIONS, driver_permissions_read, harden_text
from .gpus import gpus_read
from .isolation import (
    ContainerMode,
    IsolationReporter,
    IsolationSettings,
    RuntimeFound,
    facts_advice_text,
    renter_gids,
    report_summary,
    runtime_find,
)
from .loop import Agent, StatusStore, disk_free_gb
from .reconcile import Reconciler, StateStore
from .sandbox import Sandboxes, sandbox_facts
from .sshd import PortBook, RentalSshd, SshdSettings, host_login_harden, login_facts
from .system import SYSTEM_PATH, UnixSystem

LOG = logging.getLogger("everx_agent")

UNIT_NAME = "everx-agent.service"
DEFAULT_UNIT_DIR = Path("/etc/systemd/system")
# Present when systemd is the running init (sd_booted(3) looks at the same place).
SYSTEMD_RUNTIME_DIR = Path("/run/systemd/system")
SYSTEMCTL_TIMEOUT_SECONDS = 60


def main(argv: list[str] | None = None) -> int:
    arguments = parser_build().parse_args(argv)
    logging_setup()
    try:
        return arguments.handler(arguments)
    except ConfigError as error:
        print(f"everx-agent: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def parser_build() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS,
                        help=f"the configuration file (default: ${CONFIG_ENV}, else {DEFAULT_CONFIG_PATH})")
    parser = argparse.ArgumentParser(prog="everx-agent", parents=[common],
                                     description="The EverXCloud host agent, run as root on a GPU server.")
    parser.add_argument("--version", action="version", version=f"everx-agent {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    enroll = commands.add_parser("enroll", parents=[common], help="check the server's agent token, save it "
                                 "and install the systemd service")
    enroll.add_argument("--url", required=True, help="the exchange's address, https://...")
    enroll.add_argument("--token", required=True, help="the server's agent token (evxa_...), from the "
                        "seller portal")
    enroll.add_argument("--remove-home", action="store_true",
                        help="wipe a rental's home directory when it ends (default: keep it)")
    enroll.add_argument("--heartbeat-seconds", type=int, default=30, metavar="N",
                        help="until the exchange says otherwise (default: 30)")
    enroll.add_argument("--state-dir", default="", help="default: /var/lib/everx-agent")
    enroll.add_argument("--ssh-ports", default=f"{DEFAULT_SSH_PORT_FIRST}-{DEFAULT_SSH_PORT_LAST}",
                        metavar="FIRST-LAST", help="the ports the rentals' own sshds listen on, open in the "
                        f"firewall (default: {DEFAULT_SSH_PORT_FIRST}-{DEFAULT_SSH_PORT_LAST})")
    enroll.add_argument("--unit-dir", type=Path, default=DEFAULT_UNIT_DIR, help=argparse.SUPPRESS)
    enroll.set_defaults(handler=enroll_command)

    run = commands.add_parser("run", parents=[common], help="the service: heartbeats and logins")
    run.add_argument("--once", action="store_true", help="one heartbeat and one reconcile, then exit")
    run.set_defaults(handler=run_command)

    status = commands.add_parser("status", parents=[common], help="what the agent sees and was last asked")
    status.add_argument("--json", action="store_true", help="as JSON")
    status.set_defaults(handler=status_command)

    harden = commands.add_parser("harden", parents=[common],
                                 help="check that the NVIDIA driver keeps the GPUs' locks and that renters "
                                 "have no way in but their own sshd, and say how to fix it; changes nothing "
                                 "without --apply")
    harden.add_argument("--apply", action="store_true", help=f"write the fix to {MODPROBE_FILE}, the host "
                        "sshd's drop-in (after sshd -t) and the cron and at deny files")
    harden.add_argument("--driver-params", type=Path, default=DRIVER_PARAMS, help=argparse.SUPPRESS)
    harden.add_argument("--modprobe-file", type=Path, default=MODPROBE_FILE, help=argparse.SUPPRESS)
    harden.set_defaults(handler=harden_command)
    return parser


def logging_setup() -> None:
    # journald stamps every line itself; a terminal gets the time.
    stamp = "" if os.environ.get("JOURNAL_STREAM") else "%(asctime)s "
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"{stamp}%(levelname)s %(name)s: %(message)s")


def agent_build(config: AgentConfig, *, timeout: float | None = None, isolation: bool = True) -> Agent:
    """The service's agent; without `isolation`, one that sends no isolation report and has no
    container mode (enroll's token check, which must not wait for a container runtime's answer)."""
    state_dir = config.state_path()
    client = ExchangeClient(url=config.url, token=config.token,
                            **({"timeout": timeout} if timeout is not None else {}))
    device_dir = Path(config.device_dir)
    sandboxes = Sandboxes.detect(state_dir=state_dir, device_dir=device_dir, base=config.cgroup_base)
    sshd = RentalSshd(settings=sshd_settings(config))
    settings = isolation_settings(config)
    # Looked for once, here: the first report takes this answer rather than asking again.
    found = runtime_find(settings) if isolation else None
    containers = container_mode_build(config, found=found, port_book=sshd.ports, settings=settings) \
        if found else None
    reconciler = Reconciler(system=UnixSystem(), store=StateStore(state_dir=state_dir), device_dir=device_dir,
                            sandboxes=sandboxes, sshd=sshd,
                            containers=containers.reconciler if containers else None)
    return Agent(config=config, client=client, reconciler=reconciler, status=StatusStore(state_dir=state_dir),
                 isolation=isolation_reporter_build(config, reconciler=reconciler, containers=containers)
                 if isolation else None)


def container_mode_build(config: AgentConfig, *, found: RuntimeFound, port_book: PortBook,
                         settings: IsolationSettings) -> ContainerMode:
    """The runtime that answered, with GPUs by UUID its way, the disk limited where its storage
    enforces it, and the rentals' containers on ports of the seller's range, from the book the
    rentals' sshds use."""
    driver, root = found.storage()
    runtime = ContainerRuntime(binary=found.binary, gpu_mode=found.gpu_mode(),
                               timeout=config.runtime_timeout_seconds, device_dir=Path(config.device_dir),
                               storage_quota=storage_quota_read(driver=driver, root=root,
                                                                mountinfo=settings.mountinfo))
    reconciler = ContainerReconciler(
        runtime=runtime, templates=container_templates_read(config.container_templates),
        state_dir=config.state_path(), listen_address=config.container_listen_address,
        ports=range(config.ssh_port_first, config.ssh_port_last + 1), port_book=port_book,
        # The driver's version file sits beside its parameters (/proc/driver/nvidia/).
        driver_version=lambda: driver_version_read(Path(config.driver_params).with_name("version")),
        puller=TemplatePuller(runtime=runtime))
    LOG.info("container mode with %s %s (GPUs by %s, disk %s)", found.name, found.version, runtime.gpu_mode,
             "limited" if runtime.storage_quota else "not limited")
    return ContainerMode(found=found, runtime=runtime, reconciler=reconciler)


def isolation_settings(config: AgentConfig) -> IsolationSettings:
    return IsolationSettings(state_dir=config.state_path(), device_dir=Path(config.device_dir),
                             driver_params=Path(config.driver_params),
                             report_seconds=config.isolation_minutes * 60.0,
                             runtime_timeout_seconds=float(config.runtime_timeout_seconds))


def isolation_reporter_build(
    config: AgentConfig, *, reconciler: Reconciler | None = None, containers: ContainerMode | None = None
) -> IsolationReporter:
    """The isolation report's measurements on this host, with the configuration's settings; the
    sandbox and login facts are the reconciler's sandboxes' and sshds' own probes, the container
    object the container mode's."""
    settings = isolation_settings(config)
    if reconciler is None:
        return IsolationReporter(settings=settings, containers=containers)
    return IsolationReporter(
        settings=settings, disproved=reconciler.disproved,
        sandbox_facts=(lambda: sandbox_facts(reconciler.sandboxes)) if reconciler.sandboxes else None,
        login_facts=(lambda: login_facts(sshd=reconciler.sshd, usernames=reconciler.managed))
        if reconciler.sshd else None,
        containers=containers,
    )


def sshd_settings(config: AgentConfig) -> SshdSettings:
    return SshdSettings(
        state_dir=config.state_path(), run_dir=Path(config.run_dir), listen_address=config.ssh_listen_address,
        port_first=config.ssh_port_first, port_last=config.ssh_port_last,
        host_config=Path(config.host_sshd_config), host_drop_in=Path(config.host_sshd_drop_in),
        cron_deny=Path(config.cron_deny), at_deny=Path(config.at_deny),
    )


# enroll ---------------------------------------------------------------------------------------

def enroll_command(arguments: argparse.Namespace) -> int:
    first, _dash, last = arguments.ssh_ports.partition("-")
    if not (first.isdigit() and last.isdigit()):
        raise ConfigError(f"--ssh-ports {arguments.ssh_ports!r} is not a range like 41000-41099.")
    ssh_port_first, ssh_port_last = ssh_ports_check(int(first), int(last))
    config = AgentConfig(url=url_check(arguments.url), token=token_check(arguments.token),
                         heartbeat_seconds=max(5, arguments.heartbeat_seconds),
                         remove_home=arguments.remove_home, state_dir=arguments.state_dir,
                         ssh_port_first=ssh_port_first, ssh_port_last=ssh_port_last)
    config_path = config_path_resolve(explicit=getattr(arguments, "config", None))
    enrolled_before = config_path.exists()
    print(f"Checking the token {token_hint(config.token)} with {config.url}...")
    try:
        answer = agent_build(config, isolation=False).heartbeat()
    except ProblemError as problem:
        print(f"The exchange refused it ({problem.status}): {problem.title or problem.code}", file=sys.stderr)
        if problem.detail and problem.detail != problem.title:
            print(problem.detail, file=sys.stderr)
        return 2
    except ExchangeUnreachable as error:
        print(f"The exchange could not be reached: {error.reason}", file=sys.stderr)
        return 2
    logins = answer.get("logins")
    print(f"Enrolled: this machine is server {answer.get('server_id')} of the exchange, which asks for "
          f"{len(logins) if isinstance(logins, list) else 0} logins and a heartbeat every "
          f"{answer.get('heartbeat_seconds', config.heartbeat_seconds)} s.")
    config_save(path=config_path, config=config)
    print(f"Saved the configuration in {config_path} (readable by root only).")
    unit_path = arguments.unit_dir / UNIT_NAME
    public_file_write(path=unit_path, text=unit_text(config_path=config_path))
    # The host's own sshd serves no rental (each has its own): `harden --apply` closes it to them.
    print(f"Wrote {unit_path}. Rentals log in on ports {config.ssh_port_first}-{config.ssh_port_last}: "
          "open them in the firewall, and run `everx-agent harden`.")
    return service_start(restart=enrolled_before)


def unit_text(*, config_path: Path) -> str:
    package_parent = Path(__file__).resolve().parent.parent
    command = " ".join(systemd_quote(part) for part in (
        sys.executable, "-m", "everx_agent", "--config", str(config_path), "run"))
    return (
        "# Written by `everx-agent enroll`.\n"
        "[Unit]\n"
        "Description=EverXCloud host agent (heartbeats and rental logins)\n"
        "Wants=network-online.target\n"
        "After=network-online.target\n\n"
        "[Service]\n"
        "Type=simple\n"
        "User=root\n"
        # The package may have been copied rather than installed: it is found where it is now.
        f"Environment={systemd_quote('PYTHONPATH=' + str(package_parent))}\n"
        f"ExecStart={command}\n"
        "Restart=always\n"
        "RestartSec=5\n"
        # systemctl stop: SIGTERM to the agent alone, so that a useradd under way finishes.
        "KillMode=mixed\n\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def systemd_quote(word: str) -> str:
    if word and all(character.isalnum() or character in "/._-=:,+@" for character in word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def public_file_write(*, path: Path, text: str) -> None:
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    private_file_write(path=path, text=text, mode=0o644)


def systemctl_find() -> str | None:
    return shutil.which("systemctl", path=SYSTEM_PATH)


def service_start(*, restart: bool) -> int:
    """Enable and start the service; `restart` when it may be running with a previous token."""
    commands = [["daemon-reload"], ["enable", "--now", "everx-agent"]]
    if restart:
        commands.append(["restart", "everx-agent"])
    systemctl = systemctl_find()
    if not SYSTEMD_RUNTIME_DIR.is_dir() or systemctl is None:
        print("systemd is not running here; start the service with:")
        for arguments in commands:
            print("  systemctl " + " ".join(arguments))
        return 0
    for arguments in commands:
        result = subprocess.run([systemctl, *arguments], capture_output=True, text=True,
                                timeout=SYSTEMCTL_TIMEOUT_SECONDS, check=False)
        if result.returncode != 0:
            print(f"systemctl {' '.join(arguments)} failed: {result.stderr.strip()}", file=sys.stderr)
            return 1
    print("The service everx-agent is enabled and running (journalctl -u everx-agent shows its log).")
    return 0


# run ------------------------------------------------------------------------------------------

def run_command(arguments: argparse.Namespace) -> int:
    config = config_load(path=config_path_resolve(explicit=getattr(arguments, "config", None)))
    sandbox_paths_check(config)
    agent = agent_build(config)
    signal.signal(signal.SIGTERM, lambda number, frame: agent.stop())
    return agent.run(once=arguments.once)


# harden ---------------------------------------------------------------------------------------

def harden_command(arguments: argparse.Namespace) -> int:
    """0 when the driver keeps the locks and renters have no way in but their own sshd (or the
    fixes are written), 1 when something needs a fix."""
    driver_kept = driver_harden(arguments, renter_gids=renter_gids())
    config_path = config_path_resolve(explicit=getattr(arguments, "config", None))
    # Before enrolment the default paths; after, the configuration's.
    config = config_load(path=config_path) if config_path.exists() else AgentConfig(url="", token="")
    rentals = StateStore(state_dir=config.state_path()).load()
    text, closed = host_login_harden(settings=sshd_settings(config), usernames=rentals, apply=arguments.apply)
    print(text, end="")
    # The facts only the host's owner can change (kernel, packages, cgroups): what each needs.
    print(facts_advice_text(StatusStore(state_dir=config.state_path()).load().get("isolation")), end="")
    return 0 if driver_kept and closed else 1


def driver_harden(arguments: argparse.Namespace, *, renter_gids: frozenset[int]) -> bool:
    """True when the driver keeps the locks, or the fix is written."""
    permissions = driver_permissions_read(path=arguments.driver_params, renter_gids=renter_gids)
    print(harden_text(permissions), end="")
    if permissions is None or permissions.keeps:
        return True
    if not arguments.apply:
        return False
    arguments.modprobe_file.parent.mkdir(parents=True, exist_ok=True)
    arguments.modprobe_file.write_text(
        "# Written by everx-agent harden: the NVIDIA driver makes and repairs GPU device files as\n"
        "# everx-agent locks them (root:root, mode 0660, one ACL entry for the rental).\n" + MODPROBE_OPTIONS,
        encoding="utf-8",
    )
    arguments.modprobe_file.chmod(0o644)
    print(f"Wrote {arguments.modprobe_file}. Still needed: a reboot, or the nvidia module loaded again.")
    return True


# status ---------------------------------------------------------------------------------------

def status_command(arguments: argparse.Namespace) -> int:
    report = status_read(config_path=config_path_resolve(explicit=getattr(arguments, "config", None)))
    if arguments.json:
        print(json.dumps(report, indent=2))
    else:
        print(status_text(report))
    return 0


def status_read(*, config_path: Path) -> dict[str, Any]:
    try:
        config: AgentConfig | None = config_load(path=config_path)
    except ConfigError:
        config = None
    state_dir = config.state_path() if config else state_dir_resolve()
    reading = gpus_read()
    saved = StatusStore(state_dir=state_dir).load()
    ports = PortBook(state_dir=state_dir)
    return {
        "agent_version": __version__,
        "enrolled": config is not None,
        "url": config.url if config else None,
        "token": token_hint(config.token) if config else None,
        "state_dir": str(state_dir),
        "gpus": reading.gpus,
        "gpu_error": reading.error,
        "disk_free_gb": disk_free_gb(),
        "logins": [
            {"rental_id": login.rental_id, "username": login.username, "gpu_indices": list(login.gpu_indices),
             "created_at": login.created_at, "ready": login.ready, "ssh_port": ports.get(login.username)}
            for login in StateStore(state_dir=state_dir).load().values()
        ],
        "last_answer": saved.get("last_answer"),
        "last_answer_at": saved.get("last_answer_at"),
        "last_error": saved.get("last_error"),
        "clock_skew_seconds": saved.get("clock_skew_seconds"),
        "isolation": saved.get("isolation"),
    }


def status_text(report: dict[str, Any]) -> str:
    lines = [f"everx-agent {report['agent_version']}"]
    if report["enrolled"]:
        lines.append(f"Exchange: {report['url']} (token {report['token']})")
    else:
        lines.append("Not enrolled: run `everx-agent enroll --url URL --token TOKEN`.")
    lines.append(f"GPUs seen by nvidia-smi: {len(report['gpus'])}")
    for gpu in report["gpus"]:
        shown = {key: "n/a" if value is None else value for key, value in gpu.items()}
        lines.append(f"  {shown['index']}: {shown['name']}, {shown['memory_total_mib']} MiB, "
                     f"{shown['temperature_c']} °C, {shown['utilization_percent']} % busy, "
                     f"{shown['ecc_uncorrected']} uncorrected ECC errors")
    if report["gpu_error"]:
        lines.append(f"  nvidia-smi: {report['gpu_error']}")
    lines.append(f"Disk free: {report['disk_free_gb']} GB")
    lines.append(f"Logins managed: {len(report['logins'])}")
    for login in report["logins"]:
        ready = "ready" if login["ready"] else "not ready"
        indices = ",".join(str(index) for index in login["gpu_indices"])
        port = f", SSH port {login['ssh_port']}" if login["ssh_port"] else ""
        lines.append(f"  {login['username']} (rental {login['rental_id']}), GPUs {indices}, "
                     f"since {login['created_at']}, {ready}{port}")
    answer = report["last_answer"]
    if answer:
        wanted = ", ".join(f"{entry['username']} (GPUs {entry['gpu_indices']})" for entry in answer["logins"])
        lines.append(f"Last answer, at {report['last_answer_at']}: server {answer['server_id']}, "
                     f"heartbeat every {answer['heartbeat_seconds']} s, logins wanted: {wanted or 'none'}")
    else:
        lines.append("No answer from the exchange yet.")
    isolation = report["isolation"]
    lines.append(f"Isolation, as last reported: {report_summary(isolation)}" if isolation
                 else "Isolation: not reported yet.")
    error = report["last_error"]
    lines.append(f"Last error, at {error['at']}: {error['text']}" if error else "No error so far.")
    skew = report["clock_skew_seconds"]
    if skew is not None:
        lines.append(f"Clock: {abs(skew):.0f} s {'behind' if skew > 0 else 'ahead of'} the exchange's"
                     + (" (more than 60 s: set up NTP)" if abs(skew) > 60 else ""))
    return "\n".join(lines)
