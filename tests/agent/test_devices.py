"""GPU nodes locked to their rental (everx_agent.devices), for real: stand-in nodes made with
`mknod c 195 N` in a temporary folder, opened by processes running as two renters' user ids. With
no NVIDIA driver on this machine, a node the permissions let through answers ENXIO (no device
behind it), one they refuse answers EACCES."""

import errno
import grp
import json
import os
import pwd
import stat
import struct
import subprocess
import time
from functools import partial
from pathlib import Path

import pytest
from everx_agent import isolation
from everx_agent.config import config_load
from everx_agent.devices import (
    ACL_XATTR,
    COMPUTE_APPS_ARGS,
    MODPROBE_OPTIONS,
    NodeState,
    acl_encode,
    acl_users,
    compute_apps_read,
    devices_lock,
    driver_permissions_read,
    node_read,
)
from everx_agent.loop import DeviceWatch
from everx_agent.main import main as agent_main
from everx_agent.reconcile import Reconciler, StateStore
from everx_agent.system import RENTER_GROUP

from tests.agent.conftest import SERVER_TIME, FakeSystem, login, public_key
from tests.agent.fakes import FakeCommands

SSHD = "/usr/sbin/sshd"

RENTER_A, RENTER_B = 61001, 61002  # user ids without a passwd entry: the kernel needs only the number
CONTROL_MINOR = 255
DRIVER_DEFAULT_MODE = 0o666  # the driver's DeviceFileMode on a default install: what is being fixed


def test_an_acl_reads_back_as_its_users():
    assert acl_users(acl_encode((RENTER_B, RENTER_A))) == (RENTER_A, RENTER_B)
    assert acl_users(acl_encode(())) == ()


@pytest.mark.parametrize(
    "data", [b"", b"\x02\x00\x00", struct.pack("<I", 1) + b"\x00" * 8, b"\x02\x00\x00\x00junk"]
)
def test_an_acl_it_cannot_read_names_nobody(data):
    assert acl_users(data) == ()


@pytest.fixture
def devices(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("making device nodes needs root")
    folder = tmp_path / "dev"
    folder.mkdir()
    for name, minor in (("nvidia0", 0), ("nvidia1", 1), ("nvidiactl", CONTROL_MINOR)):
        os.mknod(folder / name, DRIVER_DEFAULT_MODE | stat.S_IFCHR, os.makedev(195, minor))
        os.chmod(folder / name, DRIVER_DEFAULT_MODE)  # as a default driver install leaves them
    (folder / "nvidia-not-a-node").write_text("")
    return folder


def opened_as(uid: int, path) -> int:
    """The errno of opening `path` for reading and writing as `uid` (0: it opened). The child
    enters the node's folder while still root: pytest's own folders above it are closed to others."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        code = 0
        try:
            os.chdir(path.parent)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.close(os.open(path.name, os.O_RDWR))
        except OSError as error:
            code = error.errno
        os.write(write_end, struct.pack("<i", code))
        os._exit(0)
    os.close(write_end)
    code = struct.unpack("<i", os.read(read_end, 4))[0]
    os.close(read_end)
    os.waitpid(child, 0)
    return code


def test_each_renter_reaches_its_own_gpu_and_not_the_others(devices):
    drifts = devices_lock(device_dir=devices, owners={0: RENTER_A, 1: RENTER_B}).drifts

    assert [drift.index for drift in drifts] == [0, 1]
    assert opened_as(RENTER_A, devices / "nvidia0") == errno.ENXIO  # let through: no driver behind it
    assert opened_as(RENTER_A, devices / "nvidia1") == errno.EACCES
    assert opened_as(RENTER_B, devices / "nvidia1") == errno.ENXIO
    assert opened_as(RENTER_B, devices / "nvidia0") == errno.EACCES
    for renter in (RENTER_A, RENTER_B):  # the shared control node stays open to all
        assert opened_as(renter, devices / "nvidiactl") == errno.ENXIO
    locked = node_read(devices / "nvidia0")
    assert (locked.mode, locked.uid, locked.gid, locked.acl_users) == (0o660, 0, 0, (RENTER_A,))
    assert stat.S_IMODE(os.stat(devices / "nvidiactl").st_mode) == 0o666


def getfacl(path) -> str:
    """Debian's getfacl (make test installs acl), numeric, without the header: what it reads back."""
    return subprocess.run(["getfacl", "--numeric", "--omit-header", str(path)], capture_output=True,
                          text=True, check=True).stdout


def test_debian_s_getfacl_reads_exactly_the_rental_s_one_entry(devices):
    devices_lock(device_dir=devices, owners={0: RENTER_A, 1: RENTER_B})

    assert getfacl(devices / "nvidia0") == (
        f"user::rw-\nuser:{RENTER_A}:rw-\ngroup::rw-\nmask::rw-\nother::---\n\n")
    assert getfacl(devices / "nvidia1") == (
        f"user::rw-\nuser:{RENTER_B}:rw-\ngroup::rw-\nmask::rw-\nother::---\n\n")
    # The shared control node: no ACL, open to all as the driver made it.
    assert getfacl(devices / "nvidiactl") == "user::rw-\ngroup::rw-\nother::rw-\n\n"

    devices_lock(device_dir=devices, owners={0: RENTER_A})  # B's rental ended
    assert getfacl(devices / "nvidia1") == "user::rw-\ngroup::rw-\nother::---\n\n"


def test_a_gpu_nobody_rents_is_closed_to_every_renter(devices):
    devices_lock(device_dir=devices, owners={0: RENTER_A})
    devices_lock(device_dir=devices, owners={})  # the rental ended

    assert opened_as(RENTER_A, devices / "nvidia0") == errno.EACCES
    assert node_read(devices / "nvidia0").acl == b""


def test_a_check_of_nodes_as_they_should_be_writes_nothing(devices):
    devices_lock(device_dir=devices, owners={0: RENTER_A, 1: RENTER_B})
    changed = {name: os.stat(devices / name).st_ctime_ns for name in ("nvidia0", "nvidia1")}

    assert devices_lock(device_dir=devices, owners={0: RENTER_A, 1: RENTER_B}).drifts == []
    assert {name: os.stat(devices / name).st_ctime_ns for name in changed} == changed


def test_what_nvidia_modprobe_does_is_repaired_and_reported(devices):
    devices_lock(device_dir=devices, owners={0: RENTER_A})
    # nvidia-modprobe puts the driver's mode back: chmod 0666 on a node with an ACL opens it to all.
    os.chmod(devices / "nvidia0", DRIVER_DEFAULT_MODE)
    assert opened_as(RENTER_B, devices / "nvidia0") == errno.ENXIO
    os.removexattr(devices / "nvidia0", ACL_XATTR)

    [drift] = devices_lock(device_dir=devices, owners={0: RENTER_A}).drifts

    assert drift.to_json() == {
        "gpu_index": 0, "found": "mode 0666, owner 0:0, ACL users none",
        "wanted": f"mode 0660, owner 0:0, ACL users {RENTER_A}",
    }
    assert opened_as(RENTER_B, devices / "nvidia0") == errno.EACCES
    assert opened_as(RENTER_A, devices / "nvidia0") == errno.ENXIO


def test_an_extra_acl_entry_someone_added_is_a_difference(devices):
    devices_lock(device_dir=devices, owners={0: RENTER_A})
    os.setxattr(devices / "nvidia0", ACL_XATTR, acl_encode((RENTER_A, RENTER_B)))

    [drift] = devices_lock(device_dir=devices, owners={0: RENTER_A}).drifts

    assert drift.found.acl_users == (RENTER_A, RENTER_B)
    assert opened_as(RENTER_B, devices / "nvidia0") == errno.EACCES


def test_a_missing_device_folder_locks_nothing(tmp_path):
    assert devices_lock(device_dir=tmp_path / "absent", owners={0: RENTER_A}).drifts == []


def test_the_reconciler_locks_each_login_s_gpus_and_closes_them_when_it_goes(devices, fake_system, state_dir):
    reconciler = Reconciler(system=fake_system, store=StateStore(state_dir=state_dir),
                            now=lambda: SERVER_TIME, device_dir=devices)
    reconciler.reconcile(entries=[login(12, public_key(), gpu_indices=(1,))], remove_home=False)

    assert node_read(devices / "nvidia1").acl_users == (60012,)
    assert node_read(devices / "nvidia0").acl_users == () and node_read(devices / "nvidia0").mode == 0o660
    assert list(reconciler.device_drifts) == []  # the agent's own first lock is no drift

    assert reconciler.devices_check() == []  # nothing to repair, nothing written

    reconciler.reconcile(entries=[], remove_home=True)
    assert node_read(devices / "nvidia1").acl == b""


class NodesSeenByContainers:
    """Container mode as the reconciler calls it, noting how the GPU nodes are when it is asked
    to start containers."""

    def __init__(self, devices):
        self.devices, self.modes = devices, []
        self.found, self.wanted = {}, {}  # no container listed, none wanted

    def templates_take(self, entries):
        pass

    def reconcile(self, *, entries):
        self.modes.append({name: node_read(self.devices / name).mode for name in ("nvidia0", "nvidia1")})
        return [entry for entry in entries if entry.get("isolation") != "container"], []

    def reports(self):
        return []


def test_after_a_reboot_the_nodes_are_locked_before_any_container_or_sandbox_starts(devices, fake_system,
                                                                                    state_dir):
    entries = [login(12, public_key(), gpu_indices=(1,))]
    Reconciler(system=fake_system, store=StateStore(state_dir=state_dir), now=lambda: SERVER_TIME,
               device_dir=devices).reconcile(entries=entries, remove_home=False)
    for name in ("nvidia0", "nvidia1"):  # the reboot: the driver made them again, open to all
        (devices / name).unlink()
        os.mknod(devices / name, DRIVER_DEFAULT_MODE | stat.S_IFCHR, os.makedev(195, int(name[-1])))
        os.chmod(devices / name, DRIVER_DEFAULT_MODE)
    containers = NodesSeenByContainers(devices)
    restarted = Reconciler(system=fake_system, store=StateStore(state_dir=state_dir), now=lambda: SERVER_TIME,
                           device_dir=devices, containers=containers)

    restarted.reconcile(entries=entries, remove_home=False)

    assert containers.modes == [{"nvidia0": 0o660, "nvidia1": 0o660}]
    assert node_read(devices / "nvidia1").acl_users == (60012,)


class SshdNotingNodes:
    """The rentals' sshds as the reconciler calls them, noting the rental's GPU node's ACL users
    when its sshd is stopped."""

    def __init__(self, devices):
        self.devices, self.acl_at_stop = devices, None

    def ensure(self, *, username, authorized_keys, spawn):
        pass

    def port_of(self, username):
        return 41000

    def stop(self, *, username):
        self.acl_at_stop = node_read(self.devices / "nvidia1").acl_users


class JoiningSystem(FakeSystem):
    def renter_group_join(self, *, username):
        self.actions.append(("join", username))


def test_an_ending_rental_loses_its_gpu_before_anything_else_goes(devices, state_dir):
    sshd = SshdNotingNodes(devices)
    reconciler = Reconciler(system=JoiningSystem(), store=StateStore(state_dir=state_dir),
                            now=lambda: SERVER_TIME, device_dir=devices, sshd=sshd)
    reconciler.reconcile(entries=[login(12, public_key(), gpu_indices=(1,))], remove_home=False)
    assert node_read(devices / "nvidia1").acl_users == (60012,)

    reconciler.reconcile(entries=[], remove_home=True)

    assert sshd.acl_at_stop == ()  # its ACL entry went first, before its sshd stopped
    assert [action[0] for action in reconciler.system.actions[-3:]] == ["unkey", "kill", "userdel"]


def params(**values) -> str:
    return "".join(f"{key}: {value}\n" for key, value in {"ResmanDebugLevel": 4294967295, **values}.items())


@pytest.mark.parametrize(("text", "keeps"), [
    (params(ModifyDeviceFiles=1, DeviceFileUID=0, DeviceFileGID=0, DeviceFileMode=438), False),  # 0666
    (params(ModifyDeviceFiles=1, DeviceFileUID=0, DeviceFileGID=0, DeviceFileMode=432), True),  # 0660
    (params(ModifyDeviceFiles=0, DeviceFileUID=0, DeviceFileGID=0, DeviceFileMode=438), True),
    (params(ModifyDeviceFiles=1, DeviceFileUID=1000, DeviceFileGID=0, DeviceFileMode=432), False),
    (params(ModifyDeviceFiles=1, DeviceFileUID=0, DeviceFileGID=61001, DeviceFileMode=432), False),
    (params(ModifyDeviceFiles=1, DeviceFileUID=0, DeviceFileMode="x"), False),
    ("", False),
])
def test_whether_the_driver_would_undo_the_locks(tmp_path, text, keeps):
    path = tmp_path / "params"
    path.write_text(text)
    assert driver_permissions_read(path=path, renter_gids=frozenset({61001})).keeps is keeps


def test_a_group_that_does_not_exist_yet_is_no_safe_owner(tmp_path):
    path = tmp_path / "params"
    path.write_text(params(ModifyDeviceFiles=1, DeviceFileUID=0, DeviceFileGID=4242424, DeviceFileMode=432))

    judged = driver_permissions_read(path=path)

    assert not judged.keeps
    assert "the group 4242424, which does not exist" in judged.detail


def test_the_renters_groups_are_their_own_everx_renters_and_any_that_lists_one(monkeypatch):
    users = [pwd.struct_passwd(("evx-5", "x", 61005, 61005, "", "/home/evx-5", "/bin/sh")),
             pwd.struct_passwd(("alice", "x", 1000, 1000, "", "/home/alice", "/bin/bash"))]
    groups = [grp.struct_group((RENTER_GROUP, "x", 998, [])), grp.struct_group(("video", "x", 44, ["evx-5"])),
              grp.struct_group(("alice", "x", 1000, [])), grp.struct_group(("staff", "x", 50, ["alice"]))]
    monkeypatch.setattr(isolation.pwd, "getpwall", lambda: users)
    monkeypatch.setattr(isolation.grp, "getgrall", lambda: groups)

    # A driver giving its nodes to everx-renters (mode 0660) would give every GPU to every renter.
    assert isolation.renter_gids() == {61005, 998, 44}


def test_without_a_driver_there_is_nothing_to_judge(tmp_path):
    assert driver_permissions_read(path=tmp_path / "absent") is None


def harden(tmp_path, text: str, *extra: str) -> tuple[int, Path]:
    """`everx-agent harden` on a driver parameter file of the test's; the host's sshd and deny
    files are test files too, the other ways in closed already (tests/agent/test_sshd.py covers them)."""
    (tmp_path / "params").write_text(text)
    target = tmp_path / "modprobe.d" / "everx-nvidia.conf"
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"url": "https://exchange.example", "token": "evxa_" + "x" * 40,
                                  **logins_closed(tmp_path)}))
    code = agent_main(["harden", "--config", str(config), "--driver-params", str(tmp_path / "params"),
                       "--modprobe-file", str(target), *extra])
    return code, target


def logins_closed(tmp_path) -> dict[str, str]:
    """Configuration settings naming a host sshd configuration that refuses renters (checked
    with sshd -T) and deny files that exist."""
    if not Path(SSHD).exists():
        pytest.skip("needs OpenSSH's sshd (make sshd installs it)")
    key = tmp_path / "host_key"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    host = tmp_path / "sshd_config"
    host.write_text(f"HostKey {key}\nDenyGroups {RENTER_GROUP}\n")
    for name in ("cron.deny", "at.deny"):
        (tmp_path / name).touch()
    return {"state_dir": str(tmp_path / "state"), "host_sshd_config": str(host),
            "host_sshd_drop_in": str(tmp_path / "50-everx.conf"), "cron_deny": str(tmp_path / "cron.deny"),
            "at_deny": str(tmp_path / "at.deny")}


def test_harden_says_what_to_fix_and_changes_nothing_without_apply(tmp_path, capsys):
    open_to_all = params(ModifyDeviceFiles=1, DeviceFileUID=0, DeviceFileGID=0, DeviceFileMode=438)
    code, target = harden(tmp_path, open_to_all)
    out = capsys.readouterr().out
    assert code == 1 and not target.exists()
    assert "would undo the GPUs' device permissions: it makes device files mode 0666, open to every" in out
    assert "options nvidia NVreg_DeviceFileUID=0 NVreg_DeviceFileGID=0 NVreg_DeviceFileMode=0660" in out


def test_harden_says_what_each_other_missing_fact_needs_from_the_last_report(tmp_path, capsys):
    safe = params(ModifyDeviceFiles=0)
    harden(tmp_path, safe)
    assert "No isolation report was measured yet: start the agent" in capsys.readouterr().out
    missing = ("processes_hidden", "disk_limited", "mig_enabled")  # MIG "missing": it is off, as wanted
    facts = {name: name not in missing for name in isolation.FACTS}
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "state" / "status.json").write_text(json.dumps({"isolation": {"facts": facts}}))

    code, _ = harden(tmp_path, safe)

    out = capsys.readouterr().out
    assert code == 0  # the driver and the host's logins hold: the rest is the host owner's to change
    assert "processes_hidden does not hold: hiding other renters' processes needs Linux 5.8 or later" in out
    assert "disk_limited does not hold: home images need a loop device and mkfs.ext4" in out
    assert "tmp_private does not hold" not in out and "mig_enabled" not in out
    facts.update(processes_hidden=True, disk_limited=True)
    (tmp_path / "state" / "status.json").write_text(json.dumps({"isolation": {"facts": facts}}))
    harden(tmp_path, safe)
    assert "Every other isolation fact held at the last report." in capsys.readouterr().out


def test_harden_apply_writes_the_driver_options_and_says_a_reboot_remains(tmp_path, capsys):
    code, target = harden(tmp_path, params(ModifyDeviceFiles=1, DeviceFileUID=0, DeviceFileGID=0,
                                           DeviceFileMode=438), "--apply")
    assert code == 0
    assert target.read_text().endswith(MODPROBE_OPTIONS) and stat.S_IMODE(target.stat().st_mode) == 0o644
    assert "Still needed: a reboot" in capsys.readouterr().out


def test_harden_on_a_safe_driver_writes_nothing(tmp_path, capsys):
    code, target = harden(tmp_path, params(ModifyDeviceFiles=0), "--apply")
    assert code == 0 and not target.exists()
    assert "keeps the GPUs' device permissions" in capsys.readouterr().out


@pytest.mark.parametrize(("value", "seconds"), [(0.5, 0.5), (10, 10.0), (0, 2.0), (-1, 2.0), ("1", 2.0),
                                                (True, 2.0)])
def test_the_device_check_interval_is_a_setting(tmp_path, value, seconds):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"url": "https://exchange.example", "token": "evxa_" + "x" * 40,
                                "device_check_seconds": value}))
    assert config_load(path=path).device_check_seconds == seconds


def test_the_watch_locks_a_node_opened_again_between_heartbeats(devices, fake_system, state_dir):
    reconciler = Reconciler(system=fake_system, store=StateStore(state_dir=state_dir),
                            now=lambda: SERVER_TIME, device_dir=devices)
    reconciler.reconcile(entries=[login(12, public_key(), gpu_indices=(0,))], remove_home=False)
    watch = DeviceWatch(reconciler=reconciler, interval=0.05)
    watch.start()
    try:
        os.chmod(devices / "nvidia0", DRIVER_DEFAULT_MODE)  # what a driver reload leaves
        deadline = time.monotonic() + 5
        while node_read(devices / "nvidia0").mode != 0o660 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        watch.stop()
    assert node_read(devices / "nvidia0").mode == 0o660
    # The repair, not the first lock: a drift is a node found unlike the agent left it.
    assert [event.to_json() for event in reconciler.device_drifts] == [
        {"at": SERVER_TIME, "node": "nvidia0", "found": "mode 0666, owner 0:0, ACL users 60012"}]
    assert not watch.is_alive()


def a_process(proc, pid: int, uid: int, comm: str, holding) -> None:
    """A stand-in /proc entry: process `pid` of `uid`, named `comm`, holding `holding` open."""
    folder = proc / str(pid)
    (folder / "fd").mkdir(parents=True)
    (folder / "comm").write_text(comm + "\n")
    os.symlink(holding, folder / "fd" / "3")
    os.chown(folder, uid, uid)


def test_a_gpu_waits_for_the_previous_renter_to_let_go_of_its_node(devices, tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    devices_lock(device_dir=devices, owners={0: RENTER_A}, proc_dir=proc)
    a_process(proc, 4242, RENTER_A, "python3", devices / "nvidia0")  # A's job outlived its rental
    a_process(proc, 77, 0, "dcgm-exporter", devices / "nvidia0")  # root's monitor is not A's

    held = devices_lock(device_dir=devices, owners={0: RENTER_B}, proc_dir=proc)

    assert held.held == {0: "processes 4242 of the previous rental hold its node open"}
    assert node_read(devices / "nvidia0").acl == b""  # closed to both until A lets go
    assert opened_as(RENTER_B, devices / "nvidia0") == errno.EACCES

    (proc / "4242" / "fd" / "3").unlink()
    handed = devices_lock(device_dir=devices, owners={0: RENTER_B}, proc_dir=proc)
    assert handed.held == {} and node_read(devices / "nvidia0").acl_users == (RENTER_B,)


def test_nvidias_persistence_daemon_does_not_hold_a_gpu_back(devices, tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    devices_lock(device_dir=devices, owners={0: RENTER_A}, proc_dir=proc)
    a_process(proc, 99, RENTER_A, "nvidia-persistenced", devices / "nvidia0")

    assert devices_lock(device_dir=devices, owners={0: RENTER_B}, proc_dir=proc).held == {}
    assert node_read(devices / "nvidia0").acl_users == (RENTER_B,)


GPU_0 = "GPU-00000000-0000-0000-0000-000000000000"
GPU_1 = "GPU-00000000-0000-0000-0000-000000000001"


@pytest.fixture
def driver(tmp_path) -> FakeCommands:
    """A fake nvidia-smi that lists no compute process until told otherwise."""
    commands = FakeCommands(tmp_path / "bin")
    commands.answer("nvidia-smi", list(COMPUTE_APPS_ARGS), out="")
    return commands


def test_a_gpu_the_driver_lists_a_process_on_is_not_handed_over(devices, tmp_path, driver):
    proc = tmp_path / "proc"
    proc.mkdir()
    lock = partial(devices_lock, device_dir=devices, proc_dir=proc, uuids={0: GPU_0, 1: GPU_1},
                   compute_apps=partial(compute_apps_read, search_path=driver.path))
    lock(owners={0: RENTER_A, 1: RENTER_A})
    assert driver.calls() == []  # nothing changed hands

    # A's job runs in a container or a namespace: no /proc entry of A's holds the node, the driver knows.
    driver.answer("nvidia-smi", list(COMPUTE_APPS_ARGS), out=f"{GPU_0}, 4242\n{GPU_0}, 4250\n")
    held = lock(owners={0: RENTER_B, 1: RENTER_B})

    assert held.held == {0: "nvidia-smi lists processes 4242,4250 on it"}
    assert node_read(devices / "nvidia0").acl == b""
    assert node_read(devices / "nvidia1").acl_users == (RENTER_B,)
    assert driver.calls() == [["nvidia-smi", *COMPUTE_APPS_ARGS]]  # once for the pass, not per GPU
    assert lock(owners={0: RENTER_B, 1: RENTER_B}, waiting=held.waiting).held == held.held  # still A's

    driver.answer("nvidia-smi", list(COMPUTE_APPS_ARGS), out="")
    handed = lock(owners={0: RENTER_B, 1: RENTER_B}, waiting=held.waiting)
    assert handed.held == {} and handed.waiting == {}
    assert node_read(devices / "nvidia0").acl_users == (RENTER_B,)
    driver.forget_calls()
    lock(owners={0: RENTER_B, 1: RENTER_B}, waiting=handed.waiting)
    assert driver.calls() == []  # an unchanged pass starts nothing


def test_a_process_left_running_holds_the_gpu_for_as_long_as_it_runs(devices, tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    devices_lock(device_dir=devices, owners={0: RENTER_A}, proc_dir=proc)
    a_process(proc, 4242, RENTER_A, "python3", devices / "nvidia0")
    first = devices_lock(device_dir=devices, owners={0: RENTER_B}, proc_dir=proc)

    # The node has no ACL for A any more, yet A's process keeps what it opened.
    second = devices_lock(device_dir=devices, owners={0: RENTER_B}, proc_dir=proc, waiting=first.waiting)
    assert second.held == {0: "processes 4242 of the previous rental hold its node open"}
    assert second.waiting == {0: frozenset({RENTER_A})}


@pytest.mark.parametrize(("answer", "reason"), [
    ({"code": 9, "err": "Unable to determine the device handle"},
     "nvidia-smi could not list the GPUs' processes (exit code 9)"),
    ({"out": "No devices were found\n"},
     "nvidia-smi listed the GPUs' processes in a way the agent cannot read: 'No devices were found'"),
    ({"out": "", "sleep": 5.0}, "nvidia-smi did not list the GPUs' processes within 0.5 s"),
])
def test_a_driver_that_cannot_say_keeps_the_gpu_back(devices, tmp_path, driver, answer, reason):
    driver.answer("nvidia-smi", list(COMPUTE_APPS_ARGS), **answer)
    apps = partial(compute_apps_read, search_path=driver.path, timeout=0.5)
    devices_lock(device_dir=devices, owners={0: RENTER_A}, proc_dir=tmp_path)
    assert devices_lock(device_dir=devices, owners={0: RENTER_B}, proc_dir=tmp_path, compute_apps=apps,
                        uuids={0: GPU_0}).held == {0: reason}


def test_without_nvidia_smi_the_proc_scan_decides(devices, tmp_path):
    apps = partial(compute_apps_read, search_path=str(tmp_path / "empty"))
    devices_lock(device_dir=devices, owners={0: RENTER_A}, proc_dir=tmp_path)
    handed = devices_lock(device_dir=devices, owners={0: RENTER_B}, proc_dir=tmp_path, compute_apps=apps)
    assert handed.held == {}


def test_without_the_rentals_uuids_any_process_the_driver_lists_holds_the_gpu(devices, tmp_path, driver):
    driver.answer("nvidia-smi", list(COMPUTE_APPS_ARGS), out=f"{GPU_1}, 77\n")
    apps = partial(compute_apps_read, search_path=driver.path)
    devices_lock(device_dir=devices, owners={0: RENTER_A}, proc_dir=tmp_path)
    assert devices_lock(device_dir=devices, owners={0: RENTER_B}, proc_dir=tmp_path, compute_apps=apps).held \
        == {0: "nvidia-smi lists processes 77 on a GPU it cannot name"}


def test_a_login_whose_gpu_is_held_is_not_ready(devices, fake_system, state_dir, tmp_path, driver, caplog):
    apps = partial(compute_apps_read, search_path=driver.path)
    reconciler = Reconciler(system=fake_system, store=StateStore(state_dir=state_dir),
                            now=lambda: SERVER_TIME, device_dir=devices, compute_apps=apps)
    first = {**login(12, public_key(), gpu_indices=(0,)), "gpu_uuids": [GPU_0]}
    reconciler.reconcile(entries=[first], remove_home=False)
    driver.answer("nvidia-smi", list(COMPUTE_APPS_ARGS), out=f"{GPU_0}, 4242\n")

    second = {**login(13, public_key(), gpu_indices=(0,)), "gpu_uuids": [GPU_0]}
    reconciler.reconcile(entries=[second], remove_home=False)

    assert reconciler.reports() == [{
        "rental_id": 13, "username": "evx-13", "state": "failed", "gpu_indices": [0],
        "detail": "GPU 0 is not handed over yet: nvidia-smi lists processes 4242 on it"}]
    assert "GPU 0 is not handed over yet: nvidia-smi lists processes 4242 on it" in caplog.text
    assert list(reconciler.device_drifts) == []  # the agent's own change, no drift
    driver.answer("nvidia-smi", list(COMPUTE_APPS_ARGS), out="")
    reconciler.devices_check()
    assert reconciler.reports()[0]["state"] == "ready"
    assert node_read(devices / "nvidia0").acl_users == (60013,)


def test_an_unchanged_pass_with_eight_rentals_starts_nothing(tmp_path, fake_system, state_dir, driver):
    if os.geteuid() != 0:
        pytest.skip("making device nodes needs root")
    folder = tmp_path / "eight"
    folder.mkdir()
    for index in range(8):
        os.mknod(folder / f"nvidia{index}", 0o666 | stat.S_IFCHR, os.makedev(195, index))
    apps = partial(compute_apps_read, search_path=driver.path)
    reconciler = Reconciler(system=fake_system, store=StateStore(state_dir=state_dir),
                            now=lambda: SERVER_TIME, device_dir=folder, compute_apps=apps)
    entries = [login(20 + index, public_key(), gpu_indices=(index,)) for index in range(8)]
    reconciler.reconcile(entries=entries, remove_home=False)
    actions = list(fake_system.actions)

    assert reconciler.reconcile(entries=entries, remove_home=False) == []

    # How long it takes is for a benchmark in bench/ to measure, never for a test to assert.
    assert driver.calls() == [] and fake_system.actions == actions


# A /dev the kernel will not lock ---------------------------------------------------------------

def test_a_gpu_node_without_acl_support_refuses_its_rental_and_disproves_the_lock(ramfs, fake_system,
                                                                                   state_dir):
    for index in (0, 1):
        os.mknod(ramfs / f"nvidia{index}", DRIVER_DEFAULT_MODE | stat.S_IFCHR, os.makedev(195, index))
    reconciler = Reconciler(system=fake_system, store=StateStore(state_dir=state_dir),
                            now=lambda: SERVER_TIME, device_dir=ramfs)
    reconciler.reconcile(entries=[login(21, public_key(), gpu_indices=(1,))], remove_home=False)

    [report] = reconciler.reports()
    # A ramfs keeps no extended attributes: the node cannot carry the rental's entry.
    assert (report["state"], report["gpu_indices"]) == ("refused", [1])
    assert report["detail"].startswith("GPU 1's node could not be locked: ")
    assert reconciler.disproved.facts == {"devices_locked"}
    # The GPU nobody rents is still closed to every renter: chmod needs no ACL.
    assert node_read(ramfs / "nvidia0") == NodeState(mode=0o660, uid=0, gid=0, acl=b"")
    assert reconciler.devices_check() == []  # tried again at each check, never a drift
