"""The trade pages, the buyer's orders and rentals, the market rules and the public market data.

Entry points only: forms in, one service or selector, render. Orders go through
billing.services.order_place, which charges the first hour when the buyer's own order matched.
"""

from decimal import Decimal

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from billing.selectors import order_cost_preview, rental_costs
from billing.services import order_place
from catalog.selectors import gpu_model_get
from marketplace import formatting
from marketplace.errors import DomainError

from . import selectors
from .exceptions import BidNotFound, BidRejected, RentalNotFound
from .forms import BidForm, BuyNowForm
from .models import BID_GPU_COUNTS, RentalState, TimeInForce
from .services import bid_cancel, bid_terms_check, rental_stop


def _gpu_or_404(slug: str):
    gpu = gpu_model_get(slug=slug)
    if gpu is None:
        raise Http404(_("We do not list this GPU."))
    return gpu


def _buy_prices(gpu) -> dict[int, Decimal]:
    return selectors.best_asks_by_size(gpu_model_id=gpu.pk)


def _buy_rows(request, prices: dict[int, Decimal]) -> list[dict]:
    """One line per rental size: the best price per GPU-hour and what an hour costs the buyer."""
    rows = []
    for count in BID_GPU_COUNTS:
        price = prices.get(count)
        preview = (
            order_cost_preview(user=request.user, price_usd=price, gpus=count, hours=None) if price else None
        )
        rows.append({
            "gpus": count,
            "price": price,
            "price_text": formatting.usd(price) if price else "",
            "per_hour_text": preview.per_hour_text if preview else "",
        })
    return rows


def _book_context(gpu) -> dict:
    book = selectors.order_book(gpu_model_id=gpu.pk)
    return {
        "gpu": gpu,
        "book": book,
        "trades": selectors.trades_recent(gpu_model_id=gpu.pk, limit=10),
        "market_open": selectors.market_is_open(),
    }


def _trade_page(request, gpu, *, buy_form=None, bid_form=None, status=200):
    prices = _buy_prices(gpu)
    initial = {f"price_{count}": price for count, price in prices.items()}
    previewing = "preview" in request.GET
    if bid_form is None:
        bid_initial = request.GET.dict() if previewing else {"max_price_usd": prices.get(1)}
        bid_form = BidForm(initial=bid_initial)
    context = _book_context(gpu) | {
        "buy_form": buy_form or BuyNowForm(initial=initial),
        "bid_form": bid_form,
        "buy_rows": _buy_rows(request, prices),
        "preview": _preview_from(request, request.GET) if previewing else None,
    }
    return render(request, "exchange/trade.html", context, status=status)


@require_GET
def trade(request, slug: str):
    return _trade_page(request, _gpu_or_404(slug))


@require_GET
def trade_book(request, slug: str):
    """The order book and last trades alone: htmx swaps it in every few seconds."""
    return render(request, "exchange/_book.html", _book_context(_gpu_or_404(slug)))


def _preview_from(request, data):
    """The cost of the bid being typed, once its terms are ones the exchange accepts."""
    try:
        price = Decimal(data.get("max_price_usd", ""))
        gpus = int(data.get("gpus", "1"))
        hours = int(data["hours"]) if data.get("hours") else None
        bid_terms_check(gpus=gpus, max_price_usd=price, hours=hours)
    except (ArithmeticError, ValueError, BidRejected):
        return None
    return order_cost_preview(user=request.user, price_usd=price, gpus=gpus, hours=hours)


@require_GET
def trade_preview(request, slug: str):
    _gpu_or_404(slug)
    return render(request, "exchange/_preview.html", {"preview": _preview_from(request, request.GET)})


def _place(request, gpu, form, time_in_force: str):
    data = form.cleaned_data
    return order_place(
        buyer=request.user, gpu_model_id=gpu.pk, gpus=data["gpus"],
        max_price_usd=data["max_price_usd"], region=data.get("region") or "", hours=data.get("hours"),
        time_in_force=time_in_force, expires_at=data.get("expires_at"),
        ssh_public_key=data["ssh_public_key"], form_token=data["form_token"],
    )


ORDER_FORMS = {TimeInForce.BUY_NOW: (BuyNowForm, "buy_form"), TimeInForce.BID: (BidForm, "bid_form")}


def _order(request, slug: str, time_in_force: str):
    gpu = _gpu_or_404(slug)
    if request.method != "POST":
        # After signing in from a form, the login page sends the buyer back here.
        return redirect("exchange:trade", slug=slug)
    form_class, form_name = ORDER_FORMS[time_in_force]
    form = form_class(request.POST)
    placed = None
    if form.is_valid():
        try:
            placed = _place(request, gpu, form, time_in_force)
        except DomainError as rejected:
            form.add_error(None, rejected.message)
    if placed is None:
        return _trade_page(request, gpu, status=400, **{form_name: form})
    return _order_answer(request, slug, placed, time_in_force)


def _order_answer(request, slug: str, placed, time_in_force: str):
    if placed.rental is None and time_in_force == TimeInForce.BUY_NOW:
        messages.error(request, _(
            "The best offer changed before your order arrived, so nothing was bought. "
            "Check the new price and try again."
        ))
        return redirect("exchange:trade", slug=slug)
    if placed.rental is None:
        messages.success(
            request, _("Your bid rests in the book. We start your rental as soon as an offer matches it.")
        )
        return redirect("exchange:orders")
    if placed.rental.state == RentalState.ENDED:
        messages.error(request, _("Your balance could not pay the first hour, so the rental did not start."))
    else:
        messages.success(request, _("Your rental is running."))
    return redirect("exchange:rental", pk=placed.rental.pk)


@login_required
def trade_buy(request, slug: str):
    return _order(request, slug, TimeInForce.BUY_NOW)


@login_required
def trade_bid(request, slug: str):
    return _order(request, slug, TimeInForce.BID)


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

