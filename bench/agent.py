"""Benchmark 6: the host agent on this machine, as root, with the real Unix side: rental users,
their sandboxes (cgroup groups, loop-mounted home images, private /tmp), an sshd per rental on
loopback ports, GPU nodes locked with ACLs, and a fake `nvidia-smi` on its PATH (no GPUs here).

1. The agent built as `everx-agent run` builds it (main.agent_build), its exchange played by an
   object answering each heartbeat with the same desired state: 8 rentals, one GPU each, on a
   server of 12 stand-in GPU nodes (`mknod c 195 N`) in a folder of the bench's.
2. **Unchanged reconcile**: the pass that follows every heartbeat, with nothing to do, `passes`
   times; an audit hook counts every process it starts (there must be none). Baseline: `os.stat`
   and the ACL's `getxattr` of the 12 nodes, the least such a pass must read.
3. **Device check**: the watch's pass (every 2 s between heartbeats) over the 12 nodes, `checks`
   times. Baseline: the same raw reads.
4. **CPU**: the agent's service for `cpu_seconds` (300 in the full run): a heartbeat every 30 s
   with its reconcile, isolation report and `nvidia-smi`, the device watch every 2 s; the CPU time
   of the agent's process and of the commands it ran, against the wall time (one core).
5. **SSH ready**: a ninth rental added to the desired state, `ssh_rounds` times: from the start of
   the pass that creates it (user, group, home image, sshd) to its sshd's banner on its port, the
   moment the exchange calls it ready. Baseline: a plain sshd started by hand until its banner.
6. **Container ready**: where Podman and the cached test image are (tests/agent/podman_image.py
   builds it in `make test`), a container rental from that image, `ssh_rounds` times, from the
   start of its pass to the banner. Baseline: `podman run` of the same image by hand.

Targets (the issue's): reconcile p99 < 20 ms and no process started; device check p99 < 1 ms;
CPU < 1 % of a core; SSH within 2 s; container within 10 s. Without root, sshd or useradd the
benchmark says why it skipped; everything it made (users, groups, mounts, loop devices, processes,
folders) is taken away at the end, also when it fails.
"""

import contextlib
import os
import random
import resource
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from .common import ROOT, child_arguments, peak_rss_mb, percentile, result_write, rounded, say

sys.path.insert(0, str(ROOT / "agent" / "src"))

from everx_agent.config import AgentConfig  # noqa: E402 (after the agent's source is on the path)
from everx_agent.containers import ContainerReconciler, template_read  # noqa: E402
from everx_agent.devices import ACL_XATTR  # noqa: E402
from everx_agent.loop import DeviceWatch  # noqa: E402
from everx_agent.main import agent_build  # noqa: E402
from everx_agent.sandbox import cgroup_mounts  # noqa: E402
from everx_agent.sshd import port_bindable  # noqa: E402
from everx_agent.system import SYSTEM_PATH, UnixSystem  # noqa: E402

from tests.agent.podman_image import (  # noqa: E402
    IMAGE_TAR,
    NETWORK,
    SSHD_COMMAND,
    SSHD_CONFIG,
    Podman,
    podman_missing,
)

GPUS, RENTALS = 12, 8
CONTROL_NODES = {"nvidiactl": 255, "nvidia-uvm": 0, "nvidia-uvm-tools": 1, "nvidia-modeset": 254}
GPU_MAJOR, UVM_MAJOR = 195, 510
LIMITS = {"cpu_cores": 1, "memory_mib": 256, "disk_gb": 1, "processes": 64}
HEARTBEAT_SECONDS = 30
TARGETS = {"reconcile_p99_ms": 20.0, "check_p99_ms": 1.0, "cpu_percent": 1.0, "ssh_s": 2.0,
           "container_s": 10.0}
# Processes started, as Python's audit events name them (subprocess, os.system, exec, spawn, fork).
PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                            "os.fork", "os.forkpty"})
BANNER_TIMEOUT_SECONDS = 30.0


class ProcessCounter:
    """Counts the processes this one starts while `counting` (an audit hook cannot be removed:
    it is installed once and switched)."""

    def __init__(self):
        self.counting = False
        self.started: list[str] = []
        sys.addaudithook(self._hook)

    def _hook(self, event: str, arguments: tuple) -> None:
        if self.counting and event in PROCESS_EVENTS:
            self.started.append(f"{event} {arguments[:2]!r}"[:200])

    @contextlib.contextmanager
    def watching(self):
        self.started, self.counting = [], True
        try:
            yield self
        finally:
            self.counting = False


def uuid_of(index: int) -> str:
    return f"GPU-00000000-bench-0000-0000-{index:012d}"


def public_key() -> str:
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    return key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def login_entry(rental_id: int, index: int, key: str, **extra) -> dict:
    return {"rental_id": rental_id, "username": f"evx-{rental_id}", "ssh_public_key": f"{key} bench",
            "gpu_indices": [index], "gpu_uuids": [uuid_of(index)], "limits": LIMITS, **extra}


def free_range(count: int) -> int:
    """The first of `count` loopback ports in a row nobody holds."""
    for _attempt in range(200):
        # Below the kernel's ephemeral range (32768-60999), where the benchmarks before this one
        # leave thousands of connections waiting out TIME_WAIT.
        first = random.randrange(20000, 32000)
        if all(port_bindable("127.0.0.1", port) for port in range(first, first + count)):
            return first
    raise RuntimeError("no free range of loopback ports")


def banner_wait(port: int, *, since: float) -> float:
    """Seconds from `since` until an SSH banner is read on the loopback port (a listener that
    accepts and closes, as slirp4netns does before the container's sshd is up, is tried again)."""
    deadline = since + BANNER_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            probe.settimeout(2)
            try:
                probe.connect(("127.0.0.1", port))
                if probe.recv(64).startswith(b"SSH-"):
                    return time.monotonic() - since
            except OSError:
                pass
        time.sleep(0.005)
    raise RuntimeError(f"no SSH banner on port {port} within {BANNER_TIMEOUT_SECONDS:.0f} s")


def raw_reads(nodes: list[Path]) -> None:
    """The least a device pass reads: each node's inode and ACL."""
    for node in nodes:
        os.stat(node)
        with contextlib.suppress(OSError):  # ENODATA: no ACL
            os.getxattr(node, ACL_XATTR)


def timings(function, rounds: int) -> list[float]:
    """Milliseconds of each of `rounds` calls."""
    found = []
    for _ in range(rounds):
        started = time.perf_counter()
        function()
        found.append((time.perf_counter() - started) * 1000)
    return found


def figures(milliseconds: list[float]) -> dict:
    mean = sum(milliseconds) / len(milliseconds)
    return {"rounds": len(milliseconds), "rate": rounded(1000 / mean, 1) if mean else None,
            "p50_ms": rounded(percentile(milliseconds, 0.5), 4),
            "p99_ms": rounded(percentile(milliseconds, 0.99), 4)}


def spread(seconds: list[float]) -> dict:
    """Rounds measured in seconds: each, the median and the slowest."""
    return {"seconds": [rounded(value, 3) for value in seconds],
            "p50_s": rounded(percentile(seconds, 0.5), 3),
            "max_s": rounded(max(seconds), 3)}


class FakeExchange:
    """The exchange's side of the heartbeat: the same desired state every time."""

    url = "http://127.0.0.1/bench"

    def __init__(self, *, server_id: int):
        self.server_id = server_id
        self.logins: list[dict] = []
        self.heartbeats = 0

    def heartbeat(self, body: dict) -> dict:
        self.heartbeats += 1
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return {"server_id": self.server_id, "server_time": now,
                "heartbeat_seconds": HEARTBEAT_SECONDS, "remove_home": True, "logins": list(self.logins)}


class PlacedSystem(UnixSystem):
    """The real Unix side, with homes in the bench's folder rather than /home/evx-<id>."""

    def __init__(self, place: Path):
        super().__init__()
        self.place = place

    def user_create(self, *, username: str, comment: str) -> None:
        self._run("useradd", ["--create-home", "--home-dir", str(self.place / "homes" / username), "--shell",
                              "/bin/sh", "--password", "*", "--comment", comment, username])


class Place:
    """The bench's folder (in /var/lib: every sandbox covers /tmp with its own), its cgroup parent
    group, its programs (fake nvidia-smi; container runtimes that never answer, so the shared-server
    agent is measured) and, at the end, everything its rentals left taken away."""

    def __init__(self):
        self.folder = Path("/var/lib") / f"everx-bench-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.cgroup_base = self.folder.name
        self.usernames: set[str] = set()

    def __enter__(self) -> "Place":
        self.folder.mkdir(mode=0o711)
        self.folder.chmod(0o711)  # the renters' sshds read their keys in it, and open the nodes
        (self.folder / "homes").mkdir(mode=0o755)
        self.bin = self.folder / "bin"
        self.bin.mkdir()
        for runtime in ("docker", "podman"):
            (self.bin / runtime).write_text("#!/bin/sh\necho 'no daemon in this benchmark' >&2\nexit 1\n")
        gpu_lines = "\n".join(f"{index}, {uuid_of(index)}, NVIDIA H100 80GB HBM3, 81559, 34, 0, 0"
                              for index in range(GPUS))
        (self.bin / "nvidia-smi").write_text(
            "#!/bin/sh\ncase \"$1\" in\n--query-gpu=mig.mode.current) echo Disabled ;;\n"
            f"--query-compute-apps=*) ;;\n*) cat <<'EOF'\n{gpu_lines}\nEOF\n;;\nesac\n")
        for program in self.bin.iterdir():
            program.chmod(0o755)
        os.environ["PATH"] = f"{self.bin}:{os.environ.get('PATH', SYSTEM_PATH)}"
        self.devices = self.folder / "dev"
        self.devices.mkdir(mode=0o755)
        for index in range(GPUS):
            os.mknod(self.devices / f"nvidia{index}", 0o666 | stat.S_IFCHR, os.makedev(GPU_MAJOR, index))
        for name, minor in CONTROL_NODES.items():
            major = GPU_MAJOR if name in ("nvidiactl", "nvidia-modeset") else UVM_MAJOR
            os.mknod(self.devices / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        return self

    def gpu_nodes(self) -> list[Path]:
        return [self.devices / f"nvidia{index}" for index in range(GPUS)]

    def config(self) -> AgentConfig:
        first = free_range(16)
        return AgentConfig(
            url=FakeExchange.url, token=f"evxa_{secrets.token_urlsafe(30)}", remove_home=True,
            state_dir=str(self.folder / "state"), device_dir=str(self.devices), cgroup_base=self.cgroup_base,
            ssh_port_first=first, ssh_port_last=first + 15, run_dir=str(self.folder / "run"),
            ssh_listen_address="127.0.0.1", host_sshd_config=str(self.folder / "host_sshd_config"),
            host_sshd_drop_in=str(self.folder / "sshd_config.d" / "50-everx.conf"),
            cron_deny=str(self.folder / "cron.deny"), at_deny=str(self.folder / "at.deny"),
            driver_params=str(self.folder / "no-driver"),
        )

    def __exit__(self, *exc) -> None:
        """Processes before the mounts they hold, mounts before their loop devices, processes
        before their groups; then the users and the folder."""
        for pid_file in (self.folder / "run" / "sshd").glob("*.pid"):
            with contextlib.suppress(ValueError, OSError):
                os.kill(int(pid_file.read_text()), 9)
        mounts = sorted(set(cgroup_mounts(Path("/proc/self/mounts").read_text())[0].values()))
        groups = sorted((path for mount in mounts if (mount / self.cgroup_base).exists()
                         for path in [mount / self.cgroup_base, *(mount / self.cgroup_base).rglob("*")]
                         if path.is_dir()), key=lambda path: -len(path.parts))
        for group in groups:
            with contextlib.suppress(OSError):
                for pid in (group / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        os.kill(int(pid), 9)
        for line in reversed(Path("/proc/self/mountinfo").read_text().splitlines()):
            point = line.split()[4]
            if point.startswith(str(self.folder)):
                subprocess.run(["umount", "-l", point], check=False, capture_output=True)
        for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
            with contextlib.suppress(OSError):
                if backing.read_text().startswith(str(self.folder)):
                    subprocess.run(["losetup", "-d", f"/dev/{backing.parent.parent.name}"], check=False,
                                   capture_output=True)
        time.sleep(0.1)
        for group in groups:
            with contextlib.suppress(OSError):
                group.rmdir()
        for name in self.usernames:
            subprocess.run(["userdel", name], check=False, capture_output=True)
        shutil.rmtree(self.folder, ignore_errors=True)


def shared_server(place: Place, config: dict, counter: ProcessCounter) -> dict:
    """Cases 2 to 5 on one agent."""
    agent = agent_build(place.config())
    agent.reconciler.system = PlacedSystem(place.folder)
    exchange = FakeExchange(server_id=random.randrange(10**6, 10**7))
    agent.client = exchange
    first = random.randrange(10**9, 9 * 10**9)
    key = public_key()
    exchange.logins = [login_entry(first + number, number, key) for number in range(RENTALS)]
    place.usernames.update(entry["username"] for entry in exchange.logins)
    result: dict = {}
    try:
        started = time.monotonic()
        agent.step()
        reports = agent.reconciler.reports()
        ready = [report for report in reports if report["state"] == "ready"]
        if len(ready) != RENTALS:
            raise RuntimeError(f"the {RENTALS} rentals are not ready: {reports}")
        result["setup_s"] = rounded(time.monotonic() - started, 2)
        say(f"{RENTALS} rentals made ready in {result['setup_s']} s (users, groups, home images, sshds)")

        entries, nodes = exchange.logins, place.gpu_nodes()
        passes = timings(lambda: agent.reconciler.reconcile(entries=entries, remove_home=True), 3)  # warm
        with counter.watching() as watched:
            passes = timings(lambda: agent.reconciler.reconcile(entries=entries, remove_home=True),
                             config["passes"])
        result["reconcile"] = {**figures(passes), "processes": len(watched.started),
                               "started": watched.started[:5],
                               "baseline": figures(timings(lambda: raw_reads(nodes), config["passes"]))}
        with counter.watching() as watched:
            checks = timings(agent.reconciler.devices_check, config["checks"])
        result["check"] = {**figures(checks), "processes": len(watched.started),
                           "baseline": figures(timings(lambda: raw_reads(nodes), config["checks"]))}
        say(f"unchanged reconcile: p99 {result['reconcile']['p99_ms']:.2f} ms, "
            f"{result['reconcile']['processes']} processes; "
            f"device check: p99 {result['check']['p99_ms']:.3f} ms")

        result["cpu"] = cpu_measure(agent, seconds=config["cpu_seconds"])
        say(f"CPU: {result['cpu']['percent']:.3f} % of a core over {result['cpu']['seconds']:.0f} s")

        rounds = []
        for number in range(config["ssh_rounds"]):
            rental_id = first + RENTALS + number
            entry = login_entry(rental_id, RENTALS, key)
            place.usernames.add(entry["username"])
            began = time.monotonic()
            agent.reconciler.reconcile(entries=[*entries, entry], remove_home=True)
            port = agent.reconciler.sshd.port_of(entry["username"])
            if port is None:
                raise RuntimeError(f"the ninth rental has no port: {agent.reconciler.reports()}")
            rounds.append(banner_wait(port, since=began))
            agent.reconciler.reconcile(entries=entries, remove_home=True)
        result["ssh"] = {**spread(rounds), "baseline": plain_sshd(place, rounds=config["ssh_rounds"])}
        say(f"SSH ready: at most {result['ssh']['max_s']:.2f} s (plain sshd "
            f"{result['ssh']['baseline']['max_s']:.2f} s)")
    finally:
        exchange.logins = []
        with contextlib.suppress(Exception):
            agent.reconciler.reconcile(entries=[], remove_home=True)
    return result


def cpu_measure(agent, *, seconds: float) -> dict:
    """The service as `Agent.run` runs it, for `seconds`: heartbeats with their reconcile, and the
    device watch between them."""
    watch = DeviceWatch(reconciler=agent.reconciler)
    own, children = time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    watch.start()
    try:
        while time.monotonic() - started < seconds:
            delay = agent.step()
            time.sleep(max(0.0, min(delay, seconds - (time.monotonic() - started))))
    finally:
        watch.stop()
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = time.process_time() - own
    used += (after.ru_utime - children.ru_utime) + (after.ru_stime - children.ru_stime)
    return {"seconds": rounded(wall, 1), "cpu_seconds": rounded(used, 4),
            "percent": rounded(100 * used / wall, 4), "heartbeats": agent.client.heartbeats}


def plain_sshd(place: Place, *, rounds: int) -> dict:
    """OpenSSH's server started by hand on a free loopback port until its banner."""
    folder = place.folder / "plain-sshd"
    folder.mkdir(exist_ok=True)
    host_key = folder / "host_ed25519"
    if not host_key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    found = []
    for _ in range(rounds):
        port = free_range(1)
        config = folder / "sshd_config"
        config.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
                          f"PidFile {folder / 'sshd.pid'}\nUsePAM no\nPasswordAuthentication no\n")
        began = time.monotonic()
        process = subprocess.Popen([shutil.which("sshd", path=SYSTEM_PATH), "-D", "-f", str(config)])
        try:
            found.append(banner_wait(port, since=began))
        finally:
            process.terminate()
            process.wait(timeout=10)
    return spread(found)


def container(place: Place, config: dict) -> dict:
    """Case 6: a container rental from the cached image, and `podman run` by hand."""
    missing = podman_missing()
    if missing:
        return {"skipped": f"needs {', '.join(missing)}"}
    if not IMAGE_TAR.exists():
        return {"skipped": "no cached test image (the container test of `make test` builds it)"}
    run_folder = Path(tempfile.mkdtemp(prefix="everx-bench-podman-"))
    podman = Podman(place.folder / "podman", run_folder)
    try:
        image = podman.image_import(IMAGE_TAR)
        template = template_read({"image": image, "command": list(SSHD_COMMAND),
                                  "files": {"/etc/ssh/everx_sshd_config": SSHD_CONFIG}})
        ports = range(first := free_range(8), first + 8)
        containers = ContainerReconciler(runtime=podman.runtime(place.devices), templates=[template],
                                         state_dir=place.folder / "container-state",
                                         listen_address="127.0.0.1", ports=ports)
        rounds, key = [], public_key()
        for number in range(config["ssh_rounds"]):
            entry = login_entry(700 + number, 0, key, isolation="container")
            began = time.monotonic()
            _, changes = containers.reconcile(entries=[entry])
            reports = containers.reports()
            if not changes or reports[0].get("ssh_port") is None:
                raise RuntimeError(f"the container rental did not start: {reports}")
            rounds.append(banner_wait(reports[0]["ssh_port"], since=began))
            containers.reconcile(entries=[])
        baseline = []
        for _ in range(config["ssh_rounds"]):
            port = free_range(1)
            began = time.monotonic()
            podman("run", "--detach", "--name", "evx-bench-plain", "--network", NETWORK, "--publish",
                   f"127.0.0.1:{port}:22", image, "/bin/sh", "-c",
                   "mkdir -p /run/sshd && exec /usr/sbin/sshd -D -e", check=True)
            baseline.append(banner_wait(port, since=began))
            podman("rm", "--force", "--time", "0", "evx-bench-plain", check=True)
        return {**spread(rounds), "baseline": spread(baseline)}
    finally:
        podman("rm", "--all", "--force", "--time", "0", check=False)
        shutil.rmtree(place.folder / "podman", ignore_errors=True)
        shutil.rmtree(run_folder, ignore_errors=True)


def skipped_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (users, groups, mounts and device nodes of its own)"
    for program in ("sshd", "ssh-keygen", "useradd", "mkfs.ext4", "losetup"):
        if shutil.which(program, path=SYSTEM_PATH) is None:
            return f"needs {program}"
    return None


def targets(result: dict) -> list[dict]:
    checks = [
        ("reconcile p99 ms", result["reconcile"]["p99_ms"], f"< {TARGETS['reconcile_p99_ms']:g}",
         result["reconcile"]["p99_ms"] < TARGETS["reconcile_p99_ms"]),
        ("reconcile processes", result["reconcile"]["processes"], "0", result["reconcile"]["processes"] == 0),
        ("check p99 ms", result["check"]["p99_ms"], f"< {TARGETS['check_p99_ms']:g}",
         result["check"]["p99_ms"] < TARGETS["check_p99_ms"]),
        ("CPU % of a core", result["cpu"]["percent"], f"< {TARGETS['cpu_percent']:g}",
         result["cpu"]["percent"] < TARGETS["cpu_percent"]),
        ("SSH ready s", result["ssh"]["max_s"], f"< {TARGETS['ssh_s']:g}",
         result["ssh"]["max_s"] < TARGETS["ssh_s"]),
    ]
    if "max_s" in result["container"]:
        checks.append(("container ready s", result["container"]["max_s"], f"< {TARGETS['container_s']:g}",
                       result["container"]["max_s"] < TARGETS["container_s"]))
    return [{"figure": figure, "value": value, "target": target, "met": met}
            for figure, value, target, met in checks]


def main() -> None:
    config, out = child_arguments()
    reason = skipped_reason()
    if reason:
        say(f"skipped: {reason}")
        result_write(out, {"skipped": reason, "problems": []})
        return
    counter = ProcessCounter()
    with Place() as place:
        result = shared_server(place, config, counter)
        result["container"] = container(place, config)
    if "skipped" in result["container"]:
        say(f"container: skipped: {result['container']['skipped']}")
    else:
        say(f"container ready: at most {result['container']['max_s']:.2f} s (podman run "
            f"{result['container']['baseline']['max_s']:.2f} s)")
    result.update(targets=targets(result), problems=[], peak_rss_mb={"bench process": peak_rss_mb()},
                  gpus=GPUS, rentals=RENTALS)
    result_write(out, result)


if __name__ == "__main__":
    main()
