"""Every write to the GPU catalog."""

import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from django.db import transaction

from accounts.models import AuditAction
from accounts.services import instance_save_audited

from .models import GpuModel

CATALOG_FILE = Path(__file__).resolve().parent / "data" / "gpu_models.json"


@dataclass(frozen=True)
class CatalogLoadResult:
    created: int
    updated: int
    unchanged: int


def _decimal_or_none(value: str | None) -> Decimal | None:
    return None if value is None else Decimal(value)


def _fields_from_entry(entry: dict, position: int) -> dict:
    return {
        "name": entry["name"],
        "architecture": entry["architecture"],
        "memory_gb": entry["memory"]["gb"],
        "memory_type": entry["memory"]["type"],
        "bandwidth_gb_s": entry["memory"]["bandwidth_gb_s"],
        "bf16_dense_tflops": _decimal_or_none(entry["tflops"]["bf16_dense"]),
        "fp64_tflops": _decimal_or_none(entry["tflops"]["fp64"]),
        "ray_tracing_cores": entry["ray_tracing_cores"],
        "source": entry["source"]["document"],
        "source_column": entry["source"].get("column", ""),
        "bf16_sparse_tflops": _decimal_or_none(entry["source"].get("bf16_sparse_tflops")),
        "position": position,
    }


def gpu_catalog_read(path: Path = CATALOG_FILE) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["gpus"]


@transaction.atomic
def gpu_catalog_load(*, entries: list[dict], overwrite: bool = False) -> CatalogLoadResult:
    """Create the GPU models that are missing. Existing rows keep the operators' edits unless
    `overwrite` is set, so running this again (as `make run` does) never undoes the admin."""
    existing = {gpu.slug: gpu for gpu in GpuModel.objects.select_for_update()}
    created = updated = unchanged = 0
    for position, entry in enumerate(entries, start=1):
        fields = _fields_from_entry(entry, position * 10)
        gpu = existing.get(entry["slug"])
        if gpu is None:
            GpuModel.objects.create(slug=entry["slug"], **fields)
            created += 1
        elif overwrite and any(getattr(gpu, k) != v for k, v in fields.items()):
            GpuModel.objects.filter(pk=gpu.pk).update(**fields)
            updated += 1
        else:
            unchanged += 1
    return CatalogLoadResult(created=created, updated=updated, unchanged=unchanged)


def gpu_model_save(*, operator, gpu_model: GpuModel, changed: list[str]) -> GpuModel:
    """An operator's edit of a GPU's specifications (or a new GPU), recorded in the audit log."""
    permission = "catalog.change_gpumodel" if gpu_model.pk else "catalog.add_gpumodel"
    return instance_save_audited(
        operator=operator, instance=gpu_model, changed=changed, permission=permission,
        action=AuditAction.GPU_MODEL_CHANGE,
    )
