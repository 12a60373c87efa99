"""The baseline of the matching and charging benchmarks: PostgreSQL's own pgbench (its built-in
TPC-B-like script: five statements per transaction, three updates, a select and an insert) against
the same server, with as many clients as the benchmark has threads.

Each benchmark runs it right before the figure it is compared with, so that both see the same
machine at the same moment.
"""

import os
import re
import shutil
from urllib.parse import urlsplit

from .common import command_run

PGBENCH = shutil.which("pgbench") or "/usr/bin/pgbench"
_TPS = re.compile(r"^tps = ([0-9.]+)", re.MULTILINE)
_LATENCY = re.compile(r"^latency average = ([0-9.]+) ms", re.MULTILINE)


def _connection(url: str) -> tuple[list[str], dict[str, str]]:
    """pgbench's connection options and environment for a postgres:// URL."""
    parts = urlsplit(url)
    options = ["-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 5432),
               "-U", parts.username or "postgres"]
    env = dict(os.environ)
    if parts.password:
        env["PGPASSWORD"] = parts.password
    return [*options, parts.path.lstrip("/")], env


def initialise(url: str, *, scale: int) -> None:
    """Create pgbench's tables in the (existing, empty) database of `url`."""
    args, env = _connection(url)
    command_run([PGBENCH, "-i", "-q", "-s", str(scale), *args], env=env, timeout=600)


def run(url: str, *, clients: int, seconds: float) -> dict:
    """Transactions per second and mean latency of the TPC-B-like script with `clients` clients
    (and as many pgbench threads, at most two per core) for `seconds` seconds."""
    args, env = _connection(url)
    threads = max(1, min(clients, 2 * (os.cpu_count() or 1)))
    output = command_run(
        [PGBENCH, "-c", str(clients), "-j", str(threads), "-T", str(max(1, round(seconds))), *args],
        env=env, timeout=seconds + 120,
    )
    tps, latency = _TPS.search(output), _LATENCY.search(output)
    if tps is None:
        raise RuntimeError(f"pgbench printed no tps:\n{output}")
    return {
        "clients": clients,
        "seconds": max(1, round(seconds)),
        "tps": float(tps.group(1)),
        "latency_ms": float(latency.group(1)) if latency else None,
    }
