from decimal import Decimal

import pytest

from catalog.models import GpuModel
from catalog.services import gpu_catalog_load, gpu_catalog_read

pytestmark = pytest.mark.django_db


def test_load_creates_every_gpu_with_its_figures():
    result = gpu_catalog_load(entries=gpu_catalog_read())
    assert result.created == 9
    h200 = GpuModel.objects.get(slug="h200")
    assert (h200.memory_gb, h200.memory_type, h200.bandwidth_gb_s) == (141, "HBM3e", 4800)
    assert h200.bf16_dense_tflops == Decimal("989.50")
    assert h200.fp64_tflops == Decimal("34.00")
    assert GpuModel.objects.get(slug="rtx-5090").bf16_dense_tflops is None


def test_load_twice_keeps_operator_edits():
    gpu_catalog_load(entries=gpu_catalog_read())
    GpuModel.objects.filter(slug="h200").update(bandwidth_gb_s=4900)
    again = gpu_catalog_load(entries=gpu_catalog_read())
    assert (again.created, again.updated, again.unchanged) == (0, 0, 9)
    assert GpuModel.objects.get(slug="h200").bandwidth_gb_s == 4900
    assert GpuModel.objects.count() == 9


def test_overwrite_resets_to_the_data_file():
    gpu_catalog_load(entries=gpu_catalog_read())
    GpuModel.objects.filter(slug="h200").update(bandwidth_gb_s=4900)
    result = gpu_catalog_load(entries=gpu_catalog_read(), overwrite=True)
    assert result.updated == 1
    assert GpuModel.objects.get(slug="h200").bandwidth_gb_s == 4800
