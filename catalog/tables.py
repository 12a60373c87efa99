"""Turns GPUs, the fit rule and live prices into table rows that templates print as they are.

Prices come in as a mapping from GPU model id to an object with `lowest_usd` and
`gpus_on_offer` (the exchange's selector gives one); the catalog does not import the exchange.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from django.utils.translation import gettext as _

from marketplace import formatting

from .fit import Method, largest_model_billions
from .models import GpuModel
from .workloads import COLUMN_LABELS, Column


class LivePrice(Protocol):
    lowest_usd: Decimal
    gpus_on_offer: int


@dataclass(frozen=True)
class Cell:
    text: str
    numeric: bool = True


@dataclass(frozen=True)
class Row:
    gpu: GpuModel
    cells: list[Cell]
    price: Any


def price_text(price: LivePrice | None) -> str:
    if price is None:
        return _("no offers yet")
    return formatting.price_from(price.lowest_usd)


def cell_for(gpu: GpuModel, column: Column, price: LivePrice | None) -> Cell:
    if column == Column.MEMORY:
        return Cell(formatting.gigabytes(gpu.memory_gb))
    if column == Column.MEMORY_TYPE:
        return Cell(gpu.memory_type, numeric=False)
    if column == Column.BANDWIDTH:
        return Cell(formatting.bandwidth(gpu.bandwidth_gb_s))
    if column == Column.BF16:
        return Cell(formatting.tflops(gpu.bf16_dense_tflops))
    if column == Column.FP64:
        return Cell(formatting.tflops(gpu.fp64_tflops))
    if column == Column.PRICE:
        return Cell(price_text(price))
    method = Method(column.value)
    return Cell(formatting.parameters(largest_model_billions(gpu.memory_gb, method)))


def column_headers(columns: tuple[Column, ...]) -> list[dict]:
    """Table headers; the GPU list adds `sort` and `state` to make some of them sortable."""
    return [{"label": str(COLUMN_LABELS[column]), "sort": None, "state": ""} for column in columns]


def rows_for(
    gpus: list[GpuModel], columns: tuple[Column, ...], prices: Mapping[int, LivePrice]
) -> list[Row]:
    return [
        Row(
            gpu=gpu,
            cells=[cell_for(gpu, column, prices.get(gpu.pk)) for column in columns],
            price=prices.get(gpu.pk),
        )
        for gpu in gpus
    ]


def price_per_gb_text(gpu: GpuModel, price: LivePrice | None) -> str:
    if price is None:
        return formatting.NO_FIGURE
    return formatting.money_fine(price.lowest_usd / gpu.memory_gb, "USD")
