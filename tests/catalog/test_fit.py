from decimal import Decimal

import pytest

from catalog.fit import Method, fits_for, largest_model_billions, model_fits
from catalog.services import gpu_catalog_read

# The 18 reference figures of the data file that came with the project (shared/data/gpus.toml):
# GPU slug -> (QLoRA, LoRA 16-bit), in billions of parameters.
REFERENCE = {
    "rtx-4090": (15, 7),
    "rtx-5090": (25, 10),
    "rtx-a6000": (35, 15),
    "l40s": (35, 15),
    "rtx-6000-ada": (35, 15),
    "a100-sxm": (60, 25),
    "h100-sxm": (60, 25),
    "rtx-pro-6000-blackwell": (75, 30),
    "h200": (110, 45),
}


def test_reference_covers_every_gpu_of_the_catalog():
    assert {entry["slug"] for entry in gpu_catalog_read()} == set(REFERENCE)


@pytest.mark.parametrize("entry", gpu_catalog_read(), ids=lambda entry: entry["slug"])
def test_rule_reproduces_the_reference_figures(entry):
    memory = entry["memory"]["gb"]
    qlora, lora16 = REFERENCE[entry["slug"]]
    assert largest_model_billions(memory, Method.QLORA) == qlora
    assert largest_model_billions(memory, Method.LORA16) == lora16


@pytest.mark.parametrize(
    ("memory_gb", "expected"),
    # QLoRA, 1 byte per parameter: usable 19.2, 9.6, 10.4, 6.4, 0.8 billion.
    [(24, 15), (12, 9), (13, 10), (8, 6), (1, 0)],
)
def test_rounding_is_down_to_five_from_ten_up_and_whole_below(memory_gb, expected):
    assert largest_model_billions(memory_gb, Method.QLORA) == expected


def test_other_methods():
    assert fits_for(80)[Method.FULL] == 4
    assert fits_for(141)[Method.FULL] == 7
    assert fits_for(80)[Method.INFERENCE16] == 25
    assert fits_for(80)[Method.INFERENCE4] == 85
    assert fits_for(24)[Method.INFERENCE16] == 8


def test_inference_in_8_bit():
    # 1.3 bytes per parameter: usable 64 GB / 1.3 = 49.2 -> 45; 19.2 / 1.3 = 14.7 -> 10.
    assert largest_model_billions(80, Method.INFERENCE8) == 45
    assert largest_model_billions(24, Method.INFERENCE8) == 10


@pytest.mark.parametrize(
    ("params", "memory_gb", "gpus", "method", "fits"),
    [
        # QLoRA, 1 byte: 24 GB -> 19.2 -> 15B; two of them 48 GB -> 38.4 -> 35B.
        ("15", 24, 1, Method.QLORA, True), ("16", 24, 1, Method.QLORA, False),
        ("35", 24, 2, Method.QLORA, True), ("36", 24, 2, Method.QLORA, False),
        # LoRA 16-bit, 2.5 bytes: 80 GB -> 64 / 2.5 = 25.6 -> 25B; four 80 GB -> 256 / 2.5 = 102.4 -> 100B.
        ("25", 80, 1, Method.LORA16, True), ("26", 80, 1, Method.LORA16, False),
        ("100", 80, 4, Method.LORA16, True), ("101", 80, 4, Method.LORA16, False),
        # Full, 16 bytes: 80 GB -> 4B; eight 80 GB -> 512 / 16 = 32 -> 30B (not 32: rounded to 5).
        ("4", 80, 1, Method.FULL, True), ("7", 80, 1, Method.FULL, False),
        ("30", 80, 8, Method.FULL, True), ("32", 80, 8, Method.FULL, False),
        # Inference 16-bit, 2.4 bytes: 80 GB -> 26.7 -> 25B; two -> 128 / 2.4 = 53.3 -> 50B.
        ("25", 80, 1, Method.INFERENCE16, True), ("50", 80, 2, Method.INFERENCE16, True),
        ("70", 80, 2, Method.INFERENCE16, False), ("70", 80, 4, Method.INFERENCE16, True),
        # Inference 8-bit, 1.3 bytes: 80 GB -> 45B; two -> 98.5 -> 95B.
        ("45", 80, 1, Method.INFERENCE8, True), ("70", 80, 1, Method.INFERENCE8, False),
        ("70", 80, 2, Method.INFERENCE8, True),
        # Inference 4-bit, 0.75 bytes: 80 GB -> 85B; 24 GB -> 25.6 -> 25B; a decimal size.
        ("70", 80, 1, Method.INFERENCE4, True), ("7.5", 24, 1, Method.INFERENCE4, True),
        ("405", 80, 4, Method.INFERENCE4, False), ("405", 80, 8, Method.INFERENCE4, True),
    ],
)
def test_model_fits_by_hand(params, memory_gb, gpus, method, fits):
    assert model_fits(params_billions=Decimal(params), memory_gb=memory_gb, gpus=gpus, method=method) is fits


@pytest.mark.parametrize("entry", gpu_catalog_read(), ids=lambda entry: entry["slug"])
def test_the_reference_figures_fit_on_one_gpu_and_one_more_billion_does_not(entry):
    memory = entry["memory"]["gb"]
    for method, figure in zip((Method.QLORA, Method.LORA16), REFERENCE[entry["slug"]], strict=True):
        assert model_fits(params_billions=Decimal(figure), memory_gb=memory, method=method)
        assert not model_fits(params_billions=Decimal(figure + 1), memory_gb=memory, method=method)
