"""`UnixSystem` on the real machine: a user created, its key and GPUs installed, a process of it
killed and the user deleted. Runs as root only (CI does), and always cleans up."""

import os
import pwd
import secrets
import shutil
import stat
import subprocess
import threading
from pathlib import Path

import pytest
from everx_agent.reconcile import Reconciler, StateStore
from everx_agent.system import SOURCE_LINE, SystemCommandError, UnixSystem

from tests.agent.conftest import login, public_key

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd", path="/usr/sbin:/sbin:/usr/bin") is None,
    reason="needs root and useradd",
)


@pytest.fixture
def rental_id():
    """A rental id no real user has; the user `evx-<id>` is removed whatever the test did."""
    number = secrets.randbelow(10**9) + 10**9
    yield number
    username = f"evx-{number}"
    subprocess.run(["pkill", "-KILL", "-u", username], check=False, capture_output=True)
    subprocess.run(["userdel", "--remove", username], check=False, capture_output=True)


def test_a_login_from_creation_to_removal_on_the_real_system(rental_id, tmp_path):
    username = f"evx-{rental_id}"
    key = public_key()
    system = UnixSystem()
    reconciler = Reconciler(system=system, store=StateStore(state_dir=tmp_path / "state"))
    sleeper = None
    try:
        reconciler.reconcile(entries=[login(rental_id, key, [2, 3])], remove_home=True)
        assert reconciler.reports()[0]["state"] == "ready", reconciler.reports()
        entry = pwd.getpwnam(username)
        assert entry.pw_gecos == f"EverXCloud rental {rental_id} (everx-agent)"
        assert entry.pw_shell == "/bin/bash"
        home = Path(entry.pw_dir)
        ssh_dir, keys = home / ".ssh", home / ".ssh" / "authorized_keys"
        assert stat.S_IMODE(ssh_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE(keys.stat().st_mode) == 0o600
        assert (keys.stat().st_uid, ssh_dir.stat().st_uid) == (entry.pw_uid, entry.pw_uid)
        assert keys.read_text() == (
            'environment="CUDA_VISIBLE_DEVICES=2,3",environment="NVIDIA_VISIBLE_DEVICES=2,3",'
            f'environment="CUDA_DEVICE_ORDER=PCI_BUS_ID" {key}\n')
        assert (home / ".bashrc").read_text().splitlines()[0] == SOURCE_LINE
        assert SOURCE_LINE in (home / ".profile").read_text().splitlines()
        printed = subprocess.run(["/bin/bash", "-lc", "echo $CUDA_VISIBLE_DEVICES $NVIDIA_VISIBLE_DEVICES"],
                                 user=username, cwd=home, env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
                                 capture_output=True, text=True, timeout=10, check=True)
        assert printed.stdout.split() == ["2,3", "2,3"]

        # A second pass writes nothing; a new key replaces the file, the source line stays single.
        assert reconciler.reconcile(entries=[login(rental_id, key, [2, 3])], remove_home=True) == []
        new_key = public_key("buyer@desktop")
        reconciler.reconcile(entries=[login(rental_id, new_key, [4])], remove_home=True)
        assert keys.read_text().endswith(f" {new_key}\n")
        assert (home / ".bashrc").read_text().splitlines().count(SOURCE_LINE) == 1

        sleeper = subprocess.Popen(["sleep", "1000"], user=username, cwd="/")
        # Its parent reaps it once killed, as sshd would: a zombie would keep the user "in use".
        reaper = threading.Thread(target=sleeper.wait, daemon=True)
        reaper.start()
        reconciler.reconcile(entries=[], remove_home=True)
        assert reconciler.reports() == []
        reaper.join(timeout=10)
        assert sleeper.returncode == -9
        with pytest.raises(KeyError):
            pwd.getpwnam(username)
        assert not home.exists()
    finally:
        if sleeper is not None and sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()


def test_a_link_planted_in_the_home_is_never_followed(rental_id, tmp_path):
    username = f"evx-{rental_id}"
    target = tmp_path / "victim"
    target.mkdir()
    system = UnixSystem()
    system.user_create(username=username, comment="test")
    home = Path(pwd.getpwnam(username).pw_dir)
    shutil.rmtree(home / ".ssh", ignore_errors=True)
    (home / ".ssh").symlink_to(target)
    with pytest.raises(SystemCommandError, match="is not a directory"):
        system.login_files_write(username=username, authorized_keys="key\n", gpu_exports="export X=1\n")
    assert list(target.iterdir()) == []


def test_removing_a_user_that_is_already_gone_is_fine(rental_id):
    system = UnixSystem()
    username = f"evx-{rental_id}"
    system.user_delete(username=username, remove_home=False)
    system.login_files_remove(username=username)
    assert not system.user_exists(username=username)


def test_a_missing_command_is_reported_not_raised_as_something_else():
    system = UnixSystem(commands={"useradd": None})
    with pytest.raises(SystemCommandError, match="useradd is not installed"):
        system.user_create(username="evx-1", comment="x")
