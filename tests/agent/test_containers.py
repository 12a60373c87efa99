"""Container mode (everx_agent.containers).

- Against fake `docker` and `podman` programs on a folder of the test: each records its arguments
  as a JSON line and answers `ps`, `image inspect`, `pull`, `run`, `rm` and `start` from a state
  file, so the exact flags, pulls by digest, reconciling by label and a hanging runtime are checked
  on a machine without either.
- For real with Podman (root, Debian's podman, runc, slirp4netns and debootstrap; `make podman`
  installs them): a Debian image built once with debootstrap and cached in .tools/container-image,
  a private storage root and `containers.conf` in the test's folder, ports on 127.0.0.1 only; the
  buyer logs in over SSH to the container the agent made from their rental.
"""

import base64
import errno
import io
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from everx_agent import main as agent_main
from everx_agent.config import DEFAULT_CONTAINER_LISTEN_ADDRESS, AgentConfig, config_load
from everx_agent.containers import (
    CAPABILITIES,
    ContainerReconciler,
    ContainerRuntime,
    Template,
    TemplateInvalid,
    container_self_test,
    container_templates_held,
    container_templates_read,
    storage_quota_read,
    template_read,
)
from everx_agent.devices import node_read
from everx_agent.isolation import SANDBOX_FACTS, login_facts_unmeasured
from everx_agent.reconcile import Reconciler, StateStore
from everx_agent.sshd import PortBook, RentalSshd, SshdSettings, port_bindable

from sellers.isolation import isolation_report_check
from tests.agent.conftest import TOKEN, FakeSystem, login, public_key
from tests.agent.fakes import FakeCommands
from tests.agent.podman_image import (
    IMAGE_TAR,
    SSHD_COMMAND,
    SSHD_CONFIG,
    ImageUnavailable,
    Podman,
    image_tar_build,
    podman_missing,
)

DIGEST = "sha256:" + "ab" * 32
OTHER_DIGEST = "sha256:" + "cd" * 32
IMAGE = f"registry.example/everx/cuda-ssh@{DIGEST}"
UUID_A = "GPU-3f2c8a51-7d4e-1b9a-c0d2-5e6f7a8b9c01"
UUID_B = "GPU-0c1d2e3f-4a5b-6c7d-8e9f-a0b1c2d3e4f5"
LIMITS = {"cpu_cores": 8, "memory_mib": 65536, "disk_gb": 500, "processes": 4096}
PORTS = range(42000, 42010)

FAKE_RUNTIME = r'''
import json, sys, time
from pathlib import Path

folder = Path(__file__).resolve().parent
name, args = Path(sys.argv[0]).name, sys.argv[1:]
with open(folder / "calls.jsonl", "a") as log:
    log.write(json.dumps([name, *args]) + "\n")
state = json.loads((folder / "state.json").read_text())
command = args[0] if args else ""
if command in state["hang"]:
    time.sleep(3600)
if command in state["fail"]:
    sys.stderr.write(state["fail"][command] + "\n")
    sys.exit(125)


def save():
    (folder / "state.json").write_text(json.dumps(state))


def option_values(option):
    return [args[at + 1] for at, value in enumerate(args[:-1]) if value == option]


if command == "info":
    if name not in state["info"]:
        sys.stderr.write("Cannot connect to the daemon\n")
        sys.exit(125)
    print(state["info"][name])
elif command == "ps":
    wanted = [value.split("=", 1)[1] for value in option_values("--filter")]
    listed = [c for c in state["containers"] if all(label in c["labels"] for label in wanted)]
    if name == "podman":
        print(json.dumps([{"Id": c["id"], "Names": [c["name"]], "Labels": c["labels"], "State": c["state"]}
                          for c in listed]))
    for c in listed if name == "docker" else []:
        labels = ",".join(f"{key}={value}" for key, value in c["labels"].items())
        print(json.dumps({"ID": c["id"], "Names": c["name"], "Labels": labels, "State": c["state"]}))
elif command == "image" and args[1] == "inspect":
    if args[2] not in state["images"]:
        sys.stderr.write(f"Error: {args[2]}: image not known\n")
        sys.exit(125)
    print(json.dumps([state["images"][args[2]]]))
elif command == "pull":
    digest = state.get("served_digest") or args[1].rsplit("@", 1)[1]
    state["images"][args[1]] = {"Id": "image-1", "Digest": digest, "Size": 123,
                                "RepoDigests": [args[1].rsplit("@", 1)[0] + "@" + digest]}
    save()
elif command == "rmi":
    state["images"] = {ref: image for ref, image in state["images"].items() if image["Id"] != args[-1]}
    save()
elif command == "run" and "--rm" in args:
    print(state["self_test_output"])
elif command == "run":
    labels = dict(value.split("=", 1) for value in option_values("--label"))
    number = len(state["made"]) + 1
    state["made"].append(number)
    state["containers"].append({"id": f"c{number:011d}", "name": option_values("--name")[0],
                                "labels": labels, "state": "running"})
    save()
    print(f"c{number:011d}")
elif command == "rm":
    state["containers"] = [c for c in state["containers"] if args[-1] not in (c["id"], c["name"])]
    save()
elif command == "start":
    for c in state["containers"]:
        if args[-1] in (c["id"], c["name"]):
            c["state"] = "running"
    save()
'''


class FakeRuntime:
    """The fake programs' folder: `calls()` lists every call, `state` is what they answer from."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir()
        for name in ("docker", "podman"):
            program = folder / name
            program.write_text(f"#!{sys.executable}\n{FAKE_RUNTIME}")
            program.chmod(0o755)
        self.state = {"containers": [], "images": {}, "hang": [], "fail": {}, "made": [],
                      "self_test_output": "", "info": {}}
        self.save()

    def save(self) -> None:
        (self.folder / "state.json").write_text(json.dumps(self.state))

    def load(self) -> dict:
        self.state = json.loads((self.folder / "state.json").read_text())
        return self.state

    def set(self, **values) -> None:
        self.load()
        self.state.update(values)
        self.save()

    def image_held(self, image: str = IMAGE, digest: str = DIGEST) -> None:
        self.load()
        self.state["images"][image] = {"Id": "image-0", "Digest": digest, "Size": 100,
                                       "RepoDigests": [f"{image.rsplit('@', 1)[0]}@{digest}"]}
        self.save()

    def calls(self) -> list[list[str]]:
        path = self.folder / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def commands(self) -> list[str]:
        return [" ".join(call[1:3]) if call[1] == "image" else call[1] for call in self.calls()]

    def forget_calls(self) -> None:
        (self.folder / "calls.jsonl").unlink(missing_ok=True)

    def runtime(self, name: str = "podman", **options) -> ContainerRuntime:
        options.setdefault("gpu_mode", "cdi" if name == "podman" else "gpus")
        return ContainerRuntime(binary=str(self.folder / name), **options)


@pytest.fixture
def fake(tmp_path) -> FakeRuntime:
    runtime = FakeRuntime(tmp_path / "bin")
    runtime.image_held()
    return runtime


def container_entry(rental_id: int, key: str, *, gpus=((0, UUID_A),), limits=None, **extra) -> dict:
    return {**login(rental_id, key, [index for index, _ in gpus]), "gpu_uuids": [uuid for _, uuid in gpus],
            "isolation": "container", "limits": limits or LIMITS, **extra}


def reconciler_for(runtime: ContainerRuntime, state_dir: Path, template: Template | None = None,
                   **options) -> ContainerReconciler:
    return ContainerReconciler(runtime=runtime, templates=[template or Template(image=IMAGE)],
                               state_dir=state_dir, listen_address="127.0.0.1", ports=PORTS,
                               port_free=lambda address, port: True, **options)


def run_call(fake: FakeRuntime) -> list[str]:
    runs = [call for call in fake.calls() if call[1] == "run"]
    assert len(runs) == 1, runs
    return runs[0]


# The run command -----------------------------------------------------------------------------

def expected_run(name: str, gpu_arguments: list[str], *, files: Path, config: str) -> list[str]:
    capabilities = [argument for capability in CAPABILITIES for argument in ("--cap-add", capability)]
    return [
        name, "run", "--detach", "--name", "evx-12", "--hostname", "evx-12",
        "--label", "everx.rental=12", "--label", f"everx.config={config}", "--label", "everx.ports=22:42000",
        *gpu_arguments, "--cpus", "8", "--memory", "65536m", "--memory-swap", "65536m",
        "--pids-limit", "4096", "--shm-size", "32768m",
        "--security-opt", "no-new-privileges", "--cap-drop", "ALL", *capabilities,
        "--publish", "127.0.0.1:42000:22",
        "--volume", f"{files}/authorized_keys:/etc/ssh/everx_authorized_keys:ro",
        IMAGE,
    ]


@pytest.mark.parametrize("name, gpu_arguments", [
    ("docker", ["--gpus", f'"device={UUID_A},{UUID_B}"']),
    ("podman", ["--device", f"nvidia.com/gpu={UUID_A}", "--device", f"nvidia.com/gpu={UUID_B}"]),
])
def test_a_rental_runs_with_its_gpus_by_uuid_its_limits_and_sshd_s_capabilities_only(fake, tmp_path, name,
                                                                                    gpu_arguments):
    key = public_key()
    containers = reconciler_for(fake.runtime(name), tmp_path / "state")

    _, changes = containers.reconcile(entries=[container_entry(12, key, gpus=((0, UUID_A), (1, UUID_B)))])

    assert [(change.kind, change.username) for change in changes] == [("container", "evx-12")]
    call = run_call(fake)
    # The config label is a digest of the rental's settings: a change of them means a new container.
    config = next(value for value in call if value.startswith("everx.config=")).split("=", 1)[1]
    files = tmp_path / "state" / "containers" / "evx-12"
    assert len(config) == 16
    assert call == expected_run(name, gpu_arguments, files=files, config=config)
    assert (files / "authorized_keys").read_text() == key + "\n"
    assert stat.S_IMODE((files / "authorized_keys").stat().st_mode) == 0o600
    assert containers.reports() == [{"rental_id": 12, "username": "evx-12", "state": "ready",
                                     "gpu_indices": [0, 1], "detail": "", "ssh_port": 42000,
                                     "service_ports": {}}]


@pytest.mark.parametrize("storage_quota, expected", [(True, ["--storage-opt", "size=500G"]), (False, [])])
def test_the_disk_is_limited_only_where_the_storage_enforces_it(fake, tmp_path, storage_quota, expected):
    containers = reconciler_for(fake.runtime("docker", storage_quota=storage_quota), tmp_path / "state")

    containers.reconcile(entries=[container_entry(12, public_key())])

    call = run_call(fake)
    found = [call[at:at + 2] for at, value in enumerate(call) if value == "--storage-opt"]
    assert found == ([expected] if expected else [])


@pytest.mark.parametrize("name", ["docker", "podman"])
def test_a_rental_never_gets_privileges_host_namespaces_or_the_runtime_socket(fake, tmp_path, name):
    containers = reconciler_for(fake.runtime(name, network="bridge"), tmp_path / "state")

    containers.reconcile(entries=[container_entry(12, public_key(), gpus=((0, UUID_A), (1, UUID_B)))])

    call = run_call(fake)
    assert "--privileged" not in call
    for option in ("--pid", "--ipc", "--uts", "--userns", "--cgroupns", "--network"):
        values = [call[at + 1] for at, value in enumerate(call) if value == option]
        assert "host" not in values and not any(value.startswith("container:") for value in values)
    assert not any("docker.sock" in value or "podman.sock" in value for value in call)
    assert call[call.index("--cap-drop") + 1] == "ALL"
    assert [call[at + 1] for at, value in enumerate(call) if value == "--cap-add"] == list(CAPABILITIES)


MOUNTINFO = """22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
41 22 8:17 / /var/lib/docker rw,relatime shared:20 - xfs /dev/sdb1 rw,attr2,inode64,logbufs=8,prjquota
42 22 8:33 / /var/lib/containers rw,relatime shared:21 - xfs /dev/sdc1 rw,attr2,inode64,noquota
43 22 8:49 / /srv/my\\040store rw,relatime shared:22 - xfs /dev/sdd1 rw,attr2,pquota
"""


@pytest.mark.parametrize("driver, root, enforced", [
    ("overlay2", "/var/lib/docker", True),
    ("overlay2", "/var/lib/docker/overlay2", True),
    ("overlay", "/var/lib/containers/storage", False),  # XFS without project quotas
    ("overlay", "/var/lib/dockerish", False),  # on the ext4 root, not under /var/lib/docker
    ("overlay", "/srv/my store/containers", True),
    ("vfs", "/var/lib/docker", False),
    ("btrfs", "/var/lib/docker", False),
])
def test_the_disk_limit_is_enforced_only_on_overlay_over_xfs_with_project_quotas(tmp_path, driver, root,
                                                                                 enforced):
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(MOUNTINFO)

    assert storage_quota_read(driver=driver, root=root, mountinfo=mountinfo) is enforced


def test_a_host_network_is_refused_by_the_runtime(fake):
    with pytest.raises(ValueError, match="never joins"):
        fake.runtime("docker", network="host")


def test_stand_in_nodes_are_passed_as_devices(fake, tmp_path):
    runtime = fake.runtime("podman", gpu_mode="nodes", device_dir=tmp_path / "dev")
    containers = reconciler_for(runtime, tmp_path / "state")

    containers.reconcile(entries=[container_entry(12, public_key(), gpus=((3, UUID_A),))])

    call = run_call(fake)
    assert [call[at + 1] for at, value in enumerate(call) if value == "--device"] == [
        f"{tmp_path / 'dev' / 'nvidia3'}:/dev/nvidia3"]


def test_a_template_s_files_mounts_and_ports_reach_the_container(fake, tmp_path):
    node = tmp_path / "nvidia1"
    node.write_text("")
    template = template_read({
        "image": IMAGE, "ports": [8888, 22], "key_path": "/home/user/.ssh/authorized_keys",
        "command": ["/usr/sbin/sshd", "-D"], "files": {"/etc/ssh/sshd_config": "Port 22\n"},
        "mounts": {str(node): "/opt/nvidia1"},
    })
    containers = reconciler_for(fake.runtime("podman"), tmp_path / "state", template=template)

    containers.reconcile(entries=[container_entry(12, public_key())])

    call = run_call(fake)
    files = tmp_path / "state" / "containers" / "evx-12"
    assert [call[at + 1] for at, value in enumerate(call) if value == "--publish"] == [
        "127.0.0.1:42000:22", "127.0.0.1:42001:8888"]
    assert [call[at + 1] for at, value in enumerate(call) if value == "--volume"] == [
        f"{files}/authorized_keys:/home/user/.ssh/authorized_keys:ro",
        f"{files}/file-0:/etc/ssh/sshd_config:ro", f"{node}:/opt/nvidia1:ro"]
    assert call[-3:] == [IMAGE, "/usr/sbin/sshd", "-D"]
    assert (files / "file-0").read_text() == "Port 22\n"
    assert containers.reports()[0]["ssh_port"] == 42000
    # The template's other port is reported with the server's port it is published on.
    assert containers.reports()[0]["service_ports"] == {"8888": 42001}


SERVICE_TOKEN = "kM3r9QeX0b7TzY2wVn5LcA8dHs1uPjFo"


def test_a_template_that_takes_a_token_gets_the_rental_s_in_its_variable_and_a_file(fake, tmp_path):
    template = template_read({"image": IMAGE, "ports": [22, 8888], "token_env": "JUPYTER_TOKEN"})
    containers = reconciler_for(fake.runtime("podman"), tmp_path / "state", template=template)

    containers.reconcile(entries=[container_entry(12, public_key(), service_token=SERVICE_TOKEN)])

    call = run_call(fake)
    files = tmp_path / "state" / "containers" / "evx-12"
    # In files, never on the command line, where the host's `ps` would show it to every user.
    assert SERVICE_TOKEN not in " ".join(call)
    assert call[call.index("--env-file") + 1] == f"{files}/token.env"
    assert f"{files}/service-token:/etc/everx/service-token:ro" in call
    assert (files / "token.env").read_text() == f"JUPYTER_TOKEN={SERVICE_TOKEN}\n"
    assert stat.S_IMODE((files / "token.env").stat().st_mode) == 0o600
    assert (files / "service-token").read_text() == SERVICE_TOKEN + "\n"


def test_a_template_that_takes_no_token_gets_none_and_keeps_its_container(fake, tmp_path):
    containers = reconciler_for(fake.runtime("podman"), tmp_path / "state")
    containers.reconcile(entries=[container_entry(12, public_key())])
    config = run_call(fake)
    fake.forget_calls()

    # An exchange that now sends every container rental's token: nothing for this template.
    containers.reconcile(entries=[container_entry(12, public_key(), service_token=SERVICE_TOKEN)])

    assert fake.calls() == []
    assert "--env-file" not in config
    assert not (tmp_path / "state" / "containers" / "evx-12" / "token.env").exists()


def test_a_token_the_template_takes_is_part_of_the_container_s_settings(fake, tmp_path):
    template = template_read({"image": IMAGE, "token_env": "JUPYTER_TOKEN"})
    containers = reconciler_for(fake.runtime("podman"), tmp_path / "state", template=template)
    containers.reconcile(entries=[container_entry(12, public_key())])  # an exchange sending none
    first = run_call(fake)
    fake.forget_calls()

    containers.reconcile(entries=[container_entry(12, public_key(), service_token=SERVICE_TOKEN)])

    assert "--env-file" not in first
    assert "--env-file" in run_call(fake)  # its variable is read at start: a new container
    label = next(value for value in run_call(fake) if value.startswith("everx.config="))
    assert SERVICE_TOKEN not in label


@pytest.mark.parametrize("token", ["short", "with space in it and long", "x" * 129, 42, "a=b;c" * 4])
def test_a_service_token_that_could_break_the_env_file_is_refused(fake, tmp_path, token):
    template = template_read({"image": IMAGE, "token_env": "JUPYTER_TOKEN"})
    containers = reconciler_for(fake.runtime("podman"), tmp_path / "state", template=template)

    containers.reconcile(entries=[container_entry(12, public_key(), service_token=token)])

    assert "run" not in fake.commands()
    assert containers.reports()[0]["state"] == "failed"
    assert "service token" in containers.reports()[0]["detail"]


@pytest.mark.parametrize("data, problem", [
    ({"image": IMAGE, "token_env": "JUPYTER TOKEN"}, "token variable"),
    ({"image": IMAGE, "token_env": "A=B"}, "token variable"),
    ({"image": IMAGE, "token_env": ["JUPYTER_TOKEN"]}, "token variable"),
    ({"image": "registry.example/everx/cuda-ssh:12.4"}, "not pinned by digest"),
    ({"image": f"registry.example/everx/cuda-ssh:12.4@{DIGEST}"}, "not pinned by digest"),
    ({"image": "registry.example/everx/cuda-ssh@sha256:abc"}, "not pinned by digest"),
    ({"image": IMAGE, "ports": [8888]}, "22 among them"),
    ({"image": IMAGE, "key_path": "root/.ssh/authorized_keys"}, "not an absolute path"),
    ({"image": IMAGE, "files": {"/etc/../srv/x": "x"}}, "not an absolute path"),
    ({"image": IMAGE, "mounts": {"/run": "/run/host"}}, "container runtime's socket"),
    ({"image": IMAGE, "mounts": {"/var/run/docker.sock": "/docker.sock"}}, "container runtime's socket"),
    ({"image": IMAGE, "mounts": {"relative/path": "/data"}}, "not absolute"),
    ({"image": IMAGE, "mounts": {"/data:/etc/shadow": "/data"}}, "holds a ':'"),
])
def test_a_template_that_would_be_unsafe_is_refused(data, problem):
    with pytest.raises(TemplateInvalid, match=problem):
        template_read(data)


def test_a_registry_with_a_port_is_no_tag():
    assert template_read({"image": f"registry.example:5000/cuda@{DIGEST}"}).digest == DIGEST


@pytest.mark.parametrize("change, detail", [
    ({"limits": None}, "no limits for this rental yet"),
    ({"limits": {**LIMITS, "processes": 0}}, "positive whole numbers"),
    ({"limits": {**LIMITS, "memory_mib": "64G"}}, "positive whole numbers"),
    ({"gpu_uuids": []}, "needs its GPUs' UUIDs"),
    ({"gpu_uuids": [UUID_A, UUID_B]}, "do not match the GPU indices"),
])
def test_a_rental_without_usable_limits_or_gpus_is_reported_failed_and_not_run(fake, tmp_path, change,
                                                                               detail):
    containers = reconciler_for(fake.runtime("podman"), tmp_path / "state")
    entry = {**container_entry(12, public_key()), **change}

    containers.reconcile(entries=[entry])

    assert "run" not in fake.commands()
    assert containers.reports()[0]["state"] == "failed"
    assert detail in containers.reports()[0]["detail"]


def test_a_template_this_server_has_not_got_is_reported_failed(fake, tmp_path):
    containers = reconciler_for(fake.runtime("podman"), tmp_path / "state")

    containers.reconcile(entries=[container_entry(12, public_key(), template=OTHER_DIGEST)])

    assert containers.reports()[0]["detail"] == f"the template {OTHER_DIGEST} is not on this server"


def test_the_configuration_s_container_settings_are_read_and_bad_ones_fall_back(tmp_path, caplog):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"url": "https://exchange.example", "token": "evxa_" + "x" * 40,
                                "runtime_timeout_seconds": 12.5, "container_listen_address": "192.0.2.7",
                                "container_templates": [{"image": IMAGE}, {"image": "cuda:latest"}]}))
    config = config_load(path=path)

    assert (config.runtime_timeout_seconds, config.container_listen_address) == (12.5, "192.0.2.7")
    assert container_templates_read(config.container_templates) == (Template(image=IMAGE),)
    assert "container template 2 is not used: the image 'cuda:latest' is not pinned by digest" in caplog.text

    path.write_text(json.dumps({"url": "https://exchange.example", "token": "evxa_" + "x" * 40,
                                "runtime_timeout_seconds": True, "container_listen_address": "0.0.0.0; x",
                                "container_templates": {"image": IMAGE}}))
    config = config_load(path=path)
    assert config.runtime_timeout_seconds == 60.0
    assert config.container_listen_address == DEFAULT_CONTAINER_LISTEN_ADDRESS
    assert config.container_templates == []


def test_a_runtime_that_cannot_list_fails_the_rentals_and_changes_nothing(fake, tmp_path):
    fake.set(fail={"ps": "Cannot connect to the Docker daemon"})
    containers = reconciler_for(fake.runtime("docker"), tmp_path / "state")

    _, changes = containers.reconcile(entries=[container_entry(12, public_key())])

    assert (changes, fake.commands()) == ([], ["ps"])
    assert containers.reports()[0]["detail"] == (
        "docker ps failed (exit code 125): Cannot connect to the Docker daemon")


# Images by digest ----------------------------------------------------------------------------

def test_a_missing_image_is_pulled_by_digest_then_run(tmp_path):
    fake = FakeRuntime(tmp_path / "bin")
    containers = reconciler_for(fake.runtime("docker"), tmp_path / "state")

    containers.reconcile(entries=[container_entry(12, public_key())])

    assert fake.commands() == ["ps", "image inspect", "pull", "image inspect", "run"]
    assert fake.calls()[2] == ["docker", "pull", IMAGE]


def test_a_pulled_image_whose_digest_differs_is_deleted_and_refused(tmp_path):
    fake = FakeRuntime(tmp_path / "bin")
    fake.set(served_digest=OTHER_DIGEST)
    containers = reconciler_for(fake.runtime("podman"), tmp_path / "state")

    containers.reconcile(entries=[container_entry(12, public_key())])

    assert fake.commands() == ["ps", "image inspect", "pull", "image inspect", "rmi"]
    assert fake.calls()[-1] == ["podman", "rmi", "--force", "image-1"]
    assert fake.load()["images"] == {}
    assert containers.reports()[0]["state"] == "failed"
    assert containers.reports()[0]["detail"] == f"the image pulled as {IMAGE} has another digest: deleted"


# Reconciling by label ------------------------------------------------------------------------

def test_an_unchanged_pass_calls_the_runtime_not_at_all(fake, tmp_path):
    containers = reconciler_for(fake.runtime("podman"), tmp_path / "state")
    entries = [container_entry(rental_id, public_key(), gpus=((rental_id, f"GPU-{rental_id:08d}"),))
               for rental_id in range(1, 9)]
    containers.reconcile(entries=entries)
    fake.forget_calls()

    _, changes = containers.reconcile(entries=entries)

    # How long it takes is for a benchmark in bench/ to measure, never for a test to assert.
    assert (changes, fake.calls()) == ([], [])


def test_a_restarted_agent_finds_its_container_by_label_and_makes_no_second_one(fake, tmp_path):
    entries = [container_entry(12, public_key())]
    reconciler_for(fake.runtime("docker"), tmp_path / "state").reconcile(entries=entries)
    fake.forget_calls()

    restarted = reconciler_for(fake.runtime("docker"), tmp_path / "state")
    _, changes = restarted.reconcile(entries=entries)

    assert (changes, fake.commands()) == ([], ["ps"])
    assert fake.calls()[0] == ["docker", "ps", "--all", "--filter", "label=everx.rental", "--format", "json"]
    assert len(fake.load()["containers"]) == 1
    assert restarted.reports()[0]["ssh_port"] == 42000


def test_ending_a_rental_removes_its_container_and_frees_its_port(fake, tmp_path):
    containers = reconciler_for(fake.runtime("podman"), tmp_path / "state")
    containers.reconcile(entries=[container_entry(12, public_key())])

    _, changes = containers.reconcile(entries=[container_entry(13, public_key())])

    assert [(change.kind, change.username) for change in changes] == [("remove", "evx-12"),
                                                                     ("container", "evx-13")]
    assert [container["name"] for container in fake.load()["containers"]] == ["evx-13"]
    assert containers.reports()[0]["ssh_port"] == 42000  # the port evx-12 had
    assert not (tmp_path / "state" / "containers" / "evx-12").exists()


def test_labelled_containers_not_desired_are_removed_and_others_never_touched(fake, tmp_path):
    fake.set(containers=[
        {"id": "c-stale", "name": "evx-7", "labels": {"everx.rental": "7"}, "state": "exited"},
        {"id": "c-twin", "name": "evx-12-copy", "labels": {"everx.rental": "12"}, "state": "running"},
        {"id": "c-junk", "name": "junk", "labels": {"everx.rental": "x;rm"}, "state": "running"},
        {"id": "c-seller", "name": "evx-12", "labels": {"app": "seller's own"}, "state": "running"},
    ])
    containers = reconciler_for(fake.runtime("podman"), tmp_path / "state")

    containers.reconcile(entries=[])

    removed = [call[-1] for call in fake.calls() if call[1] == "rm"]
    assert sorted(removed) == ["c-junk", "c-stale", "c-twin"]
    assert [container["id"] for container in fake.load()["containers"]] == ["c-seller"]


def test_a_name_taken_by_a_container_not_ours_fails_the_rental_and_leaves_it(fake, tmp_path):
    fake.set(containers=[{"id": "c-seller", "name": "evx-12", "labels": {}, "state": "running"}],
             fail={"run": "Error: the container name \"evx-12\" is already in use"})
    containers = reconciler_for(fake.runtime("podman"), tmp_path / "state")

    containers.reconcile(entries=[container_entry(12, public_key())])

    assert "rm" not in fake.commands()
    assert containers.reports()[0]["state"] == "failed"
    assert "is already in use" in containers.reports()[0]["detail"]


def test_a_stopped_container_is_started_again_and_new_limits_make_a_new_one(fake, tmp_path):
    containers = reconciler_for(fake.runtime("podman"), tmp_path / "state")
    containers.reconcile(entries=[container_entry(12, public_key())])
    fake.load()["containers"][0]["state"] = "exited"
    fake.save()
    containers.listed_at = float("-inf")  # as if the listing were old
    fake.forget_calls()

    containers.reconcile(entries=[container_entry(12, public_key())])
    assert fake.commands() == ["ps", "start"]

    fake.forget_calls()
    containers.reconcile(entries=[container_entry(12, public_key(), limits={**LIMITS, "cpu_cores": 4})])
    assert fake.commands() == ["ps", "rm", "image inspect", "run"]
    assert [container["id"] for container in fake.load()["containers"]] == ["c00000000002"]


def test_a_new_key_is_written_into_the_mounted_file_without_a_new_container(fake, tmp_path):
    containers = reconciler_for(fake.runtime("podman"), tmp_path / "state")
    containers.reconcile(entries=[container_entry(12, public_key())])
    keys = tmp_path / "state" / "containers" / "evx-12" / "authorized_keys"
    inode = keys.stat().st_ino
    fake.forget_calls()

    new_key = public_key("buyer@desktop")
    containers.reconcile(entries=[container_entry(12, new_key)])

    assert fake.calls() == []
    assert keys.read_text() == new_key + "\n"
    assert keys.stat().st_ino == inode  # the container's bind mount holds this inode


def test_a_hanging_runtime_makes_container_mode_unavailable_and_touches_nothing(fake, tmp_path):
    clock = [1000.0]
    containers = reconciler_for(fake.runtime("podman", timeout=0.5), tmp_path / "state",
                                clock=lambda: clock[0])
    containers.reconcile(entries=[container_entry(12, public_key())])
    fake.set(hang=["ps", "run", "rm"])
    containers.listed_at = float("-inf")
    fake.forget_calls()

    started = time.monotonic()
    containers.reconcile(entries=[container_entry(13, public_key())])

    assert time.monotonic() - started < 5
    assert containers.available is False
    assert fake.commands() == ["ps"]
    assert [container["name"] for container in fake.load()["containers"]] == ["evx-12"]
    assert [(report["username"], report["state"], report["detail"]) for report in containers.reports()] == [
        ("evx-12", "failed", "container mode is unavailable: its container is not removed yet"),
        ("evx-13", "failed", "container mode is unavailable")]

    # Until the retry is due no call is made; then, answering again, the runtime converges.
    fake.forget_calls()
    containers.reconcile(entries=[container_entry(13, public_key())])
    assert fake.calls() == []
    fake.set(hang=[])
    clock[0] += 301
    containers.reconcile(entries=[container_entry(13, public_key())])
    assert containers.available is True
    assert [container["name"] for container in fake.load()["containers"]] == ["evx-13"]


def test_the_host_agent_hands_container_rentals_over_and_reports_both_kinds(fake, tmp_path):
    system = FakeSystem()
    reconciler = Reconciler(system=system, store=StateStore(state_dir=tmp_path / "state"),
                            containers=reconciler_for(fake.runtime("podman"), tmp_path / "state"))

    changes = reconciler.reconcile(entries=[login(11, public_key(), [1]), container_entry(12, public_key())],
                                   remove_home=False)

    assert [(change.kind, change.username) for change in changes] == [("create", "evx-11"),
                                                                     ("container", "evx-12")]
    assert system.created() == ["evx-11"]
    reports = reconciler.reports()
    assert [(report["username"], report["state"], report.get("ssh_port")) for report in reports] == [
        ("evx-11", "ready", None), ("evx-12", "ready", 42000)]


def test_a_gpu_stays_closed_to_a_unix_rental_while_the_container_that_had_it_still_runs(fake, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("making device nodes needs root")
    devices = stand_in_nodes(tmp_path / "dev")
    system = FakeSystem()
    reconciler = Reconciler(system=system, store=StateStore(state_dir=tmp_path / "state"), device_dir=devices,
                            containers=reconciler_for(fake.runtime("podman"), tmp_path / "state"))
    reconciler.reconcile(entries=[container_entry(7, public_key())], remove_home=False)
    fake.set(fail={"rm": "Error: cannot remove container: device or resource busy"})

    # Rental 7 ended and its GPU went to a shared-server rental, but its container cannot be removed.
    reconciler.reconcile(entries=[login(12, public_key(), [0])], remove_home=False)

    report = {item["username"]: item for item in reconciler.reports()}["evx-12"]
    assert report["state"] == "failed"
    assert report["detail"] == "GPU 0 is not handed over yet: the container of rental 7 still runs on it"
    assert node_read(devices / "nvidia0").acl_users == ()

    fake.set(fail={})
    reconciler.reconcile(entries=[login(12, public_key(), [0])], remove_home=False)

    assert fake.commands().count("rm") == 2  # tried again, and gone
    assert node_read(devices / "nvidia0").acl_users == (60012,)
    assert {item["username"]: item["state"] for item in reconciler.reports()} == {"evx-12": "ready"}


# The self-test -------------------------------------------------------------------------------

@pytest.mark.parametrize("mode, output, passed", [
    ("nodes", "full\nnull\nnvidia3\nnvidiactl\npts\n", True),
    ("nodes", "null\nnvidia3\nnvidia4\n", False),
    ("nodes", "null\n", False),
    ("cdi", f"nvidia3\nnvidiactl\n---\nGPU 0: NVIDIA H100 80GB HBM3 (UUID: {UUID_A})\n", True),
    ("cdi", f"nvidia3\n---\nGPU 0: H100 (UUID: {UUID_A})\nGPU 1: H100 (UUID: {UUID_B})\n", False),
    ("gpus", f"nvidia3\n---\nGPU 0: NVIDIA H100 (UUID: {UUID_B})\n", False),
])
def test_the_self_test_passes_only_when_the_container_sees_its_one_gpu(fake, tmp_path, mode, output, passed):
    fake.set(self_test_output=output)
    runtime = fake.runtime("podman", gpu_mode=mode, device_dir=tmp_path / "dev")

    assert container_self_test(runtime=runtime, templates=[Template(image=IMAGE)], gpu_uuid=UUID_A,
                               gpu_index=3) is passed
    call = fake.calls()[-1]
    assert call[:2] == ["podman", "run"] and "--rm" in call and call[-3:-1] == [IMAGE, "-c"]


def test_the_self_test_runs_the_smallest_template_held(fake, tmp_path):
    small = f"registry.example/everx/small@{OTHER_DIGEST}"
    fake.image_held(small, OTHER_DIGEST)
    fake.load()["images"][small]["Size"] = 10
    fake.save()
    fake.set(self_test_output="nvidia0\n")
    runtime = fake.runtime("podman", gpu_mode="nodes")
    missing = Template(image=f"registry.example/everx/missing@sha256:{'ef' * 32}")

    templates = [Template(image=IMAGE), Template(image=small), missing]
    assert container_self_test(runtime=runtime, templates=templates, gpu_uuid=UUID_A, gpu_index=0)
    assert small in fake.calls()[-1]


def test_the_report_lists_the_templates_whose_image_is_held(fake):
    missing = Template(image=f"registry.example/everx/missing@sha256:{'ef' * 32}")

    templates = [missing, Template(image=IMAGE)]
    assert container_templates_held(runtime=fake.runtime("docker"), templates=templates) == [DIGEST]


def test_the_self_test_fails_on_a_hanging_runtime(fake, tmp_path):
    fake.set(hang=["run"])
    runtime = fake.runtime("podman", gpu_mode="nodes", timeout=0.5)

    assert container_self_test(runtime=runtime, templates=[Template(image=IMAGE)], gpu_uuid=UUID_A,
                               gpu_index=0) is False


# For real, with Podman -----------------------------------------------------------------------

REAL_LIMITS = {"cpu_cores": 1, "memory_mib": 256, "disk_gb": 1, "processes": 64}

needs_podman = pytest.mark.skipif(
    os.geteuid() != 0 or bool(podman_missing()),
    reason="needs root and Debian's podman, runc, slirp4netns and debootstrap (make podman installs them)",
)


@pytest.fixture
def podman(tmp_path):
    try:
        tar = image_tar_build()
    except ImageUnavailable as reason:
        pytest.skip(str(reason))
    # Podman refuses a run root of more than 50 characters: pytest's folders are longer.
    run_folder = Path(tempfile.mkdtemp(prefix="everx-podman-"))
    runner = Podman(tmp_path / "podman", run_folder)
    runner.image_import(tar)
    yield runner
    runner("rm", "--all", "--force", "--time", "0", check=False)
    # Its image's 230 MB go with the storage root (quicker than `rmi`).
    shutil.rmtree(tmp_path / "podman", ignore_errors=True)
    shutil.rmtree(run_folder, ignore_errors=True)


def stand_in_nodes(folder: Path) -> Path:
    """Two stand-in GPU nodes (no driver behind them): nvidia0 for the rental, nvidia1 not."""
    folder.mkdir()
    for minor in (0, 1):
        os.mknod(folder / f"nvidia{minor}", 0o666 | stat.S_IFCHR, os.makedev(195, minor))
    return folder


def image_host_key() -> paramiko.PKey:
    """The ed25519 host key openssh-server's installation made in the test image."""
    text = subprocess.run(["tar", "-xOf", str(IMAGE_TAR), "./etc/ssh/ssh_host_ed25519_key.pub"],
                          capture_output=True, text=True, check=True, timeout=60).stdout
    key_type, body = text.split()[:2]
    return paramiko.PKey.from_type_string(key_type, base64.b64decode(body))


def ssh_connect(port: int, key: ed25519.Ed25519PrivateKey, *, within: float = 10.0) -> paramiko.SSHClient:
    """The buyer's session; slirp4netns accepts connections before sshd is up, so it is retried."""
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                            serialization.NoEncryption()).decode()
    private = paramiko.Ed25519Key.from_private_key(io.StringIO(pem))
    host_key = image_host_key()
    deadline = time.monotonic() + within
    while True:
        client = paramiko.SSHClient()
        client.get_host_keys().add(f"[127.0.0.1]:{port}", host_key.get_name(), host_key)
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect("127.0.0.1", port=port, username="root", pkey=private, timeout=5, banner_timeout=5,
                           auth_timeout=5, allow_agent=False, look_for_keys=False)
            return client
        except (paramiko.SSHException, OSError):
            client.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def ssh_run(client: paramiko.SSHClient, command: str) -> str:
    _, stdout, stderr = client.exec_command(command, timeout=30)
    return stdout.read().decode() + stderr.read().decode()


def free_port_range(count: int = 20) -> range:
    """Loopback ports nobody holds now, from a high range of the test's."""
    # Below the kernel's ephemeral range (32768-60999): no outgoing connection's port is ever there.
    for first in range(20000, 32000, count):
        if all(port_bindable("127.0.0.1", port) for port in range(first, first + count)):
            return range(first, first + count)
    pytest.skip("no free loopback ports for the test")


@needs_podman
def test_a_container_rental_for_real_with_podman(podman, tmp_path):
    devices = stand_in_nodes(tmp_path / "dev")
    template = template_read({
        "image": podman.image, "command": list(SSHD_COMMAND), "token_env": "JUPYTER_TOKEN",
        "files": {"/etc/ssh/everx_sshd_config": SSHD_CONFIG},
        # A node the rental was not given, bind-mounted as a file: only the device cgroup stops it.
        "mounts": {str(devices / "nvidia1"): "/opt/other-gpu"},
    })
    key = ed25519.Ed25519PrivateKey.generate()
    key_line = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                             serialization.PublicFormat.OpenSSH).decode()
    entries = [container_entry(5, key_line, gpus=((0, UUID_A),), limits=REAL_LIMITS,
                               service_token=SERVICE_TOKEN)]
    ports = free_port_range()

    def agent() -> ContainerReconciler:
        return ContainerReconciler(runtime=podman.runtime(devices), templates=[template],
                                   state_dir=tmp_path / "state", listen_address="127.0.0.1", ports=ports)

    assert container_self_test(runtime=podman.runtime(devices), templates=[template], gpu_uuid=UUID_A,
                               gpu_index=0)
    containers = agent()
    _, changes = containers.reconcile(entries=entries)
    assert [change.kind for change in changes] == ["container"], containers.reports()
    port = containers.reports()[0]["ssh_port"]
    assert port == ports.start
    client = ssh_connect(port, key)
    # How soon it answers is bench/agent.py's to measure, never a test's to assert.
    try:
        assert ssh_run(client, "hostname").strip() == "evx-5"
        # The shell's message ends with the errno's text: ENXIO, let through (no driver behind it);
        # EPERM, refused by the container's device cgroup.
        opened = ssh_run(client, "(: <>/dev/nvidia0) 2>&1; (: <>/opt/other-gpu) 2>&1").splitlines()
        assert [line.rsplit(": ", 1)[1] for line in opened] == [os.strerror(errno.ENXIO),
                                                                os.strerror(errno.EPERM)]
        assert [line.rsplit(": ", 2)[1] for line in opened] == ["/dev/nvidia0", "/opt/other-gpu"]
        assert sorted(name for name in ssh_run(client, "ls /dev").split() if name.startswith("nvidia")) == [
            "nvidia0"]
        limits = ssh_run(client, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory/"
                                 "memory.memsw.limit_in_bytes /sys/fs/cgroup/pids/pids.max")
        assert limits.split() == [str(256 * 2**20), str(256 * 2**20), "64"]
        processes = [line.split(None, 1) for line in ssh_run(client, "ps -e -o pid=,comm=").splitlines()]
        assert processes[0] == ["1", "sshd"]
        assert {command for _, command in processes} <= {"sshd", "sh", "bash", "ps"}
        assert len(processes) < 8
        # The rental's token, in the variable the image's program (Jupyter's) reads and in the file the
        # buyer reads (sshd rewrites its own /proc/1/environ with its title: the runtime says the first).
        inspected = podman("inspect", "--format", "{{json .Config.Env}}", "evx-5", check=True)
        environment = json.loads(inspected.stdout)
        assert f"JUPYTER_TOKEN={SERVICE_TOKEN}" in environment
        assert ssh_run(client, "cat /etc/everx/service-token").strip() == SERVICE_TOKEN
    finally:
        client.close()

    # The agent restarted: it finds its container by label and makes no second one.
    restarted = agent()
    assert restarted.reconcile(entries=entries)[1] == []
    listed = podman("ps", "--all", "--format", "{{.Names}}", check=True).stdout.split()
    assert listed == ["evx-5"]

    # The rental ended: container and port are gone.
    assert [change.kind for change in restarted.reconcile(entries=[])[1]] == ["remove"]
    assert podman("ps", "--all", "--quiet", check=True).stdout == ""
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) == errno.ECONNREFUSED
    assert port_bindable("127.0.0.1", port)


# Wired into the agent (main.agent_build, isolation.ContainerMode) -----------------------------

PODMAN_INFO = ["info", "--format", "json"]
DOCKER_INFO = ["info", "--format", "{{json .}}"]
CTK_VERSION = "NVIDIA Container Toolkit CLI version 1.17.8\ncommit: 8ad4f4b5\n"
SELF_TEST_SEEN = f"nvidia0\nnvidiactl\n---\nGPU 0: NVIDIA H100 80GB HBM3 (UUID: {UUID_A})\n"


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def host_runtime(fake, monkeypatch) -> FakeRuntime:
    """The fake runtimes and `nvidia-ctk` alone on the agent's PATH, Podman's daemon answering
    (Docker's client has none), the self-test's container seeing its one GPU."""
    fake.toolkit = FakeCommands(fake.folder)
    fake.toolkit.answer("nvidia-ctk", ["--version"], out=CTK_VERSION)
    fake.toolkit.answer("nvidia-ctk", ["cdi", "list"], out=f"nvidia.com/gpu={UUID_A}\nnvidia.com/gpu=all\n")
    fake.set(info={"podman": json.dumps({"version": {"Version": "4.3.1"}, "store": {
        "graphDriverName": "overlay", "graphRoot": "/var/lib/containers/storage"}})},
        self_test_output=SELF_TEST_SEEN)
    monkeypatch.setenv("PATH", str(fake.folder))
    monkeypatch.delenv("EVERX_AGENT_STATE_DIR", raising=False)
    return fake


def agent_config(tmp_path: Path, **values) -> AgentConfig:
    (tmp_path / "dev").mkdir(exist_ok=True)
    return AgentConfig(**{
        "url": "https://exchange.example", "token": TOKEN, "state_dir": str(tmp_path / "state"),
        "device_dir": str(tmp_path / "dev"), "container_templates": [{"image": IMAGE}],
        "container_listen_address": "127.0.0.1", "runtime_timeout_seconds": 10.0,
        "ssh_port_first": PORTS.start, "ssh_port_last": PORTS.stop - 1, **values})


def agent_built(config: AgentConfig, clock: Clock):
    agent = agent_main.agent_build(config)
    # The sandbox and login facts measure this machine for real: their own tests do that.
    agent.isolation.sandbox_facts = lambda: {"backend": "v1", **dict.fromkeys(SANDBOX_FACTS, False)}
    agent.isolation.login_facts = login_facts_unmeasured
    agent.isolation.clock = clock
    agent.reconciler.containers.port_free = lambda address, port: True
    return agent


def container_reported(agent) -> dict | None:
    report = agent.isolation.report(server_id=3, gpu_uuids=(UUID_A,))
    isolation_report_check(report, server_id=3)  # what the exchange accepts
    return report["container"]


def test_the_agent_builds_container_mode_when_podman_s_daemon_answers(host_runtime, tmp_path):
    agent = agent_main.agent_build(agent_config(tmp_path))

    containers = agent.reconciler.containers
    assert isinstance(containers, ContainerReconciler)
    runtime = containers.runtime
    assert (runtime.binary, runtime.gpu_mode, runtime.storage_quota, runtime.timeout) == (
        str(host_runtime.folder / "podman"), "cdi", False, 10.0)
    assert containers.templates == (Template(image=IMAGE),)
    assert (containers.ports, containers.listen_address) == (PORTS, "127.0.0.1")
    assert containers.port_book is agent.reconciler.sshd.ports  # one book for sshds and containers
    assert agent.isolation.containers.reconciler is containers
    # Docker is asked first: a client without a daemon is no runtime.
    assert host_runtime.calls() == [["docker", *DOCKER_INFO], ["podman", *PODMAN_INFO]]


def test_docker_with_nvidias_runtime_is_given_gpus_with_its_own_option(host_runtime, tmp_path):
    host_runtime.set(info={"docker": json.dumps({"ServerVersion": "27.3.1", "Runtimes": {"nvidia": {}},
                                                 "Driver": "overlay2", "DockerRootDir": "/var/lib/docker"})})

    runtime = agent_main.agent_build(agent_config(tmp_path)).reconciler.containers.runtime

    assert (runtime.binary, runtime.gpu_mode) == (str(host_runtime.folder / "docker"), "gpus")


def test_without_a_runtime_there_is_no_container_mode_and_container_rentals_fail(fake, tmp_path,
                                                                                 monkeypatch):
    monkeypatch.setenv("PATH", str(fake.folder))  # neither daemon answers
    agent = agent_main.agent_build(agent_config(tmp_path))
    assert (agent.reconciler.containers, agent.isolation.containers) == (None, None)

    system = FakeSystem()
    reconciler = Reconciler(system=system, store=StateStore(state_dir=tmp_path / "state"))
    reconciler.reconcile(entries=[container_entry(12, public_key()), login(11, public_key(), [1])],
                         remove_home=False)

    assert system.created() == ["evx-11"]  # never a Unix user for a container rental
    assert [(report["username"], report["state"], report["detail"]) for report in reconciler.reports()] == [
        ("evx-11", "ready", ""), ("evx-12", "failed", "this server has no container runtime")]


def test_the_report_says_the_self_test_passed_and_runs_it_again_only_after_a_change(host_runtime, tmp_path):
    clock = Clock()
    agent = agent_built(agent_config(tmp_path), clock)
    host_runtime.forget_calls()

    container = container_reported(agent)

    assert container == {"runtime": "podman", "runtime_version": "4.3.1", "toolkit_version": "1.17.8",
                         "gpus_by_uuid": True, "self_test": True, "disk_limited": False,
                         "templates": [DIGEST]}
    # The start's `podman info` answers the first report: it is not asked again.
    assert [call[:2] for call in host_runtime.calls()] == [
        ["podman", "image"], ["nvidia-ctk", "--version"], ["podman", "image"], ["podman", "run"],
        ["nvidia-ctk", "cdi"]]
    self_test = host_runtime.calls()[3]
    assert self_test[self_test.index("--device") + 1] == f"nvidia.com/gpu={UUID_A}" and "--rm" in self_test

    # An unchanged heartbeat runs nothing.
    host_runtime.forget_calls()
    assert container_reported(agent) == container
    assert host_runtime.calls() == []

    # Measured again after the period: the runtime, the templates and the toolkit, not the self-test.
    clock.now += 600
    assert container_reported(agent) == container
    assert [call[:2] for call in host_runtime.calls()] == [
        ["podman", "info"], ["podman", "image"], ["nvidia-ctk", "--version"], ["nvidia-ctk", "cdi"]]

    # A new toolkit: the self-test again, which now sees a second GPU.
    host_runtime.toolkit.answer("nvidia-ctk", ["--version"], out=CTK_VERSION.replace("1.17.8", "1.18.0"))
    host_runtime.set(self_test_output=SELF_TEST_SEEN.replace("nvidia0\n", "nvidia0\nnvidia1\n"))
    host_runtime.forget_calls()
    clock.now += 600
    container = container_reported(agent)
    assert (container["toolkit_version"], container["self_test"]) == ("1.18.0", False)
    assert [call[1] for call in host_runtime.calls()].count("run") == 1


def test_a_runtime_that_hangs_is_reported_paused_and_its_containers_keep_running(host_runtime, tmp_path):
    clock = Clock()
    agent = agent_built(agent_config(tmp_path, runtime_timeout_seconds=1.0), clock)
    containers = agent.reconciler.containers
    containers.reconcile(entries=[container_entry(12, public_key())])
    measured = container_reported(agent)
    assert measured["self_test"] is True and "paused" not in measured
    host_runtime.set(hang=["info", "ps", "image", "run", "rm"])
    host_runtime.forget_calls()

    clock.now += 600
    # The last measurement, paused: the exchange sells no container, and keeps those running.
    assert container_reported(agent) == {**measured, "paused": True}

    assert host_runtime.commands() == ["info"]
    assert containers.available is False  # the reconciler is told: it does not call the runtime either
    host_runtime.forget_calls()
    containers.reconcile(entries=[])
    assert container_reported(agent) == {**measured, "paused": True}
    assert host_runtime.calls() == []
    assert [container["name"] for container in host_runtime.load()["containers"]] == ["evx-12"]


def test_a_hang_the_reconciler_meets_withdraws_container_mode_at_the_next_heartbeat(host_runtime, tmp_path):
    agent = agent_built(agent_config(tmp_path, runtime_timeout_seconds=1.0), Clock())
    assert container_reported(agent)["self_test"] is True
    host_runtime.set(hang=["ps"])
    agent.reconciler.containers.reconcile(entries=[container_entry(12, public_key())])
    host_runtime.forget_calls()

    assert container_reported(agent)["paused"] is True
    assert host_runtime.calls() == []


def test_container_and_sshd_rentals_take_ports_from_one_book_and_never_the_same(fake, tmp_path):
    ports = free_port_range(6)
    sshd = RentalSshd(settings=SshdSettings(state_dir=tmp_path / "state", listen_address="127.0.0.1",
                                            port_first=ports.start, port_last=ports.stop - 1))
    sshd.ports.set("evx-11", ports.start)  # the port rental 11's sshd listens on
    containers = ContainerReconciler(runtime=fake.runtime("podman"), templates=[Template(image=IMAGE,
                                     ports=(22, 8888))], state_dir=tmp_path / "state",
                                     listen_address="127.0.0.1", ports=ports, port_book=sshd.ports)

    containers.reconcile(entries=[container_entry(12, public_key())])

    assert containers.reports()[0]["ssh_port"] == ports.start + 1
    book = {"evx-11": ports.start, "evx-12:22": ports.start + 1, "evx-12:8888": ports.start + 2}
    assert sshd.ports.ports == book
    assert PortBook(state_dir=tmp_path / "state").ports == book  # kept across restarts
    assert sshd._port_choose("evx-13") == ports.start + 3  # the next sshd skips the container's ports

    # The container's end gives its ports back to the sshds.
    containers.reconcile(entries=[])
    assert sshd.ports.ports == {"evx-11": ports.start, "evx-13": ports.start + 3}
    assert sshd._port_choose("evx-14") == ports.start + 1
