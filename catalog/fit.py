"""Which model fits on one GPU: the rule every page uses, in one place.

usable memory = 80 % of the GPU's memory (20 % stays free for activations, CUDA context and
fragmentation); model size = usable / bytes per parameter; shown rounded down to a multiple
of 5 billion from 10 billion up, and to a whole billion below that.
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
    INFERENCE4 = "inference4"


# Bytes of GPU memory per model parameter.
# QLoRA: 4-bit base weights plus adapters, optimiser state and quantisation constants.
# LoRA 16-bit: 2-byte base weights plus adapters and their optimiser state.
# Full fine-tuning: 2-byte weights, 2-byte gradients and 12 bytes of Adam state in FP32.
# Inference 16-bit: 2-byte weights plus 0.4 bytes per parameter for the KV cache of a
# handful of concurrent 4k-token requests. Inference 4-bit: 0.5-byte weights plus 0.25.
BYTES_PER_PARAMETER: dict[Method, Decimal] = {
    Method.QLORA: Decimal("1.0"),
    Method.LORA16: Decimal("2.5"),
    Method.FULL: Decimal("16"),
    Method.INFERENCE16: Decimal("2.4"),
    Method.INFERENCE4: Decimal("0.75"),
}

METHOD_LABELS = {
    Method.QLORA: _("QLoRA (4-bit)"),
    Method.LORA16: _("LoRA 16-bit"),
    Method.FULL: _("Full fine-tuning"),
    Method.INFERENCE16: _("Inference in 16-bit"),
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
