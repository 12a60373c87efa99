"""The catalog's operations of the API: GPU models with their figures and what fits on them
(docs/api.md). Public, entry points only."""

from decimal import Decimal
from typing import Annotated

from django.http import HttpResponse
from django.utils.translation import gettext_lazy as _
from ninja import Field, Query, Router, Schema

from exchange.selectors import fit_configurations
from marketplace.api_support import ApiProblem, Money, Page, page_of, problems, public_read, usd

from .fit import Method, fits_for
from .forms import MAX_FIT_HOURS, MAX_MODEL_BILLIONS
from .models import GpuModel
from .selectors import gpu_model_get, gpu_models_all

router = Router(tags=["catalog"])


class FiguresOut(Schema):
    architecture: str = Field(examples=["Hopper"])
    memory_type: str = Field(examples=["HBM3"])
    bf16_dense_tflops: str | None = Field(
        examples=["989.00"], description="Dense BF16 tensor TFLOPS, null where not published."
    )
    fp64_tflops: str | None = Field(examples=["67.00"], description="Null where not published.")
    ray_tracing_cores: bool = Field(examples=[False])


class FitsOut(Schema):
    """The largest model, in billions of parameters, that each method fits on one GPU."""

    qlora: int = Field(examples=[60])
    lora16: int = Field(examples=[25])
    full: int = Field(examples=[4])
    inference16: int = Field(examples=[25])
    inference8: int = Field(examples=[45])
    inference4: int = Field(examples=[85])


class GpuOut(Schema):
    slug: str = Field(examples=["h100-sxm"])
    name: str = Field(examples=["NVIDIA H100 SXM"])
    vendor: str = Field(examples=["NVIDIA"], description="The maker; empty when not known.")
    memory_gb: int = Field(examples=[80])
    bandwidth: int = Field(examples=[3350], description="Memory bandwidth in GB/s.")
    figures: FiguresOut
    fits: FitsOut


def _text(value) -> str | None:
    return None if value is None else format(value, "f")


def _gpu_out(gpu: GpuModel) -> dict:
    fits = fits_for(gpu.memory_gb)
    return {
        "slug": gpu.slug, "name": gpu.name, "vendor": gpu.vendor,
        "memory_gb": gpu.memory_gb, "bandwidth": gpu.bandwidth_gb_s,
        "figures": {
            "architecture": gpu.architecture, "memory_type": gpu.memory_type,
            "bf16_dense_tflops": _text(gpu.bf16_dense_tflops), "fp64_tflops": _text(gpu.fp64_tflops),
            "ray_tracing_cores": gpu.ray_tracing_cores,
        },
        "fits": {str(method): fits[method] for method in Method},
    }


@router.get(
    "/gpus", response={200: Page[GpuOut], **problems(400, 422, 429)}, auth=None, operation_id="gpus_list",
    summary="GPU models: specs and the largest model each fine-tuning or inference method fits",
)
def gpus_list(request, response: HttpResponse, cursor: str | None = None, limit: int | None = None):
    gpus, next_cursor = page_of(gpu_models_all(), cursor=cursor, limit=limit)
    public_read(response, max_age=60)
    return {"items": [_gpu_out(gpu) for gpu in gpus], "next_cursor": next_cursor}


@router.get(
    "/gpus/{slug}", response={200: GpuOut, **problems(404, 429)}, auth=None, operation_id="gpu_get",
    summary="One GPU model: specs and what fits on it",
)
def gpu_get(request, slug: str, response: HttpResponse):
    gpu = gpu_model_get(slug=slug)
    if gpu is None:
        raise ApiProblem(404, "gpu_model_not_found", _("We do not list this GPU."))
    public_read(response, max_age=60)
    return _gpu_out(gpu)


class FitConfigurationOut(Schema):
    gpu_model: str = Field(examples=["h100-sxm"])
    gpus: int = Field(examples=[2], description="GPUs on one server: 1, 2, 4 or 8, their memory pooled.")
    memory_gb: int = Field(examples=[160], description="The memory of all of them.")
    fits: bool = Field(description="Whether the model fits, by the rule of the catalog's tables.")
    price: Money | None = Field(
        description="The best live offer per GPU-hour with that many free GPUs on one server, "
        "null without one."
    )
    per_hour: Money | None = Field(description="An hour of all the GPUs at that price.")
    total: Money | None = Field(description="The hours asked at that price, null without hours or a price.")


class FitOut(Schema):
    params_b: str = Field(examples=["70"], description="The model size asked, in billions of parameters.")
    method: Method
    hours: int | None
    configurations: list[FitConfigurationOut] = Field(
        description="Every GPU model on 1, 2, 4 and 8 GPUs: the cheapest fitting first, then fitting "
        "without an offer, then not fitting."
    )


@router.get(
    "/fit", response={200: FitOut, **problems(400, 422, 429)}, auth=None, operation_id="fit_calculate",
    summary="Which GPU configurations fit a model, and their best live price",
)
def fit_calculate(
    request, response: HttpResponse,
    params_b: Annotated[Decimal, Query(
        gt=0, le=MAX_MODEL_BILLIONS, max_digits=6, decimal_places=1, allow_inf_nan=False,
        description="The model size in billions of parameters, for example 70 or 7.5.",
    )],
    method: Method,
    hours: Annotated[
        int | None, Query(ge=1, le=MAX_FIT_HOURS, description="Hours to price, optional.")
    ] = None,
):
    rows = fit_configurations(params_billions=params_b, method=method, hours=hours)
    public_read(response, max_age=10)
    return {
        "params_b": format(params_b.normalize(), "f"), "method": method, "hours": hours,
        "configurations": [
            {
                "gpu_model": row.gpu.slug, "gpus": row.gpus, "memory_gb": row.gpu.memory_gb * row.gpus,
                "fits": row.fits, "price": usd(row.price_usd), "per_hour": usd(row.hourly_usd),
                "total": usd(row.total_usd),
            }
            for row in rows
        ],
    }
