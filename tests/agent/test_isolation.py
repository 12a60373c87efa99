"""The isolation report (everx_agent.isolation) measured on stand-ins: a mountinfo, a meminfo and a
driver parameter file of the test's, a device folder in its temporary folder, and fake `docker`,
`podman`, `nvidia-ctk` and `nvidia-smi` on a PATH of its own. Every report it builds passes the
exchange's own check (sellers.isolation.isolation_report_check)."""

import json
import logging
import os
import shutil
import stat
import time

import pytest
from everx_agent.isolation import FACTS, IsolationReporter, backend_detect, devices_locked_check, mounts_read
from everx_agent.sandbox import SandboxRefused
from everx_agent.system import DisprovedFacts

from sellers.isolation import isolation_report_check
from tests.agent.fakes import (
    GPU_A,
    GPU_B,
    MEMORY_MIB,
    MIG_QUERY,
    NO_SANDBOX,
    OPEN_PARAMS,
    SAFE_PARAMS,
    XFS_WITH_QUOTAS,
    Host,
    v1_lines,
)

DOCKER_INFO = ["info", "--format", "{{json .}}"]
PODMAN_INFO = ["info", "--format", "json"]


def podman_info(*, version="4.3.1", driver="overlay", backing="xfs", root="/srv/containers/storage") -> str:
    return json.dumps({"host": {"cgroupVersion": "v1"},
                       "version": {"APIVersion": version, "Version": version},
                       "store": {"graphDriverName": driver, "graphRoot": root,
                                 "graphStatus": {"Backing Filesystem": backing, "Supports d_type": "true"}}})


def docker_info(*, runtimes=("runc", "nvidia"), backing="xfs", root="/srv/docker") -> str:
    return json.dumps({"ServerVersion": "27.3.1", "Runtimes": {name: {"path": name} for name in runtimes},
                       "Driver": "overlay2", "DriverStatus": [["Backing Filesystem", backing],
                                                             ["Supports d_type", "true"]],
                       "DockerRootDir": root})


CTK_VERSION = "NVIDIA Container Toolkit CLI version 1.17.8\ncommit: 8ad4f4b5ff1fd3a4f0c3c2a6b1a3d1f2\n"


def cdi_list(*uuids: str) -> str:
    devices = ["nvidia.com/gpu=0", *(f"nvidia.com/gpu={uuid}" for uuid in uuids), "nvidia.com/gpu=all"]
    return f'time="2026-12-04T21:00:00Z" level=info msg="Found {len(devices)} CDI devices"\n' + "\n".join(
        devices) + "\n"


@pytest.fixture
def host(tmp_path) -> Host:
    return Host(tmp_path)


def test_a_host_with_podman_cdi_and_xfs_quotas_is_reported_as_measured(host):
    host.commands.answer("podman", PODMAN_INFO, out=podman_info())
    host.commands.answer("nvidia-ctk", ["--version"], out=CTK_VERSION)
    host.commands.answer("nvidia-ctk", ["cdi", "list"], out=cdi_list(GPU_A, GPU_B))

    report = host.measure()

    assert report == {
        "version": 1,
        "hardware": {"cpu_cores": len(os.sched_getaffinity(0)), "memory_mib": MEMORY_MIB,
                     "disk_gb": shutil.disk_usage(host.folder).total // 10**9},
        "backend": "v1",
        "facts": {**dict.fromkeys(FACTS, False), "devices_locked": True, "driver_keeps_permissions": True},
        "container": {"runtime": "podman", "runtime_version": "4.3.1", "toolkit_version": "1.17.8",
                      "gpus_by_uuid": True, "self_test": False, "disk_limited": True, "templates": []},
    }
    assert host.commands.calls() == [
        ["nvidia-smi", *MIG_QUERY], ["podman", *PODMAN_INFO], ["nvidia-ctk", "--version"],
        ["nvidia-ctk", "cdi", "list"],
    ]
    assert list(report["facts"]) == list(FACTS)
    assert sorted(os.listdir(host.devices)) == []  # the ACL check's scratch file is gone


def test_the_sandbox_and_login_facts_come_from_their_providers(host):
    sandbox = {**NO_SANDBOX, "backend": "systemd", "cpu_limited": True, "memory_limited": True,
               "processes_limited": True, "tmp_private": True, "device_cgroup": "yes"}
    report = host.measure(sandbox_facts=lambda: sandbox,
                          login_facts=lambda: {"login_sandboxed": True, "host_login_closed": 1})

    assert report["backend"] == "systemd"
    held = [name for name, value in report["facts"].items() if value]
    # Only an exact true counts: "yes" and 1 are not measurements.
    assert held == ["devices_locked", "driver_keeps_permissions", "cpu_limited", "memory_limited",
                    "processes_limited", "tmp_private", "login_sandboxed"]


def test_limits_are_never_reported_without_a_cgroup_backend(host):
    sandbox = {**NO_SANDBOX, "backend": "none", "cpu_limited": True, "memory_limited": True,
               "processes_limited": True, "tmp_private": True}
    report = host.measure(sandbox_facts=lambda: sandbox)

    assert report["backend"] == "none"
    assert [report["facts"][name] for name in ("cpu_limited", "memory_limited", "processes_limited",
                                               "tmp_private")] == [False, False, False, True]


def test_a_provider_that_fails_costs_its_facts_only(host, caplog):
    def broken():
        raise RuntimeError("a bug")

    report = host.measure(sandbox_facts=broken, login_facts=broken)

    assert report["backend"] == "v1"  # measured here instead
    assert [name for name, value in report["facts"].items() if value] == \
        ["devices_locked", "driver_keeps_permissions"]
    assert "the sandbox facts could not be measured" in caplog.text
    assert "the login facts could not be measured" in caplog.text


def test_without_the_other_modules_every_sandbox_and_login_fact_is_false(host):
    reporter = IsolationReporter(settings=host.settings)
    report = reporter.report(server_id=None, gpu_uuids=(GPU_A,))

    assert report["server_id"] is None and report["backend"] == "v1"
    assert [name for name, value in report["facts"].items() if value] == \
        ["devices_locked", "driver_keeps_permissions"]
    assert report["container"] is None
    isolation_report_check(report, server_id=3)


# The cgroup backend ---------------------------------------------------------------------------

def unified_root(host, controllers: str):
    root = host.folder / "unified"
    root.mkdir()
    (root / "cgroup.controllers").write_text(controllers + "\n")
    return f"50 22 0:50 / {root} rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate"


def test_systemd_is_the_backend_when_it_runs_and_systemd_run_is_installed(host):
    host.settings.systemd_dir.mkdir()
    assert backend_detect(host.settings, mounts_read(host.settings.mountinfo)) == "v1"  # no systemd-run
    host.commands.answer("systemd-run", ["--version"])
    assert backend_detect(host.settings, mounts_read(host.settings.mountinfo)) == "systemd"


def test_a_cgroup2_root_with_cpu_memory_and_pids_is_v2(host):
    host.mounts(unified_root(host, "cpuset cpu io memory hugetlb pids rdma misc"))
    assert backend_detect(host.settings, mounts_read(host.settings.mountinfo)) == "v2"


def test_a_hybrid_layout_whose_cgroup2_has_no_controllers_is_v1(host):
    # As on the CI machine: v1 controllers, and a cgroup2 "unified" mount with hugetlb only.
    host.mounts(*v1_lines(), unified_root(host, "hugetlb"))
    assert backend_detect(host.settings, mounts_read(host.settings.mountinfo)) == "v1"


@pytest.mark.parametrize("lines", [v1_lines(("cpu", "memory")), [], ["garbage", "1 2 3 - "]])
def test_without_the_three_controllers_there_is_no_backend(host, lines):
    host.mounts(*lines)
    assert backend_detect(host.settings, mounts_read(host.settings.mountinfo)) == "none"


def test_a_mount_point_with_a_space_is_read_back(host):
    host.mounts(r"40 1 253:1 / /srv/my\040disk rw - xfs /dev/vdb rw,prjquota")
    [mount] = mounts_read(host.settings.mountinfo)
    assert (mount.point, mount.fstype, "prjquota" in mount.options) == ("/srv/my disk", "xfs", True)


# Hardware -------------------------------------------------------------------------------------

def test_hardware_unreadable_memory_is_zero_so_the_server_sells_whole(host):
    (host.folder / "meminfo").write_text("MemFree: 1 kB\n")
    assert host.measure()["hardware"]["memory_mib"] == 0
    assert host.measure(meminfo=host.folder / "absent")["hardware"]["memory_mib"] == 0


def test_the_disk_is_the_filesystem_of_the_state_folder_even_before_it_exists(host):
    state = host.folder / "not" / "yet" / "state"
    expected = shutil.disk_usage(host.folder).total // 10**9
    assert host.measure(state_dir=state)["hardware"]["disk_gb"] == expected


# The GPUs' facts ------------------------------------------------------------------------------

def test_a_device_folder_without_acl_support_cannot_lock_gpus(tmp_path, ramfs, caplog):
    assert devices_locked_check(ramfs) is False
    assert os.listdir(ramfs) == []
    assert "cannot be locked: its filesystem has no POSIX ACLs" in caplog.text
    assert devices_locked_check(tmp_path) is True
    assert devices_locked_check(tmp_path / "absent") is False


@pytest.mark.parametrize(("params", "keeps"), [(SAFE_PARAMS, True), (OPEN_PARAMS, False), (None, False)])
def test_the_driver_fact_is_the_harden_check(host, params, keeps):
    if params is None:
        (host.folder / "params").unlink()
    else:
        (host.folder / "params").write_text(params)
    assert host.measure()["facts"]["driver_keeps_permissions"] is keeps


@pytest.mark.parametrize(("answer", "enabled"), [
    ({"out": "Disabled\nEnabled\n"}, True),
    ({"out": "Disabled\nDisabled\n"}, False),
    ({"out": "[N/A]\n"}, False),  # a GPU without MIG
    ({"out": "", "err": "NVIDIA-SMI has failed", "code": 9}, False),
    ({"out": "Enabled\n", "sleep": 10.0}, False),  # hangs past the timeout
])
def test_mig_is_reported_only_when_seen_enabled(host, answer, enabled):
    host.commands.answer("nvidia-smi", MIG_QUERY, **answer)
    assert host.measure(command_timeout_seconds=0.5)["facts"]["mig_enabled"] is enabled


def test_mig_without_nvidia_smi_is_false(host):
    (host.folder / "bin" / "nvidia-smi").unlink()
    assert host.measure()["facts"]["mig_enabled"] is False


# Container mode -------------------------------------------------------------------------------

def test_docker_with_nvidias_runtime_gives_gpus_by_uuid_without_asking_cdi(host):
    host.commands.answer("docker", DOCKER_INFO, out=docker_info())

    container = host.measure()["container"]

    assert container == {"runtime": "docker", "runtime_version": "27.3.1", "toolkit_version": "",
                         "gpus_by_uuid": True, "self_test": False, "disk_limited": True, "templates": []}
    assert [call[0] for call in host.commands.calls()] == ["nvidia-smi", "docker"]


def test_a_docker_client_without_a_daemon_is_no_runtime_and_podman_is_tried(host):
    host.commands.answer("docker", DOCKER_INFO, out='{"ID":"","ServerErrors":["Cannot connect"]}\n',
                         err="Cannot connect to the Docker daemon at unix:///var/run/docker.sock.", code=1)
    assert host.measure()["container"] is None
    host.commands.answer("docker", DOCKER_INFO, out='{"ServerVersion":"","ServerErrors":["Cannot connect"]}')
    assert host.measure()["container"] is None
    host.commands.answer("podman", PODMAN_INFO, out=podman_info())
    assert host.measure()["container"]["runtime"] == "podman"


def test_a_runtime_that_hangs_is_no_container_mode(host, caplog):
    host.commands.answer("docker", DOCKER_INFO, out=docker_info(), sleep=30.0)
    started = time.monotonic()

    assert host.measure()["container"] is None

    assert time.monotonic() - started < 5
    assert "docker info did not answer within 0.5 s: no container mode with it" in caplog.text


@pytest.mark.parametrize("out", ["not json", "[]", podman_info(version=""), podman_info(version="4.3\n1")])
def test_a_runtime_answer_without_a_readable_version_is_no_runtime(host, out):
    host.commands.answer("podman", PODMAN_INFO, out=out)
    assert host.measure()["container"] is None


def test_cdi_must_list_every_gpu_by_uuid(host):
    host.commands.answer("podman", PODMAN_INFO, out=podman_info())
    host.commands.answer("nvidia-ctk", ["cdi", "list"], out=cdi_list(GPU_A))

    assert host.measure()["container"]["gpus_by_uuid"] is False
    assert host.measure(gpu_uuids=(GPU_A,))["container"]["gpus_by_uuid"] is True
    assert host.measure(gpu_uuids=())["container"]["gpus_by_uuid"] is False  # no GPU seen, none exposed


def test_docker_without_nvidias_runtime_falls_back_to_cdi(host):
    host.commands.answer("docker", DOCKER_INFO, out=docker_info(runtimes=("runc",)))
    assert host.measure()["container"]["gpus_by_uuid"] is False  # no nvidia-ctk at all
    host.commands.answer("nvidia-ctk", ["cdi", "list"], out=cdi_list(GPU_A, GPU_B))
    assert host.measure()["container"]["gpus_by_uuid"] is True


@pytest.mark.parametrize(("info", "mount", "limited"), [
    (podman_info(), XFS_WITH_QUOTAS, True),
    (podman_info(), "40 1 253:1 / /srv rw,relatime - xfs /dev/vdb rw,attr2,inode64,noquota", False),
    (podman_info(backing="extfs"), "40 1 253:1 / /srv rw,relatime - ext4 /dev/vdb rw", False),
    (podman_info(driver="vfs"), XFS_WITH_QUOTAS, False),
    (podman_info(root="/var/lib/containers/storage"), XFS_WITH_QUOTAS, False),  # on / (not in the list)
    (docker_info(), XFS_WITH_QUOTAS, True),
    (docker_info(backing="extfs"), XFS_WITH_QUOTAS, False),
])
def test_the_disk_is_limited_only_on_overlay_over_xfs_with_project_quotas(host, info, mount, limited):
    host.mounts(*v1_lines(), mount)
    runtime, arguments = ("docker", DOCKER_INFO) if "ServerVersion" in info else ("podman", PODMAN_INFO)
    host.commands.answer(runtime, arguments, out=info)
    assert host.measure()["container"]["disk_limited"] is limited


def test_an_unreadable_toolkit_version_is_empty(host):
    host.commands.answer("podman", PODMAN_INFO, out=podman_info())
    host.commands.answer("nvidia-ctk", ["--version"], out="something else\n")
    assert host.measure()["container"]["toolkit_version"] == ""


# When it is measured --------------------------------------------------------------------------

class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_report_is_measured_again_only_when_it_may_have_changed(host):
    clock = Clock()
    reporter = IsolationReporter(settings=host.settings, clock=clock)
    first = reporter.report(server_id=None, gpu_uuids=(GPU_A,))
    assert host.commands.calls() == [["nvidia-smi", *MIG_QUERY]]
    host.commands.forget_calls()

    clock.now += 599
    assert reporter.report(server_id=3, gpu_uuids=(GPU_A,)) == {**first, "server_id": 3}
    assert host.commands.calls() == []  # an unchanged host: nothing started

    (host.folder / "params").write_text(OPEN_PARAMS)  # the driver's parameters changed
    assert reporter.report(server_id=3, gpu_uuids=(GPU_A,))["facts"]["driver_keeps_permissions"] is False
    assert len(host.commands.calls()) == 1

    reporter.report(server_id=3, gpu_uuids=(GPU_A, GPU_B))  # a GPU appeared
    assert len(host.commands.calls()) == 2

    clock.now += 600  # the period
    reporter.report(server_id=3, gpu_uuids=(GPU_A, GPU_B))
    assert len(host.commands.calls()) == 3
    reporter.report(server_id=3, gpu_uuids=(GPU_A, GPU_B))
    assert len(host.commands.calls()) == 3


def test_a_gpu_node_made_again_is_measured_again(host):
    if os.geteuid() != 0:
        pytest.skip("making device nodes needs root")
    node = host.devices / "nvidia0"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(195, 0))
    reporter = IsolationReporter(settings=host.settings, clock=Clock())
    reporter.report(server_id=3, gpu_uuids=(GPU_A,))
    reporter.report(server_id=3, gpu_uuids=(GPU_A,))
    assert len(host.commands.calls()) == 1

    time.sleep(0.05)  # the folder's time moves on
    node.unlink()
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(195, 0))  # what udev does on a driver reload
    reporter.report(server_id=3, gpu_uuids=(GPU_A,))
    assert len(host.commands.calls()) == 2


def test_a_changed_report_is_logged_once(host, caplog):
    caplog.set_level(logging.INFO, logger="everx_agent")
    clock = Clock()
    reporter = IsolationReporter(settings=host.settings, clock=clock)
    reporter.report(server_id=3, gpu_uuids=())
    clock.now += 600
    reporter.report(server_id=3, gpu_uuids=())
    assert caplog.text.count("isolation measured: backend v1, facts held: devices_locked, "
                             "driver_keeps_permissions; container mode: none") == 1


@pytest.mark.parametrize("info", [
    {"ServerVersion": "27.3.1", "Runtimes": ["nvidia"], "Driver": ["overlay2"], "DockerRootDir": 7,
     "DriverStatus": [[["Backing Filesystem"], "xfs"], "x"]},
    {"ServerVersion": 27, "Runtimes": None},
    {"ServerVersion": "27.3.1", "DriverStatus": {"Backing Filesystem": "xfs"}, "Driver": "overlay2",
     "DockerRootDir": "/srv/docker"},
])
def test_a_runtime_answer_of_odd_types_gives_a_report_the_exchange_accepts(host, info):
    host.commands.answer("docker", DOCKER_INFO, out=json.dumps(info))
    container = host.measure()["container"]
    assert container is None or (container["gpus_by_uuid"], container["disk_limited"]) == (False, False)


def test_a_measurement_that_fails_keeps_the_last_report_and_never_the_heartbeat(host, caplog, monkeypatch):
    import everx_agent.isolation as isolation

    clock = Clock()
    reporter = IsolationReporter(settings=host.settings, clock=clock)
    original = isolation.isolation_measure
    monkeypatch.setattr(isolation, "isolation_measure", lambda *args, **kwargs: 1 / 0)
    assert reporter.report(server_id=3, gpu_uuids=()) is None

    monkeypatch.setattr(isolation, "isolation_measure", original)
    clock.now += 600
    first = reporter.report(server_id=3, gpu_uuids=())
    monkeypatch.setattr(isolation, "isolation_measure", lambda *args, **kwargs: 1 / 0)
    clock.now += 600
    assert reporter.report(server_id=3, gpu_uuids=()) == first
    assert caplog.text.count("the isolation report could not be measured: the last one stands") == 2


def test_a_fact_a_refused_rental_disproved_is_reported_false_at_the_next_heartbeat(host):
    disproved = DisprovedFacts()
    reporter = IsolationReporter(settings=host.settings, clock=Clock(), disproved=disproved,
                                 sandbox_facts=lambda: {"backend": "v1", **dict.fromkeys(
                                     ("device_cgroup", "cpu_limited", "memory_limited", "processes_limited",
                                      "disk_limited"), True)})
    assert reporter.report(server_id=3, gpu_uuids=(GPU_A,))["facts"]["disk_limited"] is True

    disproved.add(SandboxRefused("the home image could not be mounted: no free loop device",
                                 fact="disk_limited"))
    disproved.add(SandboxRefused("cgroup.procs of rental-5 refused '77': No such process"))  # no fact

    facts = reporter.report(server_id=3, gpu_uuids=(GPU_A,))["facts"]
    assert facts["disk_limited"] is False and facts["memory_limited"] is True
    assert disproved.facts == {"disk_limited"}
    isolation_report_check(reporter.report(server_id=3, gpu_uuids=(GPU_A,)), server_id=3)  # sound
