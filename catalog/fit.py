"""Which model fits on one GPU: the rule every page uses, in one place.

usable memory = 80 % of the GPU's memory (20 % stays free for activations, CUDA context and
fragmentation); model size = usable / bytes per parameter; shown rounded down to a multiple
of 5 billion from 10 billion up, and to a whole billion below that.

A model of a given size fits a method on G GPUs of one server when it is no larger than the
largest model of G times one GPU's memory (`model_fits`): the fit calculator's answer is the
workload tables' figure, never a different one. Assumption: GPUs of one server pool their memory,
for sharded training (FSDP or DeepSpeed ZeRO-3) and tensor-parallel inference alike.
"""

from decimal import ROUND_FLOOR, Decimal
from enum import StrEnum

from django.utils.translation import gettext_lazy as _

USABLE_SHARE = Decimal("0.8")


class Method(StrEnum):
    QLORA = "qlora"
    LORA16 = "lora16"
    FULL = "full"
    INFERENCE16 = "inference16"
    INFERENCE8 = "inference8"
    INFERENCE4 = "inference4"


# Bytes of GPU memory per model parameter.
# QLoRA: 4-bit base weights plus adapters, optimiser state and quantisation constants.
# LoRA 16-bit: 2-byte base weights plus adapters and their optimiser state.
# Full fine-tuning: 2-byte weights, 2-byte gradients and 12 bytes of Adam state in FP32.
# Inference 16-bit: 2-byte weights plus 0.4 bytes per parameter for the KV cache of a
# handful of concurrent 4k-token requests. Inference 8-bit: 1-byte weights plus 0.3 (the cache
# stays in 16-bit, so it shrinks less than the weights). Inference 4-bit: 0.5-byte weights plus 0.25.
BYTES_PER_PARAMETER: dict[Method, Decimal] = {
    Method.QLORA: Decimal("1.0"),
    Method.LORA16: Decimal("2.5"),
    Method.FULL: Decimal("16"),
    Method.INFERENCE16: Decimal("2.4"),
    Method.INFERENCE8: Decimal("1.3"),
    Method.INFERENCE4: Decimal("0.75"),
}

METHOD_LABELS = {
    Method.QLORA: _("QLoRA (4-bit)"),
    Method.LORA16: _("LoRA 16-bit"),
    Method.FULL: _("Full fine-tuning"),
    Method.INFERENCE16: _("Inference in 16-bit"),
    Method.INFERENCE8: _("Inference in 8-bit"),
    Method.INFERENCE4: _("Inference in 4-bit"),
}


def largest_model_billions(memory_gb: int | Decimal, method: Method) -> int:
    """The largest model, in billions of parameters, that `method` fits in `memory_gb` GB."""
    size = USABLE_SHARE * Decimal(memory_gb) / BYTES_PER_PARAMETER[method]
    whole = int(size.to_integral_value(rounding=ROUND_FLOOR))
    if size >= 10:
        return whole - whole % 5
    return whole


def fits_for(memory_gb: int | Decimal) -> dict[Method, int]:
    return {method: largest_model_billions(memory_gb, method) for method in Method}


def model_fits(*, params_billions: Decimal, memory_gb: int | Decimal, gpus: int = 1, method: Method) -> bool:
    """Whether a model of `params_billions` fits `method` on `gpus` GPUs of `memory_gb` each, on one
    server (their memory pooled): no larger than the largest model the tables show for it."""
    return params_billions <= largest_model_billions(Decimal(memory_gb) * gpus, method)
