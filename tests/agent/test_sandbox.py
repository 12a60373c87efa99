"""Each rental's sandbox (everx_agent.sandbox), for real as root on this machine: two renters'
users, cgroups under a test-owned group of every controller, loop-mounted home images, shells
started in their sandboxes. Everything the tests make is removed and checked gone. The systemd
backend runs against a fake `systemd-run` and `systemctl` that record their arguments."""

import contextlib
import errno
import json
import os
import pwd
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest
from everx_agent.config import ConfigError, config_load
from everx_agent.devices import devices_lock, node_read
from everx_agent.reconcile import Reconciler, StateStore, desired_logins_read
from everx_agent.sandbox import (
    CgroupV1,
    CgroupV2,
    Sandboxes,
    SandboxLimits,
    SandboxRefused,
    SandboxSpec,
    Systemd,
    backend_detect,
    capability_held,
    cgroup_mounts,
    cgroup_write,
    commands_find,
    loop_devices,
    proc_options,
    sandbox_facts,
    sandbox_spawn,
    spawn_script,
)
from everx_agent.system import UnixSystem, login_failure_state

from tests.agent.conftest import login, public_key

MIB = 1024 * 1024
LIMITS = SandboxLimits(cpu_cores=1, memory_bytes=64 * MIB, disk_bytes=20 * 1000 * 1000, processes=64)
GPU_MAJOR = 195
ENVIRONMENT = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}  # the system's python3, not the tests'


def v1_backend(base: str) -> CgroupV1 | None:
    backend = backend_detect(commands=commands_find(), base=base, systemd_running=Path("/nonexistent"))
    return backend if isinstance(backend, CgroupV1) else None


@pytest.fixture
def place():
    """A folder under /home (outside /tmp and /var/tmp, which every sandbox covers with its own)
    for the homes, the state and the stand-in nodes; it and everything in it go at the end."""
    if os.geteuid() != 0:
        pytest.skip("sandboxes need root")
    folder = Path(f"/home/.everx-sandbox-test-{os.getpid()}")
    folder.mkdir(mode=0o755)
    yield folder
    assert not [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if str(folder) in line]
    assert not loop_devices_of(folder)
    shutil.rmtree(folder)
    assert not folder.exists()


def loop_devices_of(folder: Path) -> list[str]:
    found = []
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            if backing.read_text().startswith(str(folder)):
                found.append(backing.parent.parent.name)
        except OSError:
            continue
    return found


@pytest.fixture
def base():
    """The test's own parent group in every v1 controller, removed at the end (with anything a
    failed test left in it)."""
    name = f"everx-test-{os.getpid()}"
    backend = v1_backend(name)
    if backend is None:
        pytest.skip("this machine has no cgroup v1 cpu, memory and pids controllers")
    yield name
    for mount in backend.mounts.values():
        top = mount / name
        for folder in sorted(top.rglob("*"), key=lambda path: -len(path.parts)) if top.exists() else []:
            if folder.is_dir():
                for pid in (folder / "cgroup.procs").read_text().split():
                    os.kill(int(pid), 9)
                time.sleep(0.05)
                folder.rmdir()
        if top.exists():
            top.rmdir()
        assert not top.exists()


@pytest.fixture
def sandboxes(place, base):
    return Sandboxes(state_dir=place / "state", backend=v1_backend(base), device_dir=place / "dev")


@pytest.fixture
def renters(place):
    """Two users (useradd, homes in `place`), deleted at the end; their sandboxes' specs."""
    specs = []
    names = [f"evxtest{os.getpid()}{letter}" for letter in "ab"]
    for rental_id, name in enumerate(names, start=900001):
        home = place / name
        subprocess.run(["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/sh",
                        "--user-group", "--password", "*", name], check=True)
        entry = subprocess.run(["id", "-u", name], capture_output=True, text=True, check=True)
        uid = int(entry.stdout)
        specs.append(SandboxSpec(rental_id=rental_id, uid=uid, gid=os.stat(home).st_gid, home=home,
                                 limits=LIMITS, gpu_minors=(rental_id - 900001,)))
    yield specs
    for name in names:
        subprocess.run(["pkill", "-KILL", "-u", name], check=False)
        subprocess.run(["userdel", name], check=True)
        assert subprocess.run(["id", name], capture_output=True, check=False).returncode == 1


def started(sandboxes, spec, *, limits=None):
    spec = spec if limits is None else SandboxSpec(**{**spec.__dict__, "limits": limits})
    sandboxes.ensure(spec)
    return spec


def shell(sandboxes, spec, script: str, **options) -> subprocess.Popen:
    """`script` run by sh as the renter inside its sandbox, from its home."""
    return sandbox_spawn(sandboxes, spec, ["/bin/sh", "-c", script], user=(spec.uid, spec.gid),
                         cwd=options.pop("cwd", spec.home), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=ENVIRONMENT, **options)


def output(process: subprocess.Popen, timeout: float = 30) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def ended(sandboxes, *specs, remove_home=True) -> None:
    for spec in specs:
        sandboxes.end(spec, remove_home=remove_home)


# Limits ----------------------------------------------------------------------------------------

def test_the_limits_are_in_the_rental_s_groups(sandboxes, renters):
    renter = started(sandboxes, renters[0])
    backend = sandboxes.backend
    try:
        folder = backend.folder
        assert (folder("cpu", renter.rental_id) / "cpu.cfs_quota_us").read_text().strip() == "100000"
        assert (folder("cpu", renter.rental_id) / "cpu.cfs_period_us").read_text().strip() == "100000"
        memory = folder("memory", renter.rental_id)
        assert (memory / "memory.limit_in_bytes").read_text().strip() == str(64 * MIB)
        if (memory / "memory.memsw.limit_in_bytes").exists():
            assert (memory / "memory.memsw.limit_in_bytes").read_text().strip() == str(64 * MIB)
        else:
            assert (memory / "memory.swappiness").read_text().strip() == "0"
        assert (folder("pids", renter.rental_id) / "pids.max").read_text().strip() == "64"
        code, out, _ = output(shell(sandboxes, renter, "cat /proc/self/cgroup"))
        assert code == 0
        for controller in ("cpu", "memory", "pids", "devices"):
            assert any(line.endswith(f"/everx/rental-{renter.rental_id}") and controller in line.split(":")[1]
                       for line in out.splitlines())
    finally:
        ended(sandboxes, renter)


def test_a_process_allocating_twice_its_memory_is_killed_and_the_other_rental_s_lives(sandboxes, renters):
    hog, neighbour = (started(sandboxes, spec) for spec in renters)
    try:
        waiting = shell(sandboxes, neighbour, "sleep 30")
        twice = 2 * 64 * MIB
        allocating = shell(sandboxes, hog, f"exec python3 -c \"data = b'x' * {twice}; print('alive')\"")
        code, out, _ = output(allocating)
        assert code == -9 and out == ""  # the kernel's OOM killer, in the hog's group only
        assert waiting.poll() is None
    finally:
        ended(sandboxes, hog, neighbour)
    assert waiting.wait(timeout=10) == -9  # ending the sandbox killed it


def test_forks_beyond_the_process_limit_fail(sandboxes, renters):
    renter = started(sandboxes, renters[0], limits=SandboxLimits(cpu_cores=1, memory_bytes=64 * MIB,
                                                                  disk_bytes=20 * 1000 * 1000, processes=8))
    forker = ("import os, time\ncount = 0\nwhile count < 50:\n    try:\n        pid = os.fork()\n"
              "    except OSError as error:\n        print(count, error.errno)\n        break\n"
              "    if pid == 0:\n        time.sleep(5)\n        os._exit(0)\n    count += 1\n")
    try:
        code, out, _ = output(shell(sandboxes, renter, f"exec python3 -c '{forker}'"))
        forked, error = (int(value) for value in out.split())
        assert code == 0 and error == errno.EAGAIN
        assert forked == 7  # eight tasks in all: the forker and seven children
    finally:
        ended(sandboxes, renter)


def test_a_busy_loop_under_half_a_core_gets_at_most_that(sandboxes, renters):
    renter = started(sandboxes, renters[0], limits=SandboxLimits(cpu_cores=0.5, memory_bytes=64 * MIB,
                                                                  disk_bytes=20 * 1000 * 1000, processes=8))
    busy = "import time\nstart = time.monotonic()\nwhile time.monotonic() - start < 3:\n    pass\n"
    try:
        process = sandbox_spawn(sandboxes, renter, ["python3", "-c", busy], user=(renter.uid, renter.gid),
                                env=ENVIRONMENT)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        used = usage.ru_utime + usage.ru_stime
        assert process.returncode == 0
        assert 0.2 < used <= 0.6 * 3
    finally:
        ended(sandboxes, renter)


def test_writing_past_the_home_image_fails_while_the_other_rental_still_writes(sandboxes, renters):
    filling, other = (started(sandboxes, spec) for spec in renters)
    try:
        code, _, err = output(shell(sandboxes, filling, "dd if=/dev/zero of=big bs=1M count=30"))
        assert code != 0 and "No space left on device" in err
        assert os.path.ismount(filling.home)
        code, _, _ = output(shell(sandboxes, other, "dd if=/dev/zero of=some bs=1M count=5"))
        assert code == 0 and (other.home / "some").stat().st_size == 5 * MIB
        mounted = next(line for line in Path("/proc/self/mountinfo").read_text().splitlines()
                       if f" {filling.home} " in line)
        assert "nosuid" in mounted and "nodev" in mounted
    finally:
        ended(sandboxes, filling, other)


LARGER = SandboxLimits(cpu_cores=1, memory_bytes=64 * MIB, disk_bytes=60 * 1000 * 1000, processes=64)


def fake_resize2fs(folder: Path) -> tuple[Path, Path]:
    """A stand-in resize2fs that records its arguments, for a root without CAP_SYS_RESOURCE."""
    calls, program = folder / "resize2fs.calls", folder / "resize2fs"
    program.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    program.chmod(0o755)
    return program, calls


def test_a_larger_disk_share_grows_the_mounted_home_and_a_smaller_one_keeps_it(sandboxes, renters, place,
                                                                                caplog):
    """For real where this root may grow a mounted ext4 (CAP_SYS_RESOURCE); elsewhere (the CI
    machine's container) the file and the loop device grow for real and resize2fs is a stand-in."""
    real = sandboxes.can_grow
    calls = None
    if not real:
        program, calls = fake_resize2fs(place)
        sandboxes.commands["resize2fs"], sandboxes.can_grow = str(program), True
    renter = started(sandboxes, renters[0])
    image = sandboxes.image_path(renter.rental_id)
    try:
        output(shell(sandboxes, renter, "echo kept > notes"))
        caplog.set_level("INFO", logger="everx_agent.sandbox")

        started(sandboxes, renter, limits=LARGER)

        device = loop_devices()[renter.home][0]
        assert image.stat().st_size == 60 * 1000 * 1000
        sectors = Path(f"/sys/block/{Path(device).name}/size").read_text().strip()
        assert int(sectors) == 60 * 1000 * 1000 // 512  # the device sees the new size while mounted
        assert os.path.ismount(renter.home) and (renter.home / "notes").read_text() == "kept\n"
        assert "grew from 20000000 to 60000000 bytes" in caplog.text
        if real:  # room for 30 MiB now, where 20 MB held less
            code, _, err = output(shell(sandboxes, renter, "dd if=/dev/zero of=big bs=1M count=30"))
            assert code == 0, err
        else:
            assert calls.read_text() == f"{device}\n"

        started(sandboxes, renter)  # the smaller share again: nothing is taken back
        assert image.stat().st_size == 60 * 1000 * 1000
    finally:
        ended(sandboxes, renter)


def test_without_cap_sys_resource_the_home_keeps_its_size_and_the_rental_goes_on(sandboxes, renters, caplog):
    sandboxes.can_grow = False
    renter = started(sandboxes, renters[0])
    image = sandboxes.image_path(renter.rental_id)
    try:
        started(sandboxes, renter, limits=LARGER)

        assert image.stat().st_size == 20 * 1000 * 1000
        assert "stays at 20000000 bytes: growing it needs losetup, resize2fs and CAP_SYS_RESOURCE" in (
            caplog.text)
        code, _, _ = output(shell(sandboxes, renter, "echo still here > notes"))
        assert code == 0 and os.path.ismount(renter.home)
    finally:
        ended(sandboxes, renter)


def test_the_effective_capabilities_are_read_from_the_status_file(tmp_path):
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nCapPrm:\t000001ffffffffff\nCapEff:\t000001fffeffffff\n")
    assert capability_held(23, status) and not capability_held(24, status)
    assert not capability_held(24, tmp_path / "missing")


# Private /tmp, hidden processes ---------------------------------------------------------------

def test_a_file_a_writes_in_tmp_is_absent_for_b_and_on_the_host(sandboxes, renters):
    a, b = (started(sandboxes, spec) for spec in renters)
    secret = f"everx-secret-{os.getpid()}"
    try:
        assert output(shell(sandboxes, a, f"echo a > /tmp/{secret} && echo a > /var/tmp/{secret}"))[0] == 0
        assert output(shell(sandboxes, b, f"test ! -e /tmp/{secret} && test ! -e /var/tmp/{secret}"))[0] == 0
        assert not (Path("/tmp") / secret).exists() and not (Path("/var/tmp") / secret).exists()  # noqa: S108
        assert (a.home / ".everx-tmp" / secret).read_text() == "a\n"  # on A's own disk share
        code, out, _ = output(shell(sandboxes, a, "findmnt -n -o FSTYPE,OPTIONS /dev/shm"))
        assert out.split()[0] == "tmpfs" and f"size={32 * 1024}k" in out
    finally:
        ended(sandboxes, a, b)


def test_a_tmp_folder_swapped_for_a_link_after_its_check_is_never_mounted(sandboxes, renters):
    renter = started(sandboxes, renters[0])
    checked = sandboxes.user_dir(renter, ".everx-tmp")
    try:
        (renter.home / ".everx-tmp").rename(renter.home / "moved")
        (renter.home / ".everx-tmp").symlink_to("/etc")  # what the renter could do meanwhile
        script = spawn_script(procs_files=[], tmp_dirs={"/tmp": checked},  # noqa: S108
                              shm_bytes=MIB, hide_processes=False, user=(renter.uid, renter.gid))
        result = subprocess.run(sandboxes.namespace_argv(script, ["/bin/true"]), capture_output=True,
                                check=False)
        assert result.returncode != 0
        assert proc_options() == sandboxes.host_proc
    finally:
        ended(sandboxes, renter)


def test_a_sees_only_its_own_processes_and_the_host_s_proc_is_unchanged(sandboxes, renters):
    if not sandboxes.hide_processes:
        pytest.skip("Linux before 5.8: proc options are not per mount")
    host_before = proc_options()
    a, b = (started(sandboxes, spec) for spec in renters)
    try:
        neighbour = shell(sandboxes, b, "sleep 30")
        code, out, _ = output(shell(sandboxes, a, "ls /proc; echo ---; ps -e -o uid=,pid="))
        listed, processes = out.split("---")
        pids = [int(name) for name in listed.split() if name.isdigit()]
        assert code == 0 and pids and neighbour.pid not in pids and 1 not in pids
        for pid in pids:
            with contextlib.suppress(FileNotFoundError):  # `ls` itself is gone by now
                assert os.stat(f"/proc/{pid}").st_uid == a.uid
        rows = [line.split() for line in processes.strip().splitlines()]
        assert rows and {int(uid) for uid, _ in rows} == {a.uid}
        assert neighbour.poll() is None and Path(f"/proc/{neighbour.pid}").exists()  # the host still sees it
    finally:
        ended(sandboxes, a, b)
    assert proc_options() == host_before
    assert sandboxes.facts()["processes_hidden"] is True


# The device group ---------------------------------------------------------------------------

def test_the_device_group_refuses_another_rental_s_gpu_even_when_its_acl_lets_it_through(sandboxes, renters):
    if "devices" not in sandboxes.backend.mounts:
        pytest.skip("no cgroup v1 devices controller")
    devices = sandboxes.device_dir
    devices.mkdir()
    for minor in (0, 1):
        os.mknod(devices / f"nvidia{minor}", 0o666 | stat.S_IFCHR, os.makedev(GPU_MAJOR, minor))
    a = started(sandboxes, renters[0])  # its GPU is minor 0
    devices_lock(device_dir=devices, owners={0: a.uid, 1: a.uid}, proc_dir=None)  # B's node wrongly open to A
    opener = ("import os\nfor name in ('nvidia0', 'nvidia1'):\n"
              "    try:\n        os.close(os.open(name, os.O_RDWR))\n"
              "    except OSError as error:\n        print(name, error.errno)\n")
    try:
        code, out, _ = output(shell(sandboxes, a, f"exec python3 -c \"{opener}\"", cwd=devices))
        assert code == 0
        assert out.split("\n")[:2] == [f"nvidia0 {errno.ENXIO}", f"nvidia1 {errno.EPERM}"]

        moved = SandboxSpec(**{**a.__dict__, "gpu_minors": (1,)})  # the rental's GPU changed
        sandboxes.ensure(moved)
        code, out, _ = output(shell(sandboxes, moved, f"exec python3 -c \"{opener}\"", cwd=devices))
        assert out.split("\n")[:2] == [f"nvidia0 {errno.EPERM}", f"nvidia1 {errno.ENXIO}"]
    finally:
        ended(sandboxes, a)


def test_changed_limits_are_written_up_and_down(sandboxes, renters):
    renter = started(sandboxes, renters[0])
    memory = sandboxes.backend.folder("memory", renter.rental_id)
    try:
        for mib in (128, 32):
            started(sandboxes, renter, limits=SandboxLimits(cpu_cores=2, memory_bytes=mib * MIB,
                                                            disk_bytes=LIMITS.disk_bytes, processes=100))
            assert (memory / "memory.limit_in_bytes").read_text().strip() == str(mib * MIB)
            if (memory / "memory.memsw.limit_in_bytes").exists():
                assert (memory / "memory.memsw.limit_in_bytes").read_text().strip() == str(mib * MIB)
        cpu = sandboxes.backend.folder("cpu", renter.rental_id)
        assert (cpu / "cpu.cfs_quota_us").read_text().strip() == "200000"
    finally:
        ended(sandboxes, renter)


# End and restart ------------------------------------------------------------------------------

def test_ending_kills_what_runs_unmounts_the_home_and_removes_the_groups(sandboxes, renters):
    renter = started(sandboxes, renters[0])
    image = sandboxes.image_path(renter.rental_id)
    left = shell(sandboxes, renter, "sleep 60 & sleep 60 & wait")
    time.sleep(0.2)
    assert len((sandboxes.backend.folder("pids", renter.rental_id) / "cgroup.procs").read_text().split()) == 3

    sandboxes.end(renter, remove_home=True)

    assert left.wait(timeout=10) == -9
    assert not os.path.ismount(renter.home) and not image.exists()
    assert all(not sandboxes.backend.folder(controller, renter.rental_id).exists()
               for controller in sandboxes.backend.mounts)
    assert sandboxes.rentals() == set()


def test_a_sandbox_holds_no_other_rental_s_home_and_its_loop_device_goes_with_its_rental(sandboxes, renters):
    a, b = (started(sandboxes, spec) for spec in renters)
    try:
        running = shell(sandboxes, a, "cat /proc/self/mountinfo; exec sleep 30")
        time.sleep(0.3)
        sandboxes.end(b, remove_home=True)
        assert not loop_devices_of(b.home.parent / "state" / "homes" / f"rental-{b.rental_id}")
        assert running.poll() is None
        running.kill()
        mounts = running.communicate(timeout=10)[0]
        assert f" {a.home} " in mounts and f" {b.home} " not in mounts
    finally:
        ended(sandboxes, a)


def test_a_kept_home_comes_back_with_its_files(sandboxes, renters):
    renter = started(sandboxes, renters[0])
    assert output(shell(sandboxes, renter, "echo kept > notes"))[0] == 0
    sandboxes.end(renter, remove_home=False)
    assert sandboxes.image_path(renter.rental_id).exists() and not (renter.home / "notes").exists()

    sandboxes.ensure(renter)
    try:
        assert (renter.home / "notes").read_text() == "kept\n"
        assert (renter.home / ".profile").exists() or (renter.home / ".bashrc").exists()  # useradd's skeleton
    finally:
        ended(sandboxes, renter)


def test_after_a_restart_the_sandboxes_are_found_and_not_made_twice(sandboxes, renters, base):
    a, b = (started(sandboxes, spec) for spec in renters)
    restarted = Sandboxes(state_dir=sandboxes.state_dir, backend=v1_backend(base),
                          device_dir=sandboxes.device_dir)
    try:
        assert restarted.rentals() == {a.rental_id, b.rental_id}
        restarted.ensure(a)
        restarted.ensure(b)
        mounts = Path("/proc/self/mountinfo").read_text()
        assert mounts.count(f" {a.home} ") == 1 and mounts.count(f" {b.home} ") == 1
        assert len(loop_devices_of(sandboxes.state_dir)) == 2
    finally:
        ended(restarted, a, b)


def test_the_facts_of_this_machine_are_measured_once(sandboxes):
    facts = sandbox_facts(sandboxes)
    assert facts == {"backend": "v1", "cpu_limited": True, "memory_limited": True, "processes_limited": True,
                     "disk_limited": shutil.which("mkfs.ext4") is not None, "tmp_private": True,
                     "processes_hidden": sandboxes.hide_processes,
                     "device_cgroup": "devices" in sandboxes.backend.mounts}
    assert sandbox_facts(sandboxes) is facts
    assert not (sandboxes.state_dir / "probe").exists()


def test_without_a_backend_or_commands_nothing_is_claimed(tmp_path):
    facts = sandbox_facts(Sandboxes(state_dir=tmp_path, backend=None, commands={}))
    assert facts == {"backend": "none", "cpu_limited": False, "memory_limited": False,
                     "processes_limited": False, "disk_limited": False, "tmp_private": False,
                     "processes_hidden": False, "device_cgroup": False}


def test_without_a_loop_device_the_home_stays_as_it_is_and_the_rental_still_starts(place, renters):
    without_mkfs = {**commands_find(), "mkfs.ext4": None}
    sandboxes = Sandboxes(state_dir=place / "state", backend=None, commands=without_mkfs)
    renter = renters[0]
    sandboxes.ensure(renter)
    assert sandbox_facts(sandboxes)["disk_limited"] is False and not os.path.ismount(renter.home)
    code, out, _ = output(shell(sandboxes, renter, "cd /tmp && echo here > note && cat note"))
    assert (code, out) == (0, "here\n")
    assert (renter.home / ".everx-tmp" / "note").exists()
    sandboxes.end(renter, remove_home=True)


def test_loop_devices_running_out_refuse_the_rental_and_name_the_disk_fact(sandboxes, renters, place):
    assert sandbox_facts(sandboxes)["disk_limited"] is True  # measured while loop devices were left
    out_of_loops = place / "mount"
    out_of_loops.write_text("#!/bin/sh\necho 'mount: failed to setup loop device.' >&2\nexit 32\n")
    out_of_loops.chmod(0o755)
    sandboxes.commands["mount"] = str(out_of_loops)
    renter = renters[0]

    with pytest.raises(SandboxRefused, match="the home image could not be mounted") as refused:
        sandboxes.ensure(renter)

    assert refused.value.fact == "disk_limited"
    assert login_failure_state(refused.value) == "refused"  # the exchange ends it "not delivered"
    assert not os.path.ismount(renter.home)
    sandboxes.end(renter, remove_home=True)
    assert not sandboxes.image_path(renter.rental_id).exists()


# Without root: the pure parts and the fakes ------------------------------------------------------

@pytest.mark.parametrize(("value", "expected"), [
    ({"cpu_cores": 8, "memory_mib": 65536, "disk_gb": 500, "processes": 4096},
     SandboxLimits(cpu_cores=8, memory_bytes=65536 * MIB, disk_bytes=500 * 10**9, processes=4096)),
    (None, None), ([], None), ({"cpu_cores": 8, "memory_mib": 65536, "disk_gb": 500}, None),
    ({"cpu_cores": 0, "memory_mib": 1, "disk_gb": 1, "processes": 1}, None),
    ({"cpu_cores": True, "memory_mib": 1, "disk_gb": 1, "processes": 1}, None),
    ({"cpu_cores": "8", "memory_mib": 1, "disk_gb": 1, "processes": 1}, None),
])
def test_the_desired_state_s_limits_are_read_strictly(value, expected):
    assert SandboxLimits.from_desired(value) == expected


@pytest.mark.parametrize("value", ["/sys/fs/cgroup", "../escape", "a//b", "a/./b"])
def test_a_cgroup_base_outside_the_hierarchy_is_refused(tmp_path, value):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"url": "https://exchange.example", "token": "evxa_" + "x" * 40,
                                "cgroup_base": value}))
    with pytest.raises(ConfigError, match="must be a relative path"):
        config_load(path=path)


def test_the_hierarchies_are_read_from_the_mount_table():
    v1, v2 = cgroup_mounts(
        "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n"
        "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n"
        "cgroup /sys/fs/cgroup/pids cgroup rw,pids 0 0\n"
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nsdelegate 0 0\n"
        "proc /proc proc rw 0 0\n")
    assert v1 == {"cpu": Path("/sys/fs/cgroup/cpu,cpuacct"), "memory": Path("/sys/fs/cgroup/memory"),
                  "pids": Path("/sys/fs/cgroup/pids")}
    assert v2 == Path("/sys/fs/cgroup/unified")


def test_a_v2_hierarchy_with_the_controllers_is_chosen_over_v1(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    mounts = (f"cgroup2 {tmp_path} cgroup2 rw 0 0\n"
              "cgroup /c cgroup rw,cpu 0 0\ncgroup /m cgroup rw,memory 0 0\ncgroup /p cgroup rw,pids 0 0\n")
    chosen = backend_detect(commands={}, mounts_text=mounts, systemd_running=tmp_path / "absent")
    assert isinstance(chosen, CgroupV2)
    (tmp_path / "cgroup.controllers").write_text("hugetlb\n")  # as on this machine
    assert isinstance(backend_detect(commands={}, mounts_text=mounts, systemd_running=tmp_path / "absent"),
                      CgroupV1)
    assert backend_detect(commands={}, mounts_text="proc /proc proc rw 0 0\n",
                          systemd_running=tmp_path / "absent") is None


def test_the_v2_backend_writes_the_limits_and_hands_down_the_controllers(tmp_path):
    """Against a folder laid out as cgroup2 is (this machine's v2 has no cpu, memory or pids)."""
    group = tmp_path / "test" / "everx" / "rental-7"
    group.mkdir(parents=True)  # with the files the kernel gives a new group
    control = ["cgroup.subtree_control"]
    for folder, names in ((tmp_path, control), (tmp_path / "test", control), (group.parent, control),
                          (group, ["cpu.max", "memory.max", "memory.swap.max", "pids.max"])):
        for name in names:
            (folder / name).write_text("")
    (tmp_path / "test" / "cgroup.subtree_control").write_text("cpu memory pids\n")
    backend = CgroupV2(root=tmp_path, base="test")
    spec = SandboxSpec(rental_id=7, uid=0, gid=0, home=tmp_path, limits=SandboxLimits(
        cpu_cores=2, memory_bytes=8 * 1024 * MIB, disk_bytes=1, processes=512))

    backend.apply(spec)

    limits = ("cpu.max", "memory.max", "memory.swap.max", "pids.max")
    assert {name: (group / name).read_text() for name in limits} == {
        "cpu.max": "200000 100000", "memory.max": str(8 * 1024 * MIB), "memory.swap.max": "0",
        "pids.max": "512"}
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert (tmp_path / "test" / "cgroup.subtree_control").read_text() == "cpu memory pids\n"  # already on
    assert (tmp_path / "test" / "everx" / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert backend.rentals() == {7}


@pytest.fixture
def fake_systemd(tmp_path):
    """`systemd-run` and `systemctl` that append their arguments to calls.jsonl; `systemctl
    list-units` answers units.txt."""
    folder = tmp_path / "bin"
    folder.mkdir()
    calls, units = tmp_path / "calls.jsonl", tmp_path / "units.txt"
    units.write_text("")
    for name in ("systemd-run", "systemctl"):
        script = (f"#!/usr/bin/python3\nimport json, sys\n"
                  f"open({str(calls)!r}, 'a').write(json.dumps([{name!r}, *sys.argv[1:]]) + '\\n')\n"
                  f"if sys.argv[1:2] == ['list-units']:\n    print(open({str(units)!r}).read(), end='')\n")
        (folder / name).write_text(script)
        (folder / name).chmod(0o755)
    commands = {name: str(folder / name) for name in ("systemd-run", "systemctl")}
    return commands, calls, units


def recorded(calls: Path) -> list[list[str]]:
    return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


def test_the_systemd_backend_starts_a_transient_unit_with_every_property(tmp_path, fake_systemd):
    commands, calls, _ = fake_systemd
    backend = Systemd(commands=commands, device_dir=Path("/dev"))
    sandboxes = Sandboxes(state_dir=tmp_path / "state", backend=backend, commands=commands)
    spec = SandboxSpec(rental_id=12, uid=60012, gid=60012, home=tmp_path, gpu_minors=(2, 3),
                       limits=SandboxLimits(cpu_cores=8, memory_bytes=65536 * MIB, disk_bytes=500 * 10**9,
                                            processes=4096))

    assert sandboxes.spawn(spec, ["/usr/sbin/sshd", "-D"], user=(60012, 60012)).wait(timeout=10) == 0

    [call] = recorded(calls)
    assert call[:5] == ["systemd-run", "--unit", "everx-rental-12.service", "--collect", "--quiet"]
    assert call[-3:] == ["--", "/usr/sbin/sshd", "-D"]
    prefix = "--property="
    properties = [argument.removeprefix(prefix) for argument in call if argument.startswith(prefix)]
    assert properties == [
        "CPUQuota=800%", f"MemoryMax={65536 * MIB}", "MemorySwapMax=0", "TasksMax=4096",
        "DevicePolicy=closed", "DeviceAllow=char-pts rw", "DeviceAllow=/dev/ptmx rw",
        "DeviceAllow=/dev/tty rw",
        "DeviceAllow=/dev/nvidiactl rw", "DeviceAllow=/dev/nvidia-uvm rw",
        "DeviceAllow=/dev/nvidia-uvm-tools rw", "DeviceAllow=/dev/nvidia-modeset rw",
        "DeviceAllow=/dev/nvidia2 rw", "DeviceAllow=/dev/nvidia3 rw",
        "PrivateTmp=yes", f"TemporaryFileSystem=/dev/shm:size={32768 * MIB},mode=1777",
        "ProtectProc=invisible",
    ]
    assert "--uid=60012" in call and "--gid=60012" in call


def test_the_systemd_backend_finds_its_units_changes_their_limits_and_ends_them(tmp_path, fake_systemd):
    commands, calls, units = fake_systemd
    units.write_text("everx-rental-12.service loaded active running /usr/sbin/sshd -D\n"
                     "everx-rental-x.service loaded active running not ours\n"
                     "ssh.service loaded active running OpenBSD Secure Shell server\n")
    backend = Systemd(commands=commands)
    spec = SandboxSpec(rental_id=12, uid=0, gid=0, home=tmp_path, limits=LIMITS)

    assert backend.rentals() == {12}
    backend.apply(spec)
    backend.end(spec.rental_id)

    listing = ["systemctl", "list-units", "--all", "--plain", "--no-legend", "everx-rental-*.service"]
    assert recorded(calls) == [
        listing, listing,
        ["systemctl", "set-property", "--runtime", "everx-rental-12.service", "CPUQuota=100%",
         f"MemoryMax={64 * MIB}", "TasksMax=64"],
        listing,
        ["systemctl", "kill", "--signal=SIGKILL", "everx-rental-12.service"],
        ["systemctl", "stop", "everx-rental-12.service"],
    ]


def test_systemd_facts_are_those_of_a_probe_unit_it_ran(tmp_path, fake_systemd):
    commands, calls, _ = fake_systemd
    sandboxes = Sandboxes(state_dir=tmp_path / "state", backend=Systemd(commands=commands),
                          commands={**commands, "mkfs.ext4": None})
    facts = sandbox_facts(sandboxes)
    assert facts == {"backend": "systemd", "cpu_limited": True, "memory_limited": True,
                     "processes_limited": True, "disk_limited": False, "tmp_private": True,
                     "processes_hidden": True, "device_cgroup": True}
    [probe] = recorded(calls)
    assert probe[:2] == ["systemd-run", "--wait"] and "--property=ProtectProc=invisible" in probe


# Wired into the reconciler ---------------------------------------------------------------------

class PlacedSystem(UnixSystem):
    """The real Unix side, with homes in the test's folder rather than /home/evx-<id>."""

    def __init__(self, place: Path):
        super().__init__()
        self.place = place

    def user_create(self, *, username: str, comment: str) -> None:
        self._run("useradd", ["--create-home", "--home-dir", str(self.place / username), "--shell",
                              "/bin/sh", "--password", "*", "--comment", comment, username])


def limited_login(rental_id: int, gpu: int) -> dict:
    return {**login(rental_id, public_key(), gpu_indices=(gpu,)),
            "limits": {"cpu_cores": 1, "memory_mib": 64, "disk_gb": 1, "processes": 64}}


def test_the_reconciler_sandboxes_each_login_finds_them_after_a_restart_and_ends_them(
        place, base, monkeypatch):
    devices = place / "dev"
    devices.mkdir()
    for minor in (0, 1):
        os.mknod(devices / f"nvidia{minor}", 0o666 | stat.S_IFCHR, os.makedev(GPU_MAJOR, minor))
    first = 8_800_000_000 + os.getpid() * 10
    entries = [limited_login(first, 0), limited_login(first + 1, 1)]
    names = [f"evx-{first}", f"evx-{first + 1}"]

    class WatchedSandboxes(Sandboxes):
        """Notes who may open the rental's GPU node at the moment its sandbox is ended."""

        acl_at_end: list[tuple[int, ...]] = []

        def end(self, spec, *, remove_home):
            self.acl_at_end.append(node_read(devices / f"nvidia{spec.gpu_minors[0]}").acl_users)
            super().end(spec, remove_home=remove_home)

    def reconciler() -> Reconciler:
        sandboxes = WatchedSandboxes(state_dir=place / "state", backend=v1_backend(base), device_dir=devices)
        return Reconciler(system=PlacedSystem(place), store=StateStore(state_dir=place / "state"),
                          device_dir=devices, sandboxes=sandboxes)

    started_once = reconciler()
    try:
        created = started_once.reconcile(entries=entries, remove_home=True)
        assert [action.kind for action in created] == ["create", "create"]
        assert [report["state"] for report in started_once.reports()] == ["ready", "ready"]
        assert node_read(devices / "nvidia1").acl_users == (pwd.getpwnam(names[1]).pw_uid,)
        for name in names:
            home = place / name
            assert os.path.ismount(home) and (home / ".ssh" / "authorized_keys").exists()  # in the image
        backend = started_once.sandboxes.backend
        limit = backend.folder("memory", first) / "memory.limit_in_bytes"
        assert limit.read_text().strip() == str(64 * MIB)

        restarted = reconciler()
        with monkeypatch.context() as patched:  # finding intact sandboxes runs no command
            patched.setattr(subprocess, "run", None)
            patched.setattr(subprocess, "Popen", None)
            assert restarted.reconcile(entries=entries, remove_home=True) == []
        assert restarted.sandboxes.rentals() == {first, first + 1}
        mounts = Path("/proc/self/mountinfo").read_text()
        assert all(mounts.count(f" {place / name} ") == 1 for name in names)

        removed = restarted.reconcile(entries=[], remove_home=True)
        assert [action.kind for action in removed] == ["remove", "remove"]
        assert WatchedSandboxes.acl_at_end == [(), ()]  # the ACL entries went first
        assert restarted.sandboxes.rentals() == set() and restarted.reports() == []
        assert not any(os.path.ismount(place / name) for name in names)
        assert not list((place / "state" / "homes").iterdir())
    finally:
        for name in names:
            subprocess.run(["userdel", name], capture_output=True, check=False)
    for name in names:
        assert subprocess.run(["id", name], capture_output=True, check=False).returncode == 1


def test_after_a_reboot_the_first_pass_makes_the_sandboxes_again_from_the_kept_images(place, base):
    rental_id = 8_800_000_000 + os.getpid() * 10 + 5
    name, entries = f"evx-{rental_id}", [limited_login(rental_id, 0)]
    state = place / "state"

    def reconciler() -> Reconciler:
        return Reconciler(system=PlacedSystem(place), store=StateStore(state_dir=state),
                          sandboxes=Sandboxes(state_dir=state, backend=v1_backend(base)))

    before = reconciler()
    try:
        before.reconcile(entries=entries, remove_home=True)
        (place / name / "work").write_text("results")
        spec = before.sandbox_spec(before.managed[name])
        before.sandboxes.end(spec, remove_home=False)  # what a reboot leaves: no group, no mount
        assert not os.path.ismount(place / name) and before.sandboxes.rentals() == set()

        after = reconciler()
        assert after.reconcile(entries=entries, remove_home=True) == []  # nothing to change in the logins
        assert after.sandboxes.rentals() == {rental_id}
        assert (place / name / "work").read_text() == "results"
        assert [report["state"] for report in after.reports()] == ["ready"]
        after.reconcile(entries=[], remove_home=True)
        assert after.sandboxes.rentals() == set() and not os.path.ismount(place / name)
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)
    assert subprocess.run(["id", name], capture_output=True, check=False).returncode == 1


@pytest.mark.parametrize(("limits", "detail"), [
    ({"cpu_cores": 1, "memory_mib": 64, "disk_gb": 0, "processes": 64},
     "the limits must be positive whole numbers of cores, MiB, GB and processes"),
    ("8 cores", "the limits must be positive whole numbers of cores, MiB, GB and processes"),
    (None, ""),
])
def test_the_login_s_limits_are_checked_when_the_answer_is_read(limits, detail):
    desired = desired_logins_read(entries=[{**login(12, public_key()), "limits": limits}])
    if detail:
        assert desired.invalid["evx-12"].detail == detail and not desired.logins
    else:
        assert desired.logins["evx-12"].limits is None


# Refused by the kernel -------------------------------------------------------------------------

def test_a_limit_the_kernel_refuses_is_a_refusal_naming_its_fact(base):
    backend = v1_backend(base)
    folder = backend.mounts["pids"] / base / "refusal"
    folder.mkdir(parents=True)
    with pytest.raises(SandboxRefused, match=r"pids.max of refusal refused 'many': ") as refused:
        cgroup_write(folder / "pids.max", "many")
    assert refused.value.fact == "processes_limited"
    assert login_failure_state(refused.value) == "refused"
    assert (folder / "pids.max").read_text().strip() == "max"  # nothing was changed
