"""Reads of the GPU catalog."""

import functools

from django.db.models import QuerySet

from .models import GpuModel
from .services import gpu_catalog_read


def gpu_models_list() -> list[GpuModel]:
    return list(GpuModel.objects.all())


def gpu_models_all() -> QuerySet[GpuModel]:
    """Every GPU model, as a queryset (for pages of them)."""
    return GpuModel.objects.all()


def gpu_model_get(*, slug: str) -> GpuModel | None:
    return GpuModel.objects.filter(slug=slug).first()


def gpu_models_by_slugs(*, slugs: list[str]) -> dict[str, GpuModel]:
    return {gpu.slug: gpu for gpu in GpuModel.objects.filter(slug__in=slugs)}


@functools.cache
def _nvidia_smi_names() -> dict[str, tuple[str, ...]]:
    return {entry["slug"]: tuple(entry.get("nvidia_smi_names", ())) for entry in gpu_catalog_read()}


def gpu_nvidia_smi_names(*, slug: str) -> tuple[str, ...]:
    """The names `nvidia-smi` gives the product sold as this GPU model ("NVIDIA H100 80GB HBM3"
    for "H100 SXM"), from the catalog's data file; empty for a model the file does not list (one
    an operator added), which is then recognised by its own name."""
    return _nvidia_smi_names().get(slug, ())
