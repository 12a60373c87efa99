"""What the benchmark processes share: their configuration, Django, fast inserts, figures.

`bench.run` starts each benchmark (`python -m bench.pages`, `bench.matching`, `bench.charging`)
as a process of its own, on a database of its own, with the environment of the production
settings (`bench.settings`) and two file names: the configuration it reads and the result it
writes, both JSON.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def child_arguments() -> tuple[dict, Path]:
    """The configuration a benchmark process was given, and where its result goes."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    return json.loads(args.config.read_text(encoding="utf-8")), args.out


def django_setup() -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django

    django.setup()


def result_write(path: Path, result: dict) -> None:
    path.write_text(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")


def say(message: str) -> None:
    print(f"  {message}", flush=True)


# --- figures ---------------------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    """The value below which `fraction` of `values` lie (nearest rank)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def rounded(value: float, places: int = 2) -> float:
    return round(value, places) if value == value else value  # NaN stays NaN


@contextmanager
def stopwatch():
    """`with stopwatch() as elapsed: ...`, then `elapsed()` gives the seconds it took."""
    started = time.perf_counter()
    finished: list[float] = []
    yield lambda: (finished[0] if finished else time.perf_counter()) - started
    finished.append(time.perf_counter())


class QueryCounter:
    """Counts the SQL statements this thread's connection sends while installed:
    `with connection.execute_wrapper(counter): ...`."""

    def __init__(self):
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


def peak_rss_mb(pid: int | str = "self") -> float | None:
    """The peak resident memory of a process (VmHWM), in MB; None once it has gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


_COMMAND_PEAKS: dict[str, float] = {}


def command_run(
    args: Sequence[str], *, timeout: float, env: dict | None = None, cwd: Path | None = None
) -> str:
    """Run a command (pgbench, wrk, manage.py) to its end and return its output; raise on a non-zero
    exit. Its peak RSS (VmHWM, read every 20 ms while it runs: the kernel's figure once it is
    reaped would count the copy of this process it was forked from) is kept per program for
    `children_peak_rss_mb`."""
    with tempfile.TemporaryFile("w+") as output, tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(list(args), stdout=output, stderr=errors, text=True, env=env, cwd=cwd)
        deadline, peak = time.monotonic() + timeout, None
        while True:
            peak = peak_rss_mb(process.pid) or peak
            if process.poll() is not None:
                break
            if time.monotonic() > deadline:
                process.kill()
                process.wait()
                raise subprocess.TimeoutExpired(list(args), timeout)
            time.sleep(0.02)
        name = Path(args[0]).name
        if name.startswith("python"):  # python manage.py migrate
            name = " ".join([name, *args[1:3]])
        if peak is not None:
            _COMMAND_PEAKS[name] = max(_COMMAND_PEAKS.get(name, 0), peak)
        output.seek(0)
        errors.seek(0)
        text, error = output.read(), errors.read()
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, list(args), text, error)
    return text


def children_peak_rss_mb() -> dict[str, float]:
    """The peak RSS of the commands `command_run` ran, the largest run of each program."""
    return {f"{name} (largest run)": peak for name, peak in sorted(_COMMAND_PEAKS.items())}


def children_of(pid: int) -> list[int]:
    """The direct children of a process (gunicorn's workers)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


# --- fast inserts ----------------------------------------------------------------------------------


def copy_insert(objects: Iterable, *, chunk: int = 20_000) -> list:
    """Insert unsaved model instances of one model with PostgreSQL's COPY: the seeding of a
    hundred thousand rows takes seconds, not minutes. Every concrete column is written as
    `bulk_create` would write it (defaults, `auto_now_add`); the ids come from the table's own
    sequence, reserved in one step, and are set on the instances. Returns the instances."""
    from django.db import connection

    objects = list(objects)
    if not objects:
        return objects
    meta = type(objects[0])._meta
    table, pk = meta.db_table, meta.pk.column
    quote = connection.ops.quote_name
    fields = list(meta.concrete_fields)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence(%s, %s), nextval(pg_get_serial_sequence(%s, %s)) + %s)",
            [table, pk, table, pk, len(objects) - 1],
        )
        first = cursor.fetchone()[0] - len(objects) + 1
    columns = ", ".join(quote(field.column) for field in fields)
    for start in range(0, len(objects), chunk):
        with connection.cursor() as cursor, cursor.cursor.copy(
            f"COPY {quote(table)} ({columns}) FROM STDIN"  # noqa: S608 (names from the model)
        ) as copy:
            for offset, obj in enumerate(objects[start:start + chunk], start=start):
                obj.pk = first + offset
                copy.write_row(
                    [field.get_db_prep_save(field.pre_save(obj, True), connection) for field in fields]
                )
    for obj in objects:
        obj._state.adding = False
        obj._state.db = "default"
    return objects
