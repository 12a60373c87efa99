"""Where the command line keeps its token, and what overrides it.

The file is `$XDG_CONFIG_HOME/everx/config.json` (`~/.config/everx/config.json` without it),
`{"url": ..., "token": ...}`, readable by its owner only. `EVERX_URL` and `EVERX_TOKEN` win over it,
so a script or a CI job needs no file at all.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8000"  # the site `make run` serves
FILE_MODE = 0o600
DIRECTORY_MODE = 0o700


@dataclass(frozen=True)
class Settings:
    url: str
    token: str | None


def config_path(environ: dict[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "everx" / "config.json"


def config_read(path: Path) -> dict[str, str]:
    """The saved settings; nothing (rather than a crash) when the file is missing or broken."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {name: value for name, value in data.items() if isinstance(value, str)}


def config_write(path: Path, *, url: str, token: str) -> None:
    """Save the address and the token, never readable by another user: the directory is made
    0700, and the file is written 0600 under a temporary name then renamed, so no moment exists
    where it is half written or more open."""
    path.parent.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
    os.chmod(path.parent, DIRECTORY_MODE)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".config-", suffix=".json")
    try:
        if hasattr(os, "fchmod"):  # mkstemp already makes it 0600; said again, where the system has modes
            os.fchmod(descriptor, FILE_MODE)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump({"url": url, "token": token}, handle, indent=2)
            handle.write("\n")
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def config_forget(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def settings_load(*, url: str | None = None, environ: dict[str, str] | None = None) -> Settings:
    """The address and token to use: the `--url` option, then the environment, then the file."""
    environ = os.environ if environ is None else environ
    saved = config_read(config_path(environ))
    return Settings(
        url=url or environ.get("EVERX_URL") or saved.get("url") or DEFAULT_URL,
        token=environ.get("EVERX_TOKEN") or saved.get("token") or None,
    )
