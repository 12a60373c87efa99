"""The desired state against a fake system: each change once, users the agent did not create never
touched, and a hostile answer never reaching root."""

import json
import os
import stat

import pytest
from everx_agent.reconcile import (
    DesiredState,
    Reconciler,
    StateStore,
    desired_gpus_check,
    desired_logins_read,
    reconcile_plan,
    ssh_public_key_check,
    user_comment,
)
from everx_agent.sandbox import SandboxRefused
from everx_agent.sshd import PortsExhausted

from tests.agent.conftest import SERVER_TIME, FakeSystem, login, public_key


@pytest.fixture
def reconciler(fake_system, state_dir) -> Reconciler:
    return Reconciler(system=fake_system, store=StateStore(state_dir=state_dir), now=lambda: SERVER_TIME)


def test_a_login_names_its_gpus_by_uuid_when_the_answer_gives_them(reconciler, fake_system):
    entry = {**login(12, public_key(), [3, 1]), "gpu_uuids": ["GPU-aaaa-3", "GPU-bbbb-1"]}
    reconciler.reconcile(entries=[entry], remove_home=False)
    exports = fake_system.files["evx-12"][".everx-gpus"]
    # In the order of the indices (1, then 3), each UUID with its own index.
    assert "CUDA_VISIBLE_DEVICES=GPU-bbbb-1,GPU-aaaa-3 " in exports
    assert "NVIDIA_VISIBLE_DEVICES=GPU-bbbb-1,GPU-aaaa-3 " in exports

    reconciler.reconcile(entries=[{**entry, "gpu_uuids": ["GPU-cccc-3", "GPU-bbbb-1"]}], remove_home=False)
    assert "CUDA_VISIBLE_DEVICES=GPU-bbbb-1,GPU-cccc-3 " in fake_system.files["evx-12"][".everx-gpus"]


@pytest.mark.parametrize(
    "uuids", [["GPU-a"], ["GPU-a", "GPU-a"], ["GPU-a", "not-a-gpu"], "GPU-a,GPU-b", [1, 2]]
)
def test_uuids_that_do_not_match_the_indices_fail_the_login(reconciler, fake_system, uuids):
    reconciler.reconcile(entries=[{**login(12, public_key(), [0, 1]), "gpu_uuids": uuids}], remove_home=False)
    [report] = reconciler.reports()
    assert report["state"] == "failed" and "GPU UUIDs" in report["detail"]
    assert fake_system.actions == []


def test_a_new_login_is_created_with_its_key_and_gpus(reconciler, fake_system, state_dir):
    key = public_key()
    changes = reconciler.reconcile(entries=[login(12, key, [1, 0])], remove_home=False)
    assert [(change.kind, change.username) for change in changes] == [("create", "evx-12")]
    assert fake_system.actions == [("useradd", "evx-12"), ("write", "evx-12")]
    assert fake_system.users["evx-12"] == "EverXCloud rental 12 (everx-agent)"
    assert fake_system.files["evx-12"]["authorized_keys"] == (
        'environment="CUDA_VISIBLE_DEVICES=0,1",environment="NVIDIA_VISIBLE_DEVICES=0,1",'
        f'environment="CUDA_DEVICE_ORDER=PCI_BUS_ID" {key}\n')
    assert "export CUDA_VISIBLE_DEVICES=0,1 NVIDIA_VISIBLE_DEVICES=0,1 CUDA_DEVICE_ORDER=PCI_BUS_ID\n" in \
        fake_system.files["evx-12"][".everx-gpus"]
    assert reconciler.reports() == [{"rental_id": 12, "username": "evx-12", "state": "ready",
                                     "gpu_indices": [0, 1], "detail": ""}]
    saved = json.loads((state_dir / "logins.json").read_text())
    assert saved["logins"]["evx-12"] == {"rental_id": 12, "username": "evx-12", "ssh_public_key": key,
                                         "gpu_indices": [0, 1], "created_at": SERVER_TIME, "ready": True,
                                         "gpu_uuids": [], "limits": None}
    assert stat.S_IMODE((state_dir / "logins.json").stat().st_mode) == 0o600


def test_the_user_is_recorded_before_useradd_runs(fake_system, state_dir):
    seen = {}

    class Watching(FakeSystem):
        def user_create(self, *, username, comment):
            seen["state"] = json.loads((state_dir / "logins.json").read_text())
            super().user_create(username=username, comment=comment)

    system = Watching()
    Reconciler(system=system, store=StateStore(state_dir=state_dir)).reconcile(
        entries=[login(12, public_key())], remove_home=False)
    assert seen["state"]["logins"]["evx-12"]["ready"] is False


def test_a_second_pass_of_the_same_answer_does_nothing(reconciler, fake_system):
    entries = [login(12, public_key(), [0]), login(13, public_key(), [1, 2])]
    reconciler.reconcile(entries=entries, remove_home=False)
    before = list(fake_system.actions)
    assert reconciler.reconcile(entries=entries, remove_home=False) == []
    assert fake_system.actions == before


def test_a_changed_key_or_gpus_rewrites_the_files_only(reconciler, fake_system):
    reconciler.reconcile(entries=[login(12, public_key(), [0])], remove_home=False)
    new_key = public_key("buyer@desktop")
    changes = reconciler.reconcile(entries=[login(12, new_key, [0])], remove_home=False)
    assert [change.kind for change in changes] == ["update"]
    assert new_key in fake_system.files["evx-12"]["authorized_keys"]
    reconciler.reconcile(entries=[login(12, new_key, [3, 4])], remove_home=False)
    assert fake_system.files["evx-12"]["authorized_keys"].startswith('environment="CUDA_VISIBLE_DEVICES=3,4"')
    assert fake_system.created() == ["evx-12"]
    assert reconciler.reports()[0]["gpu_indices"] == [3, 4]


def test_a_login_no_longer_listed_loses_its_key_then_its_processes_then_the_user(reconciler, fake_system,
                                                                               state_dir):
    reconciler.reconcile(entries=[login(12, public_key()), login(13, public_key(), [1])], remove_home=False)
    fake_system.actions.clear()
    changes = reconciler.reconcile(entries=[login(13, public_key(), [1])], remove_home=True)
    assert ("remove", "evx-12") in [(change.kind, change.username) for change in changes]
    assert fake_system.actions[:3] == [("unkey", "evx-12"), ("kill", "evx-12"), ("userdel", "evx-12", True)]
    assert "evx-12" not in fake_system.users
    assert [report["username"] for report in reconciler.reports()] == ["evx-13"]
    assert "evx-12" not in json.loads((state_dir / "logins.json").read_text())["logins"]


def test_home_is_kept_unless_asked(reconciler, fake_system):
    reconciler.reconcile(entries=[login(12, public_key())], remove_home=False)
    reconciler.reconcile(entries=[], remove_home=False)
    assert fake_system.actions[-1] == ("userdel", "evx-12", False)


def test_a_removal_that_fails_is_reported_and_retried(reconciler, fake_system):
    reconciler.reconcile(entries=[login(12, public_key())], remove_home=False)
    fake_system.fail["user_processes_kill"] = "3 processes of evx-12 survived SIGKILL"
    reconciler.reconcile(entries=[], remove_home=False)
    assert "evx-12" in fake_system.users
    assert reconciler.reports() == [{"rental_id": 12, "username": "evx-12", "state": "failed",
                                     "gpu_indices": [], "detail": "3 processes of evx-12 survived SIGKILL"}]
    del fake_system.fail["user_processes_kill"]
    reconciler.reconcile(entries=[], remove_home=False)
    assert "evx-12" not in fake_system.users
    assert reconciler.reports() == []


def test_a_user_the_agent_did_not_create_is_never_touched(state_dir):
    system = FakeSystem(users={"evx-12": "Someone's own account"})
    reconciler = Reconciler(system=system, store=StateStore(state_dir=state_dir))
    reconciler.reconcile(entries=[login(12, public_key())], remove_home=True)
    reconciler.reconcile(entries=[], remove_home=True)
    assert system.actions == []
    assert system.users == {"evx-12": "Someone's own account"}
    reconciler.reconcile(entries=[login(12, public_key())], remove_home=True)
    assert reconciler.reports() == [{"rental_id": 12, "username": "evx-12", "state": "failed",
                                     "gpu_indices": [0],
                                     "detail": "a user evx-12 exists that the agent did not create"}]


@pytest.mark.parametrize("username", [
    "root", "evx-1;rm", "../x", "evx-12\n", "evx-", "evx-012", "EVX-12", "evx-12 ", "evx-13", "daemon",
])
def test_hostile_or_wrong_usernames_are_ignored(reconciler, fake_system, username, caplog):
    entries = [login(12, public_key(), username=username)]
    assert reconciler.reconcile(entries=entries, remove_home=True) == []
    assert fake_system.actions == []
    assert reconciler.reports() == []
    assert "ignored a login the agent may not manage" in caplog.text


def test_odd_rental_ids_are_ignored(reconciler, fake_system):
    entries = [{**login(12, public_key()), "rental_id": rental_id}
               for rental_id in ("12", True, -12, 12.0, None)]
    reconciler.reconcile(entries=entries + ["evx-12", None], remove_home=False)
    assert fake_system.actions == []


def test_an_answer_without_a_list_of_logins_removes_nothing(reconciler, fake_system):
    reconciler.reconcile(entries=[login(12, public_key())], remove_home=False)
    fake_system.actions.clear()
    for entries in (None, {"evx-12": {}}, "everything"):
        assert reconciler.reconcile(entries=entries, remove_home=True) == []
    assert fake_system.actions == []
    assert reconciler.reports()[0]["state"] == "ready"


@pytest.mark.parametrize(("key", "detail"), [
    ("", "the SSH public key is missing"),
    ("ssh-dss AAAAB3NzaC1kc3MAAACBAP buyer", "the SSH public key is not of a known type"),
    ('command="rm -rf /" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA',
     "the SSH public key is not of a known type"),
    ("ssh-ed25519 not*base64", "the SSH public key's body is not base64"),
    ("ssh-ed25519 AAAAB3NzaC1yc2EAAAADAQAB", "the SSH public key's body is not of the type it says"),
    ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA buyer\nssh-ed25519 AAAA",
     "the SSH public key is not one line of printable text"),
    ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA buyer\x1b[2J",
     "the SSH public key is not one line of printable text"),
])
def test_bad_keys_are_reported_failed_and_nothing_is_created(reconciler, fake_system, key, detail):
    reconciler.reconcile(entries=[login(12, key)], remove_home=False)
    assert fake_system.actions == []
    assert reconciler.reports() == [{"rental_id": 12, "username": "evx-12", "state": "failed",
                                     "gpu_indices": [], "detail": detail}]


def test_every_known_key_type_is_accepted():
    import base64
    import struct

    from everx_agent.reconcile import KEY_TYPES

    for key_type in KEY_TYPES:
        blob = struct.pack(">I", len(key_type)) + key_type.encode() + b"\x00\x00\x00\x20" + b"k" * 32
        text = f"{key_type}  {base64.b64encode(blob).decode()}   me@host  "
        assert ssh_public_key_check(text) == f"{key_type} {base64.b64encode(blob).decode()} me@host"


@pytest.mark.parametrize(("indices", "detail"), [
    ([], "the GPU indices are missing"),
    (None, "the GPU indices are missing"),
    ([64], "the GPU indices must be whole numbers from 0 to 63"),
    ([-1], "the GPU indices must be whole numbers from 0 to 63"),
    (["0"], "the GPU indices must be whole numbers from 0 to 63"),
    ([True], "the GPU indices must be whole numbers from 0 to 63"),
    ([1, 1], "the GPU indices repeat"),
])
def test_bad_gpu_indices_are_reported_failed(indices, detail):
    state = desired_logins_read(entries=[{**login(12, public_key()), "gpu_indices": indices}])
    assert state.logins == {}
    assert state.invalid["evx-12"].detail == detail


def test_a_bad_entry_for_an_existing_login_leaves_it_as_it_is(reconciler, fake_system):
    reconciler.reconcile(entries=[login(12, public_key())], remove_home=False)
    fake_system.actions.clear()
    reconciler.reconcile(entries=[login(12, "not a key")], remove_home=False)
    assert fake_system.actions == []
    assert reconciler.reports()[0]["state"] == "failed"


def test_a_failed_useradd_is_reported_forgotten_and_retried(reconciler, fake_system, state_dir):
    fake_system.fail["user_create"] = "useradd failed (exit code 1): useradd: cannot lock /etc/passwd"
    reconciler.reconcile(entries=[login(12, public_key())], remove_home=False)
    detail = "useradd failed (exit code 1): useradd: cannot lock /etc/passwd"
    assert reconciler.reports() == [{"rental_id": 12, "username": "evx-12", "state": "failed",
                                     "gpu_indices": [0], "detail": detail}]
    assert json.loads((state_dir / "logins.json").read_text())["logins"] == {}
    del fake_system.fail["user_create"]
    reconciler.reconcile(entries=[login(12, public_key())], remove_home=False)
    assert reconciler.reports()[0]["state"] == "ready"


def test_a_user_someone_else_created_while_useradd_ran_stays_theirs(state_dir):
    class Racing(FakeSystem):
        def user_create(self, *, username, comment):
            from everx_agent.system import SystemCommandError

            self.users[username] = "The seller's own"
            raise SystemCommandError("useradd failed (exit code 9): useradd: user 'evx-12' already exists")

    system = Racing()
    reconciler = Reconciler(system=system, store=StateStore(state_dir=state_dir))
    reconciler.reconcile(entries=[login(12, public_key())], remove_home=False)
    reconciler.reconcile(entries=[], remove_home=True)
    assert system.users == {"evx-12": "The seller's own"}


def test_a_restart_from_the_saved_state_changes_nothing(reconciler, fake_system, state_dir):
    entries = [login(12, public_key(), [0, 1]), login(13, public_key(), [2])]
    reconciler.reconcile(entries=entries, remove_home=False)
    fake_system.actions.clear()
    restarted = Reconciler(system=fake_system, store=StateStore(state_dir=state_dir))
    assert [report["state"] for report in restarted.reports()] == ["ready", "ready"]
    assert restarted.reconcile(entries=entries, remove_home=False) == []
    assert fake_system.actions == []


def test_a_restart_between_useradd_and_the_files_finishes_the_login(fake_system, state_dir):
    fake_system.fail["login_files_write"] = "authorized_keys could not be written: No space left on device"
    Reconciler(system=fake_system, store=StateStore(state_dir=state_dir)).reconcile(
        entries=[login(12, public_key())], remove_home=False)
    del fake_system.fail["login_files_write"]
    restarted = Reconciler(system=fake_system, store=StateStore(state_dir=state_dir))
    assert restarted.reports()[0] == {"rental_id": 12, "username": "evx-12", "state": "failed",
                                      "gpu_indices": [0], "detail": "interrupted before it was ready"}
    changes = restarted.reconcile(entries=[login(12, public_key())], remove_home=False)
    assert [change.kind for change in changes] == ["update"]
    assert fake_system.created() == ["evx-12"]
    assert restarted.reports()[0]["state"] == "ready"


def test_a_user_deleted_by_hand_is_created_again(reconciler, fake_system):
    entries = [login(12, public_key())]
    reconciler.reconcile(entries=entries, remove_home=False)
    del fake_system.users["evx-12"]
    reconciler.reconcile(entries=entries, remove_home=False)
    assert fake_system.created() == ["evx-12", "evx-12"]


def test_the_plan_removes_before_it_creates():
    from everx_agent.reconcile import DesiredLogin, ManagedLogin

    managed = {"evx-5": ManagedLogin(rental_id=5, username="evx-5", ssh_public_key="k", gpu_indices=(0,),
                                     created_at=SERVER_TIME, ready=True)}
    desired = DesiredState(logins={"evx-6": DesiredLogin(rental_id=6, username="evx-6", ssh_public_key="k",
                                                         gpu_indices=(0,))})
    plan = reconcile_plan(desired=desired, managed=managed, user_exists=lambda name: name == "evx-5")
    assert [(action.kind, action.username) for action in plan] == [("remove", "evx-5"), ("create", "evx-6")]


def test_a_recorded_user_whose_comment_is_not_ours_is_forgotten_not_removed(state_dir):
    system = FakeSystem()
    reconciler = Reconciler(system=system, store=StateStore(state_dir=state_dir))
    reconciler.reconcile(entries=[login(12, public_key())], remove_home=False)
    system.users["evx-12"] = "changed by hand"
    system.actions.clear()
    reconciler.reconcile(entries=[], remove_home=True)
    assert system.actions == []
    assert reconciler.reports() == []
    assert user_comment(12) == "EverXCloud rental 12 (everx-agent)"


def test_a_state_file_that_cannot_be_saved_is_a_failure_and_nothing_is_created(reconciler, fake_system,
                                                                             monkeypatch):
    def full_disk(logins):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(reconciler.store, "save", full_disk)
    reconciler.reconcile(entries=[login(12, public_key())], remove_home=False)
    assert fake_system.actions == []
    assert reconciler.managed == {}
    assert reconciler.reports()[0]["detail"] == \
        "the agent's state could not be saved: No space left on device"


def test_a_gpu_given_to_two_rentals_refuses_both_and_the_rest_converge(reconciler, fake_system):
    entries = [login(12, public_key(), [0, 1]), login(13, public_key(), [1]), login(14, public_key(), [2])]
    reconciler.reconcile(entries=entries, remove_home=False)

    assert fake_system.created() == ["evx-14"]
    assert reconciler.reports() == [
        {"rental_id": 12, "username": "evx-12", "state": "failed", "gpu_indices": [0, 1],
         "detail": "GPU 1 is given to rentals 12 and 13 at once"},
        {"rental_id": 13, "username": "evx-13", "state": "failed", "gpu_indices": [1],
         "detail": "GPU 1 is given to rentals 12 and 13 at once"},
        {"rental_id": 14, "username": "evx-14", "state": "ready", "gpu_indices": [2], "detail": ""},
    ]


def test_a_rental_already_here_keeps_its_gpu_when_another_is_given_it_too(reconciler, fake_system):
    reconciler.reconcile(entries=[login(12, public_key(), [0])], remove_home=False)
    fake_system.actions.clear()
    entries = [login(12, public_key(), [0]), login(13, public_key(), [0])]
    reconciler.reconcile(entries=entries, remove_home=False)

    assert fake_system.actions == []
    assert [report["state"] for report in reconciler.reports()] == ["failed", "failed"]
    assert reconciler.managed["evx-12"].gpu_indices == (0,)


def test_a_gpu_this_server_does_not_have_refuses_the_rental(fake_system, state_dir, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("making device nodes needs root")
    devices = tmp_path / "dev"
    devices.mkdir()
    for index in (0, 1):
        os.mknod(devices / f"nvidia{index}", 0o600 | stat.S_IFCHR, os.makedev(195, index))
    reconciler = Reconciler(system=fake_system, store=StateStore(state_dir=state_dir),
                            now=lambda: SERVER_TIME, device_dir=devices)

    reconciler.reconcile(entries=[login(12, public_key(), [1, 5]), login(13, public_key(), [0])],
                         remove_home=False)

    assert fake_system.created() == ["evx-13"]
    assert reconciler.reports()[0] == {"rental_id": 12, "username": "evx-12", "state": "failed",
                                       "gpu_indices": [1, 5],
                                       "detail": "GPU 5 is not on this server (its GPUs: 0, 1)"}


def test_the_gpu_check_reads_no_device_folder_when_it_has_none():
    state = desired_logins_read(entries=[login(12, public_key(), [40])])
    desired_gpus_check(state, seen=None)
    assert list(state.logins) == ["evx-12"]
    desired_gpus_check(state, seen=frozenset())
    assert state.invalid["evx-12"].detail == "GPU 40 is not on this server (its GPUs: none)"


# Refused: this host cannot deliver the rental as sold ----------------------------------------

class RefusingSandboxes:
    """Sandboxes whose kernel refuses the memory limit, as `cgroup_write` reports it."""

    def ensure(self, spec):
        raise SandboxRefused("memory.limit_in_bytes of rental-12 refused '67108864': Invalid argument",
                             fact="memory_limited")

    def rentals(self):
        return set()


class AccountsSystem(FakeSystem):
    def user_account(self, *, username):
        return self.user_uid(username=username), 60000, f"/home/{username}"


def test_a_refused_sandbox_reports_the_login_refused_and_disproves_its_fact(state_dir):
    reconciler = Reconciler(system=AccountsSystem(), store=StateStore(state_dir=state_dir),
                            now=lambda: SERVER_TIME, sandboxes=RefusingSandboxes())
    limits = {"cpu_cores": 1, "memory_mib": 64, "disk_gb": 1, "processes": 64}
    reconciler.reconcile(entries=[{**login(12, public_key()), "limits": limits}], remove_home=False)

    assert reconciler.reports() == [{
        "rental_id": 12, "username": "evx-12", "state": "refused", "gpu_indices": [0],
        "detail": "memory.limit_in_bytes of rental-12 refused '67108864': Invalid argument",
    }]
    assert reconciler.disproved.facts == {"memory_limited"}
    assert reconciler.managed["evx-12"].ready is False


def test_a_failure_that_may_pass_stays_failed_and_disproves_nothing(fake_system, state_dir):
    fake_system.fail["user_create"] = "useradd: cannot lock /etc/passwd; try again later."
    reconciler = Reconciler(system=fake_system, store=StateStore(state_dir=state_dir),
                            now=lambda: SERVER_TIME)
    reconciler.reconcile(entries=[login(12, public_key())], remove_home=False)
    [report] = reconciler.reports()
    assert report["state"] == "failed" and reconciler.disproved.facts == frozenset()


class RecordingSandboxes:
    """Sandboxes that only note what was asked of them."""

    def __init__(self):
        self.asked: list[tuple[str, int]] = []

    def ensure(self, spec):
        self.asked.append(("ensure", spec.rental_id))

    def end(self, spec, *, remove_home):
        self.asked.append(("end", spec.rental_id))

    def rentals(self):
        return set()


class PortlessSshd:
    """A rental sshd whose range is full."""

    def ensure(self, *, username, authorized_keys, spawn=None):
        raise PortsExhausted("no free SSH port is left in 41000-41000 (1 used by rentals, 0 held by other "
                             "processes)")

    def stop(self, *, username):
        pass

    def port_of(self, username):
        return None


class GroupedSystem(AccountsSystem):
    def renter_group_join(self, *, username):
        pass


def test_a_login_refused_after_its_sandbox_was_made_has_the_sandbox_ended_with_it(state_dir):
    sandboxes = RecordingSandboxes()
    reconciler = Reconciler(system=GroupedSystem(), store=StateStore(state_dir=state_dir),
                            now=lambda: SERVER_TIME, sandboxes=sandboxes, sshd=PortlessSshd())
    limits = {"cpu_cores": 1, "memory_mib": 64, "disk_gb": 1, "processes": 64}
    reconciler.reconcile(entries=[{**login(12, public_key()), "limits": limits}], remove_home=True)
    assert reconciler.reports()[0]["state"] == "refused"

    reconciler.reconcile(entries=[], remove_home=True)

    # Its home image was mounted before its sshd found no port: it is unmounted before userdel.
    assert sandboxes.asked == [("ensure", 12), ("end", 12)]
    assert reconciler.managed == {}
