"""Fake commands on a PATH of the test's own: `docker`, `podman`, `nvidia-ctk`, `nvidia-smi`... Each
records its arguments as one JSON line and answers from the fixtures the test gave it, so a test
checks both what the agent asked and what it made of the answer. `Host` is a stand-in host for
the isolation report: its files, its device folder and its commands."""

import dataclasses
import json
import sys
from pathlib import Path

from everx_agent.isolation import IsolationSettings, isolation_measure, login_facts_unmeasured

from sellers.isolation import isolation_report_check

SCRIPT = """#!{python}
import json, os, sys, time
folder = os.path.dirname(os.path.abspath(sys.argv[0]))
name = os.path.basename(sys.argv[0])
with open(os.path.join(folder, "calls.jsonl"), "a") as log:
    log.write(json.dumps([name, *sys.argv[1:]]) + "\\n")
with open(os.path.join(folder, "answers.json")) as answers:
    answer = json.load(answers)[name].get(json.dumps(sys.argv[1:]))
if answer is None:
    sys.stderr.write(name + ": no such fixture\\n")
    sys.exit(64)
time.sleep(answer["sleep"])
sys.stdout.write(answer["out"])
sys.stderr.write(answer["err"])
sys.exit(answer["code"])
"""


class FakeCommands:
    """`answer("docker", ["info", ...], out=...)` makes `docker` answer those exact arguments;
    `calls()` lists what every fake was run with, in order."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.answers: dict[str, dict[str, dict]] = {}
        self._save()

    @property
    def path(self) -> str:
        return str(self.folder)

    def answer(self, name: str, arguments: list[str], *, out: str = "", err: str = "", code: int = 0,
               sleep: float = 0.0) -> None:
        script = self.folder / name
        if not script.exists():
            script.write_text(SCRIPT.format(python=sys.executable))
            script.chmod(0o755)
        self.answers.setdefault(name, {})[json.dumps(arguments)] = {
            "out": out, "err": err, "code": code, "sleep": sleep}
        self._save()

    def calls(self) -> list[list[str]]:
        log = self.folder / "calls.jsonl"
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]

    def forget_calls(self) -> None:
        (self.folder / "calls.jsonl").unlink(missing_ok=True)

    def _save(self) -> None:
        (self.folder / "answers.json").write_text(json.dumps(self.answers))


# A stand-in host for the isolation report --------------------------------------------------

GPU_A = "GPU-3f2c8a51-7d4e-1b9a-c0d2-5e6f7a8b9c01"
GPU_B = "GPU-5b3c7f4e-9a1d-4c2b-8e6f-0a1b2c3d4e5f"
MIG_QUERY = ["--query-gpu=mig.mode.current", "--format=csv,noheader"]
SAFE_PARAMS = "ModifyDeviceFiles: 1\nDeviceFileUID: 0\nDeviceFileGID: 0\nDeviceFileMode: 432\n"
OPEN_PARAMS = "ModifyDeviceFiles: 1\nDeviceFileUID: 0\nDeviceFileGID: 0\nDeviceFileMode: 438\n"
MEMINFO = "MemTotal:       16314236 kB\nMemFree:         9123456 kB\n"
MEMORY_MIB = 16314236 // 1024
V1_CONTROLLERS = ("cpu", "cpuacct", "memory", "devices", "pids")
XFS_WITH_QUOTAS = "40 1 253:1 / /srv rw,relatime - xfs /dev/vdb rw,attr2,inode64,logbufs=8,prjquota"
NO_SANDBOX = {"backend": "v1", **dict.fromkeys(
    ("device_cgroup", "cpu_limited", "memory_limited", "processes_limited", "disk_limited", "tmp_private",
     "processes_hidden"), False)}


def v1_lines(controllers=V1_CONTROLLERS) -> list[str]:
    lines = ["22 1 0:20 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs rw,mode=755"]
    lines += [f"{30 + number} 22 0:{30 + number} / /sys/fs/cgroup/{name} rw,relatime shared:{number} - "
              f"cgroup cgroup rw,{name}" for number, name in enumerate(controllers)]
    return lines


class Host:
    """The stand-in host: `settings` measure it, `commands` are its fake programs."""

    def __init__(self, folder):
        self.folder = folder
        self.devices = folder / "dev"
        self.devices.mkdir(parents=True)
        (folder / "params").write_text(SAFE_PARAMS)
        (folder / "meminfo").write_text(MEMINFO)
        self.mounts(*v1_lines(), XFS_WITH_QUOTAS)
        self.commands = FakeCommands(folder / "bin")
        self.commands.answer("nvidia-smi", MIG_QUERY, out="Disabled\nDisabled\n")
        self.settings = IsolationSettings(
            state_dir=folder / "state", device_dir=self.devices, driver_params=folder / "params",
            meminfo=folder / "meminfo", mountinfo=folder / "mountinfo", systemd_dir=folder / "run-systemd",
            search_path=self.commands.path, runtime_timeout_seconds=0.5, command_timeout_seconds=5.0,
        )

    def mounts(self, *lines: str) -> None:
        (self.folder / "mountinfo").write_text("".join(line + "\n" for line in lines))

    def measure(self, *, gpu_uuids=(GPU_A, GPU_B), sandbox_facts=None, login_facts=login_facts_unmeasured,
                **settings) -> dict:
        chosen = dataclasses.replace(self.settings, **settings)
        report = isolation_measure(chosen, gpu_uuids=gpu_uuids, login_facts=login_facts,
                                   sandbox_facts=sandbox_facts or (lambda: dict(NO_SANDBOX)))
        isolation_report_check({**report, "server_id": 3}, server_id=3)  # what the exchange accepts
        return report
