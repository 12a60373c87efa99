"""Public catalog pages. Each gathers the GPUs (one query) and the live prices (one query)."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.http import Http404
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext as _

from exchange.charts import price_history_svg
from exchange.selectors import MarketVersions, gpu_prices, market_is_open, market_versions, price_history
from marketplace import formatting
from marketplace.page_cache import page_cached
from marketplace.seo import faq_page

from . import tables
from .fit import BYTES_PER_PARAMETER, METHOD_LABELS, Method, largest_model_billions
from .forms import CompareForm
from .selectors import gpu_model_get, gpu_models_list
from .workloads import WORKLOADS, Column, workload_get

HISTORY_DAYS = 30
HISTORY_TABLE_ROWS = 48
HOME_COLUMNS = (Column.MEMORY, Column.BANDWIDTH, Column.PRICE)
LIST_COLUMNS = (Column.MEMORY, Column.MEMORY_TYPE, Column.BANDWIDTH, Column.BF16, Column.PRICE)
SORT_KEYS = {
    "memory": lambda gpu, price: gpu.memory_gb,
    "bandwidth": lambda gpu, price: gpu.bandwidth_gb_s,
    "price": lambda gpu, price: price.lowest_usd if price else None,
}


def home(request):
    return page_cached(request, name="home", versions=market_versions, render=lambda m: _home(request, m))


def _open(market) -> bool:
    """Whether the market is open: read with the versions, or now when the page is not shared."""
    return market.is_open if market is not None else market_is_open()


def _home(request, market):
    gpus = gpu_models_list()
    prices = gpu_prices()
    return render(request, "catalog/home.html", {
        "workloads": WORKLOADS,
        "headers": tables.column_headers(HOME_COLUMNS),
        "rows": tables.rows_for(gpus, HOME_COLUMNS, prices),
        "market_open": _open(market),
    })


def _sorted_rows(rows: list[tables.Row], sort: str) -> list[tables.Row]:
    key_name = sort.lstrip("-")
    if key_name not in SORT_KEYS:
        return rows
    key = SORT_KEYS[key_name]
    known = [row for row in rows if key(row.gpu, row.price) is not None]
    unknown = [row for row in rows if key(row.gpu, row.price) is None]
    known.sort(key=lambda row: key(row.gpu, row.price), reverse=sort.startswith("-"))
    return known + unknown


def gpu_list(request):
    return page_cached(
        request, name="gpu-list", versions=market_versions, render=lambda _market: _gpu_list(request)
    )


def _gpu_list(request):
    sort = request.GET.get("sort", "")
    rows = tables.rows_for(gpu_models_list(), LIST_COLUMNS, gpu_prices())
    sortable = {Column.MEMORY: "memory", Column.BANDWIDTH: "bandwidth", Column.PRICE: "price"}
    headers = tables.column_headers(LIST_COLUMNS)
    for column, header in zip(LIST_COLUMNS, headers, strict=True):
        key = sortable.get(column)
        if key is None:
            continue
        if sort.lstrip("-") == key:
            header["state"] = "descending" if sort.startswith("-") else "ascending"
        header["sort"] = f"-{key}" if header["state"] == "ascending" else key
    return render(request, "catalog/gpu_list.html", {
        "headers": headers,
        "rows": _sorted_rows(rows, sort),
        "sort": sort,
    })


@dataclass(frozen=True)
class _MinuteVersions:
    """The versions of a page that also changes with the minute."""

    market: MarketVersions
    minute_end: datetime

    @property
    def key(self) -> str:
        return f"{self.market.key}@{self.minute_end.isoformat()}"


def _minute_end(moment):
    """The end of the minute `moment` is in: where the price history's chart ends."""
    return moment.replace(second=0, microsecond=0) + timedelta(minutes=1)


def gpu_detail(request, slug: str):
    # The chart spans the 30 days to the end of this minute: the page is the same all the minute
    # long (each trade changes the book's version, so it is never missing from it). A copy in the
    # cache is found by the address alone: the GPU is read only to render.
    shown = {"end": _minute_end(timezone.now())}

    def rendered(versions):
        if versions is not None:
            shown["end"] = versions.minute_end
        return _gpu_detail(request, _gpu_listed(slug), versions and versions.market, end=shown["end"])

    return page_cached(
        request, name="gpu-detail",
        versions=lambda: _MinuteVersions(market_versions(gpu_slug=slug), _minute_end(timezone.now())),
        render=rendered,
        valid_until=lambda: shown["end"],
    )


def _gpu_listed(slug: str):
    gpu = gpu_model_get(slug=slug)
    if gpu is None:
        raise Http404(_("We do not list this GPU."))
    return gpu


def _gpu_detail(request, gpu, market, *, end):
    price = gpu_prices().get(gpu.pk)
    fits = [(METHOD_LABELS[m], largest_model_billions(gpu.memory_gb, m)) for m in Method]
    now = end
    history = price_history(gpu_model_id=gpu.pk, days=HISTORY_DAYS, now=now)
    start = now - timedelta(days=HISTORY_DAYS)
    return render(request, "catalog/gpu_detail.html", {
        "gpu": gpu,
        "price": price,
        "price_text": tables.price_text(price),
        "fits": fits,
        "workloads": [w for w in WORKLOADS if w.suits(gpu)],
        "market_open": _open(market),
        "history": list(reversed(history))[:HISTORY_TABLE_ROWS],
        "history_chart": price_history_svg(history, start=start, end=now),
    })


def workload_detail(request, slug: str):
    workload = workload_get(slug)
    if workload is None:
        raise Http404(_("We have no page for this workload."))
    return page_cached(
        request, name="workload", versions=market_versions,
        render=lambda market: _workload_detail(request, workload, market),
    )


def _workload_detail(request, workload, market):
    gpus = workload.suitable(gpu_models_list())
    return render(request, "catalog/workload_detail.html", {
        "workload": workload,
        "headers": tables.column_headers(workload.columns),
        "rows": tables.rows_for(gpus, workload.columns, gpu_prices()),
        "method_notes": [
            (
                METHOD_LABELS[m],
                formatting.number(BYTES_PER_PARAMETER[m].normalize()),
                int(BYTES_PER_PARAMETER[m]),  # gettext plurals take whole numbers
            )
            for m in workload.methods
        ],
        "faq_jsonld": faq_page([(str(q.question), str(q.answer)) for q in workload.faq]),
        "other_workloads": [w for w in WORKLOADS if w.slug != workload.slug],
        "compare_gpus": gpus,
        "market_open": _open(market),
    })


def compare(request):
    gpus = gpu_models_list()
    bound = "gpu" in request.GET or "workload" in request.GET
    form = CompareForm(request.GET if bound else None, gpus=gpus, initial={
        "workload": WORKLOADS[0].slug,
    })
    context = {"form": form, "workloads": WORKLOADS}
    if bound and form.is_valid():
        workload = workload_get(form.cleaned_data["workload"])
        by_slug = {gpu.slug: gpu for gpu in gpus}
        chosen = [by_slug[slug] for slug in form.cleaned_data["gpu"]]
        prices = gpu_prices()
        rows = tables.rows_for(chosen, workload.columns, prices)
        headers = tables.column_headers(workload.columns)
        # GPUs side by side: one table row per figure, one column per GPU.
        figures = [
            (header["label"], [row.cells[i] for row in rows]) for i, header in enumerate(headers)
        ]
        figures.append((
            _("Price per GB of memory per hour"),
            [tables.Cell(tables.price_per_gb_text(gpu, prices.get(gpu.pk))) for gpu in chosen],
        ))
        context.update({"workload": workload, "chosen": chosen, "figures": figures})
    return render(request, "catalog/compare.html", context)
