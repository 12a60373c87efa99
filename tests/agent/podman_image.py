"""Real Podman for container mode, shared by its test (tests/agent/test_containers.py) and its
benchmark (bench/agent.py): a Debian bookworm image with OpenSSH's server, built once with
debootstrap from the machine's own mirror and cached in the git-ignored .tools/container-image;
a storage root, run root and `containers.conf` of the caller's; ports on 127.0.0.1 only, published
by slirp4netns. Nothing here imports Django or pytest."""

import os
import shutil
import subprocess
from pathlib import Path

from everx_agent.containers import ContainerRuntime

IMAGE_CACHE = Path(__file__).resolve().parents[2] / ".tools" / "container-image"
IMAGE_TAR = IMAGE_CACHE / "bookworm-sshd.tar"
IMAGE_NAME = "localhost/everx-test:1"
DEBOOTSTRAP_SECONDS = 900
PODMAN_PROGRAMS = ("podman", "runc", "slirp4netns", "debootstrap")
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
# runc: crun 1.8 refuses hybrid cgroup layouts like this machine's; no default ulimits: root here
# cannot raise its hard RLIMIT_NOFILE and RLIMIT_NPROC; cgroupfs and a file event log: no systemd.
CONTAINERS_CONF = """[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""
# slirp4netns publishes ports from a process of its own: the default bridge would add NAT rules and
# turn forwarding on for the whole machine.
NETWORK = "slirp4netns:port_handler=slirp4netns"
SSHD_CONFIG = """Port 22
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile /etc/ssh/everx_authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
"""
SSHD_COMMAND = ("/bin/sh", "-c",
                "mkdir -p /run/sshd && exec /usr/sbin/sshd -D -e -f /etc/ssh/everx_sshd_config")


class ImageUnavailable(Exception):
    """The test image cannot be built here (no mirror, debootstrap failed or took too long)."""


def podman_missing() -> list[str]:
    """The programs real Podman needs that this machine lacks."""
    return [name for name in PODMAN_PROGRAMS if shutil.which(name, path=SYSTEM_PATH) is None]


def debian_mirror() -> str | None:
    """The machine's own Debian mirror, as its apt sources name it."""
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:") and line.split()[1:]:
                return line.split()[1]
    listing = Path("/etc/apt/sources.list")
    for line in listing.read_text().splitlines() if listing.exists() else []:
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "deb":
            return next(part for part in parts[1:] if not part.startswith("["))
    return None


def image_tar_build() -> Path:
    """Debian bookworm with OpenSSH's server, as a root file system tar, built once."""
    if IMAGE_TAR.exists():
        return IMAGE_TAR
    mirror = debian_mirror()
    if mirror is None:
        raise ImageUnavailable("no Debian mirror in the machine's apt sources for debootstrap")
    IMAGE_CACHE.mkdir(parents=True, exist_ok=True)
    root = IMAGE_CACHE / f"rootfs-{os.getpid()}"
    try:
        built = subprocess.run(["debootstrap", "--variant=minbase", "--include=openssh-server,procps",
                                "bookworm", str(root), mirror], capture_output=True, text=True,
                               timeout=DEBOOTSTRAP_SECONDS, check=False)
        if built.returncode != 0:
            raise ImageUnavailable(f"debootstrap could not build the test image from the machine's mirror: "
                                   f"{built.stdout[-300:]} {built.stderr[-300:]}")
        partial = IMAGE_TAR.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(root), "-cf", str(partial), "."], check=True, timeout=300)
        partial.replace(IMAGE_TAR)
    except subprocess.TimeoutExpired:
        raise ImageUnavailable(f"debootstrap did not finish within {DEBOOTSTRAP_SECONDS} s") from None
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return IMAGE_TAR


class Podman:
    """Podman with a storage root, run root and containers.conf of the caller's own. Podman refuses
    a run root of more than 50 characters: pass a short one."""

    def __init__(self, folder: Path, run_folder: Path):
        folder.mkdir()
        (folder / "containers.conf").write_text(CONTAINERS_CONF)
        self.env = {"CONTAINERS_CONF": str(folder / "containers.conf")}
        self.arguments = ("--root", str(folder / "store"), "--runroot", str(run_folder))
        self.binary = shutil.which("podman", path=SYSTEM_PATH)
        self.image = ""

    def __call__(self, *arguments: str, **options) -> subprocess.CompletedProcess:
        return subprocess.run([self.binary, *self.arguments, *arguments], env={**os.environ, **self.env},
                              capture_output=True, text=True, timeout=120, **options)

    def image_import(self, tar: Path) -> str:
        """The cached image in this storage root; its name pinned by digest, as templates are."""
        with open(tar, "rb") as image:
            imported = self("import", "-", IMAGE_NAME, stdin=image, check=False)
        if imported.returncode:
            raise RuntimeError(f"podman import failed: {imported.stderr}")
        digest = self("image", "inspect", "--format", "{{.Digest}}", IMAGE_NAME, check=True)
        self.image = f"{IMAGE_NAME.split(':')[0]}@{digest.stdout.strip()}"
        return self.image

    def runtime(self, device_dir: Path) -> ContainerRuntime:
        return ContainerRuntime(binary=self.binary, gpu_mode="nodes", arguments=self.arguments, env=self.env,
                                network=NETWORK, device_dir=device_dir, timeout=60)
