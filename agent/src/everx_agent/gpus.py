"""The server's GPUs, as `nvidia-smi` reports them.

The exchange compares them with the server's registration (model, count, memory) and ends the
rental holding a GPU that vanishes or reports uncorrected ECC errors, so the parsing never
guesses: a field nvidia-smi could not read is null, and a line that cannot be read at all is
skipped and counted in `gpu_error`, never made up.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

NVIDIA_SMI = "nvidia-smi"
QUERY_FIELDS = (
    "index", "uuid", "name", "memory.total", "temperature.gpu", "utilization.gpu",
    "ecc.errors.uncorrected.volatile.total",
)
QUERY_ARGS = (f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits")
TIMEOUT_SECONDS = 10.0
# What nvidia-smi writes for a value it has not got (a GPU without ECC, a fan-less board...).
MISSING_VALUES = frozenset({"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]",
                            "[gpu is lost]", "[insufficient permissions]"})
ERROR_TEXT_LIMIT = 200


@dataclass
class GpuReading:
    gpus: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


def gpus_read(*, timeout: float = TIMEOUT_SECONDS) -> GpuReading:
    """Run nvidia-smi (found on PATH) and read its answer; never raises."""
    binary = shutil.which(NVIDIA_SMI)
    if binary is None:
        return GpuReading(error="nvidia-smi was not found (is the NVIDIA driver installed?)")
    try:
        result = subprocess.run([binary, *QUERY_ARGS], capture_output=True, text=True,
                                timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return GpuReading(error=f"nvidia-smi did not answer within {timeout:g} seconds")
    except OSError as error:
        return GpuReading(error=f"nvidia-smi could not be run: {error.strerror or error}")
    if result.returncode != 0:
        said = first_line(result.stderr) or first_line(result.stdout)
        return GpuReading(error=f"nvidia-smi failed with exit code {result.returncode}"
                                + (f": {said}" if said else ""))
    return gpus_parse(text=result.stdout)


def gpus_parse(*, text: str) -> GpuReading:
    gpus: list[dict[str, Any]] = []
    unreadable = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        gpu = gpu_line_parse(line=line)
        if gpu is None:
            unreadable += 1
        else:
            gpus.append(gpu)
    error = None
    if unreadable:
        noun = "line" if unreadable == 1 else "lines"
        error = f"{unreadable} {noun} of nvidia-smi output could not be read"
    elif not gpus:
        error = "nvidia-smi listed no GPUs"
    return GpuReading(gpus=gpus, error=error)


def gpu_line_parse(*, line: str) -> dict[str, Any] | None:
    """One GPU from one CSV line, or None when the line is not one (wrong number of fields, an
    index that is not a number)."""
    fields = [part.strip() for part in line.split(",")]
    if len(fields) != len(QUERY_FIELDS):
        return None
    index = integer_or_none(fields[0])
    if index is None or index < 0:
        return None
    return {
        "index": index,
        "uuid": fields[1] if not is_missing(fields[1]) else None,
        "name": fields[2] if not is_missing(fields[2]) else None,
        "memory_total_mib": integer_or_none(fields[3]),
        "temperature_c": integer_or_none(fields[4]),
        "utilization_percent": integer_or_none(fields[5]),
        "ecc_uncorrected": integer_or_none(fields[6]),
    }


def is_missing(value: str) -> bool:
    return value.lower() in MISSING_VALUES


def integer_or_none(value: str) -> int | None:
    if is_missing(value):
        return None
    try:
        return int(value)
    except ValueError:
        pass
    try:
        # A driver that writes "81559.0" or "34.5" still means a number.
        number = float(value)
    except ValueError:
        return None
    return int(number) if number == number and abs(number) != float("inf") else None


def first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:ERROR_TEXT_LIMIT]
    return ""
