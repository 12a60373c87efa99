import pytest

from catalog.fit import Method, fits_for, largest_model_billions
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
