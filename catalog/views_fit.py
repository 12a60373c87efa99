"""The fit calculator: for a model size and a method, every GPU model on 1, 2, 4 and 8 GPUs of one
server, whether the model fits (`catalog.fit`, the rule of the workload tables) and the best live
price of that configuration. A GET form; htmx asks for the results alone as the visitor types."""

from urllib.parse import urlencode

from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from exchange.selectors import fit_configurations
from marketplace import formatting

from .fit import BYTES_PER_PARAMETER, METHOD_LABELS, USABLE_SHARE, Method
from .forms import COMMON_MODEL_SIZES, FitForm


def _row(row, *, hours: int | None) -> dict:
    query = {"gpus": row.gpus} | ({"hours": hours} if hours else {})
    return {
        "gpu": row.gpu,
        "gpus": row.gpus,
        "fits": row.fits,
        "memory_text": formatting.gigabytes(row.gpu.memory_gb * row.gpus),
        "price_text": formatting.usd(row.price_usd) if row.price_usd is not None else "",
        "hourly_text": formatting.usd(row.hourly_usd) if row.hourly_usd is not None else "",
        "total_text": formatting.usd(row.total_usd) if row.total_usd is not None else "",
        "rent_url": f"{reverse('exchange:trade', kwargs={'slug': row.gpu.slug})}?{urlencode(query)}"
        if row.fits and row.price_usd is not None else "",
    }


@require_GET
def fit(request):
    bound = "params_b" in request.GET or "method" in request.GET
    form = FitForm(request.GET if bound else None, initial={"method": Method.QLORA.value})
    rows, hours = None, None
    if bound and form.is_valid():
        hours = form.cleaned_data["hours"]
        rows = [
            _row(row, hours=hours)
            for row in fit_configurations(
                params_billions=form.cleaned_data["params_b"], method=Method(form.cleaned_data["method"]),
                hours=hours,
            )
        ]
    context = {
        "form": form,
        "rows": rows,
        "hours": hours,
        "fitting": sum(1 for row in rows or () if row["fits"]),
        "common_sizes": [(size, formatting.billions(size)) for size in COMMON_MODEL_SIZES],
        "usable_text": formatting.share(USABLE_SHARE),
        "method_notes": [
            (
                METHOD_LABELS[m],
                formatting.number(BYTES_PER_PARAMETER[m].normalize()),
                int(BYTES_PER_PARAMETER[m]),  # gettext plurals take whole numbers
            )
            for m in Method
        ],
    }
    template = "catalog/_fit_results.html" if request.htmx else "catalog/fit.html"
    return render(request, template, context)
