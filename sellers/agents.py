"""What the host agent saw against what the seller registered: pure functions, no queries.

A server verifies when its agent reports exactly `gpu_count` GPUs, each of the registered model
(by the name nvidia-smi gives it), with the model's memory, and none with uncorrected ECC errors.
`gpus_compare` lists every difference; an empty list is a match.
"""

import functools
import re
from decimal import Decimal

from catalog.selectors import gpu_nvidia_smi_names

# Memory: nvidia-smi counts MiB, the makers' "80 GB" is about 80 GiB (an H100's 81,559 MiB is
# 79.6 GiB, an A100's 81,920 exactly 80). A GPU passes within 5% of the catalog's figure read as
# GiB; GDDR cards may also show 1/16 less, the share their ECC reserves when it is on (an L40S:
# 46,068 MiB of 48 GiB).
MEMORY_TOLERANCE = Decimal("0.05")
GDDR_ECC_RESERVED = Decimal(1) / 16
MIB_PER_GIB = 1024

# Words nvidia-smi adds to a product's name that the catalog leaves out.
VENDOR_WORDS = frozenset({"nvidia", "geforce"})


def gpu_name_normalise(name: str) -> str:
    """Lower case, words of letters and digits only, one space between: "NVIDIA A100-SXM4-80GB"
    and "nvidia a100 sxm4 80gb" are one name."""
    return " ".join(re.findall(r"[a-z0-9]+", name.casefold()))


def gpu_name_matches(*, gpu_model, seen: str) -> bool:
    """Whether nvidia-smi's `seen` name is this catalog model: one of the names the catalog data
    lists for it or, for a model it does not list, the model's own name once the vendor's words
    are dropped from both ("RTX 4090" is "NVIDIA GeForce RTX 4090")."""
    accepted = _accepted_names(gpu_model.slug)
    if accepted:
        return gpu_name_normalise(seen) in accepted

    def words(name: str) -> list[str]:
        return [word for word in gpu_name_normalise(name).split() if word not in VENDOR_WORDS]

    return bool(words(seen)) and words(seen) == words(gpu_model.name)


@functools.cache
def _accepted_names(slug: str) -> frozenset[str]:
    """The catalog data's nvidia-smi names of a model, normalised (read once: the file ships with
    the code, and every heartbeat of every server asks)."""
    return frozenset(gpu_name_normalise(name) for name in gpu_nvidia_smi_names(slug=slug))


def gpu_memory_matches(*, gpu_model, memory_mib: int) -> bool:
    expected = Decimal(gpu_model.memory_gb) * MIB_PER_GIB
    low = expected * (1 - MEMORY_TOLERANCE)
    if gpu_model.memory_type.upper().startswith("GDDR"):
        low *= 1 - GDDR_ECC_RESERVED
    return low <= memory_mib <= expected * (1 + MEMORY_TOLERANCE)


def gpus_compare(*, server, gpus: list[dict], gpu_error: str | None) -> list[dict]:
    """Every way the agent's report (`gpus`: dicts with index, name, memory_total_mib,
    ecc_uncorrected, as the heartbeat sends them) differs from the server's registration, in a
    stable order: `count` (with `error`, nvidia-smi's, when it had one), then per GPU by index
    `model`, `memory`, `ecc`. Empty: they match."""
    gpu_model = server.gpu_model
    found = []
    if len(gpus) != server.gpu_count:
        item = {"code": "count", "expected": server.gpu_count, "seen": len(gpus)}
        if gpu_error:
            item["error"] = gpu_error
        found.append(item)
    expected_mib = gpu_model.memory_gb * MIB_PER_GIB
    for gpu in sorted(gpus, key=lambda gpu: gpu["index"]):
        index = gpu["index"]
        if not gpu_name_matches(gpu_model=gpu_model, seen=gpu.get("name") or ""):
            found.append(
                {"code": "model", "index": index, "expected": gpu_model.name, "seen": gpu.get("name")}
            )
        memory = gpu.get("memory_total_mib")
        if memory is None or not gpu_memory_matches(gpu_model=gpu_model, memory_mib=memory):
            found.append({"code": "memory", "index": index, "expected": expected_mib, "seen": memory})
        if gpu.get("ecc_uncorrected"):
            found.append({"code": "ecc", "index": index, "seen": gpu["ecc_uncorrected"]})
    return found
