"""The buyer's orders and rentals, the market rules and the public market data (the trade page
is `views_trade`).

Entry points only: forms in, one service or selector, render.
"""

from decimal import Decimal

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from billing.selectors import rental_costs
from catalog.selectors import gpu_model_get
from marketplace import formatting
from marketplace.errors import DomainError

from . import selectors
from .exceptions import BidNotFound, RentalNotFound
from .models import RentalState
from .services import bid_cancel, rental_stop
from .ssh_keys import ssh_connect_command


@login_required
@require_GET
def orders(request):
    return render(request, "exchange/orders.html", {"bids": selectors.bids_for_buyer(buyer=request.user)})


@login_required
@require_POST
def order_cancel(request, pk: int):
    try:
        bid_cancel(buyer=request.user, bid_id=pk)
    except BidNotFound as missing:
        raise Http404(_("We could not find this order.")) from missing
    except DomainError as rejected:
        messages.error(request, rejected.message)
    else:
        messages.success(request, _("Your bid is cancelled."))
    return redirect("exchange:orders")


def _with_costs(rentals):
    costs = rental_costs(rental_ids=[rental.pk for rental in rentals])
    for rental in rentals:
        amount, currency = costs.get(rental.pk, (None, None))
        rental.cost_text = formatting.money(amount, currency) if amount is not None else "—"
    return rentals


@login_required
@require_GET
def rentals(request):
    return render(request, "exchange/rentals.html", {
        "rentals": _with_costs(list(selectors.rentals_for_buyer(buyer=request.user))),
    })


@login_required
@require_GET
def rental_detail(request, pk: int):
    rental = selectors.rental_get_for_buyer(buyer=request.user, rental_id=pk)
    if rental is None:
        raise Http404(_("We could not find this rental."))
    return render(request, "exchange/rental.html", {
        "rental": _with_costs([rental])[0],
        "running": rental.state == RentalState.RUNNING,
        "price_text": formatting.usd(rental.price_usd),
        "ssh_command": ssh_connect_command(
            host=rental.server.host, port=rental.server.ssh_port, username=rental.username
        ),
    })


@login_required
@require_POST
def rental_stop_view(request, pk: int):
    try:
        rental_stop(buyer=request.user, rental_id=pk)
    except RentalNotFound as missing:
        raise Http404(_("We could not find this rental.")) from missing
    except DomainError as rejected:
        messages.error(request, rejected.message)
    else:
        messages.success(request, _("Your rental is stopped and its GPUs are released."))
    return redirect("exchange:rental", pk=pk)


@require_GET
def market_rules(request):
    return render(request, "exchange/market_rules.html")


def _decimal_text(value: Decimal | None) -> str | None:
    return None if value is None else f"{value:.2f}"


@require_GET
def market_data(request, slug: str):
    """Public, read-only market data of one GPU model, prices as strings in US dollars."""
    gpu = gpu_model_get(slug=slug)
    if gpu is None:
        return JsonResponse({"error": "unknown GPU model"}, status=404)
    book = selectors.order_book(gpu_model_id=gpu.pk)
    trades = selectors.trades_recent(gpu_model_id=gpu.pk, limit=20)
    response = JsonResponse({
        "gpu_model": gpu.slug,
        "currency": "USD",
        "unit": "GPU-hour",
        "market_open": selectors.market_is_open(),
        "best_bid": _decimal_text(book.best_bid),
        "best_ask": _decimal_text(book.best_ask),
        "spread": _decimal_text(book.spread),
        "asks": [{"price": _decimal_text(level.price), "gpus": level.gpus} for level in book.asks],
        "bids": [{"price": _decimal_text(level.price), "gpus": level.gpus} for level in book.bids],
        "last_trades": [
            {"time": trade.time.isoformat(), "price": _decimal_text(trade.price), "gpus": trade.gpus}
            for trade in trades
        ],
    })
    response["Cache-Control"] = "public, max-age=5"
    response["Access-Control-Allow-Origin"] = "*"
    return response

