"""Reads of the GPU catalog."""

from django.db.models import QuerySet

from .models import GpuModel


def gpu_models_list() -> list[GpuModel]:
    return list(GpuModel.objects.all())


def gpu_models_all() -> QuerySet[GpuModel]:
    """Every GPU model, as a queryset (for pages of them)."""
    return GpuModel.objects.all()


def gpu_model_get(*, slug: str) -> GpuModel | None:
    return GpuModel.objects.filter(slug=slug).first()


def gpu_models_by_slugs(*, slugs: list[str]) -> dict[str, GpuModel]:
    return {gpu.slug: gpu for gpu in GpuModel.objects.filter(slug__in=slugs)}
