"""The host agent as a wheel the exchange serves itself, so a seller's server installs it with a bare
`pip install <url>`: no package index, no build step on the server, nothing to compile.

The wheel is built here from the repository's `agent/` (its pyproject.toml and src/everx_agent/),
with the standard library only: a pure-Python wheel is a zip with the package and a dist-info
directory (METADATA, WHEEL, entry_points.txt, RECORD). Same sources, same bytes: every entry has a
fixed date, so the file a server downloads twice is identical."""

import base64
import hashlib
import io
import re
import tomllib
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from django.conf import settings

AGENT_SOURCE = Path(settings.BASE_DIR) / "agent"
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # the oldest date a zip holds: the wheel does not change with time
_WHEEL = "Wheel-Version: 1.0\nGenerator: everxcloud\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
_VERSION = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


@dataclass(frozen=True)
class AgentPackage:
    """What the agent's pyproject.toml says about it, and where its sources are."""

    name: str  # the distribution's name, "everx-agent"
    version: str
    summary: str
    requires_python: str
    scripts: tuple[tuple[str, str], ...]  # (command, module:function), sorted
    package_dir: Path

    @property
    def wheel_filename(self) -> str:
        return f"{self.dist_name}-{self.version}-py3-none-any.whl"

    @property
    def dist_name(self) -> str:
        """The name as wheel file names spell it (PEP 427: runs of -_. become one underscore)."""
        return re.sub(r"[-_.]+", "_", self.name).lower()


def agent_package_read(*, source: Path | None = None) -> AgentPackage | None:
    """The agent package in `source` (the repository's agent/ by default), or None when it is not
    there (a checkout without the agent) or its pyproject.toml names no package we can find."""
    source = source or AGENT_SOURCE
    try:
        project = tomllib.loads((source / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return None
    name = project.get("name", "")
    package_dir = source / "src" / re.sub(r"[-_.]+", "_", name).lower()
    version = project.get("version") or _version_in(package_dir / "__init__.py")
    if not name or not version or not package_dir.is_dir():
        return None
    return AgentPackage(
        name=name, version=version, summary=project.get("description", ""),
        requires_python=project.get("requires-python", ""),
        scripts=tuple(sorted(project.get("scripts", {}).items())), package_dir=package_dir,
    )


def _version_in(path: Path) -> str:
    """`__version__` of a module (a dynamic version in pyproject.toml), read, never imported."""
    try:
        match = _VERSION.search(path.read_text(encoding="utf-8"))
    except OSError:
        return ""
    return match.group(1) if match else ""


def agent_wheel_build(*, package: AgentPackage) -> bytes:
    """The wheel of the package, rebuilt only when one of its files changed."""
    files = _package_files(package.package_dir)
    stamp = tuple((str(path), path.stat().st_mtime_ns) for path in files)
    return _wheel_bytes(package, stamp)


def _package_files(package_dir: Path) -> list[Path]:
    return sorted(
        path for path in package_dir.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    )


@lru_cache(maxsize=4)
def _wheel_bytes(package: AgentPackage, stamp: tuple) -> bytes:
    del stamp  # only the cache's key: a changed file makes a new one
    root = package.package_dir.parent
    entries = [
        (path.relative_to(root).as_posix(), path.read_bytes()) for path in _package_files(package.package_dir)
    ]
    info = f"{package.dist_name}-{package.version}.dist-info"
    entries += [
        (f"{info}/METADATA", _metadata(package).encode()),
        (f"{info}/WHEEL", _WHEEL.encode()),
    ]
    if package.scripts:
        scripts = "".join(f"{name} = {target}\n" for name, target in package.scripts)
        entries.append((f"{info}/entry_points.txt", f"[console_scripts]\n{scripts}".encode()))
    record = "".join(f"{name},sha256={_digest(content)},{len(content)}\n" for name, content in entries)
    entries.append((f"{info}/RECORD", (record + f"{info}/RECORD,,\n").encode()))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        for name, content in entries:
            entry = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(entry, content)
    return buffer.getvalue()


def _metadata(package: AgentPackage) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {package.name}", f"Version: {package.version}"]
    if package.summary:
        lines.append(f"Summary: {package.summary}")
    if package.requires_python:
        lines.append(f"Requires-Python: {package.requires_python}")
    return "\n".join(lines) + "\n"


def _digest(content: bytes) -> str:
    """The hash RECORD wants: SHA-256, urlsafe base64 without padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
