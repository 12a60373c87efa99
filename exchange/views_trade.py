"""The trade page of one GPU model: the book, buying now, bidding, the cost preview, and the
confirmation that an order which buys at once asks for before it is placed.

Entry points only: forms in, the exchange's rules and reads, render. Orders go through
billing.services.order_place, which charges the first hour when the buyer's own order matched.
Nothing here reads an SSH key or a price from a GET request: a link can open the page, never fill
its forms' price or key. Its query string sets the filter of what the page shows, a minimum
reliability of the servers and the isolation levels they are sold at, which the order forms then
show and carry, and may choose the buy
form's GPUs and hours (the fit calculator's "Rent this" links), when they are valid. The preview without
JavaScript is a POST, like the orders.
"""

import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import SimpleLazyObject
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from billing.selectors import CostPreview, order_cost_preview, order_spend_preview
from billing.services import order_place
from catalog.selectors import gpu_model_get
from marketplace import formatting
from marketplace.errors import DomainError
from marketplace.page_cache import page_cached
from sellers.isolation import ANY_LEVEL, IsolationLevel, levels_of_text
from sellers.models import Region

from . import selectors
from .exceptions import BidRejected, SshKeyRejected
from .forms import BidForm, BidTermsForm, BuyNowForm, PriceAlertForm, TradeFilterForm, isolation_levels_named
from .models import BID_GPU_COUNTS, RentalState, TimeInForce
from .services import MAX_BID_HOURS, bid_terms_check, isolation_filter_parse, ssh_key_add

# The field of the order forms that each refusal of the exchange is about.
ERROR_FIELDS = {
    "price_out_of_range": "max_price_usd", "price_off_tick": "max_price_usd",
    "gpus_not_allowed": "gpus", "gpus_unavailable": "gpus", "hours_invalid": "hours",
    "region_unknown": "region", "expiry_in_past": "expires_in", "expiry_not_allowed": "expires_in",
    "ssh_key_invalid": "ssh_public_key", "ssh_key_type": "ssh_public_key",
    "ssh_key_too_weak": "ssh_public_key", "ssh_key_too_long": "ssh_public_key",
    "ssh_key_several": "ssh_public_key", "min_reliability_invalid": "min_reliability",
    "isolation_levels_invalid": "isolation",
}


def _gpu_or_404(slug: str):
    gpu = gpu_model_get(slug=slug)
    if gpu is None:
        raise Http404(_("We do not list this GPU."))
    return gpu


def _refusal_show(form, rejected: DomainError) -> None:
    """A refusal of the exchange on the field it is about, else on the whole form."""
    name = ERROR_FIELDS.get(rejected.code)
    form.add_error(name if name in form.fields else None, rejected.message)


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


def _minimum(data) -> Decimal | None:
    """The minimum reliability the page filters by (from its query string, or from the order form
    sent back), None for any server."""
    return TradeFilterForm(data).minimum()


@dataclass(frozen=True)
class LevelsFilter:
    """The isolation levels the page filters by (None: all), and the refusal of a filter that is
    no list of levels (the page then shows every level and says why)."""

    levels: str | None = None
    error: str = ""


def _levels(query) -> LevelsFilter:
    """The isolation filter of the page's query string (`?isolation=container&isolation=whole` or
    `?isolation=container,whole`)."""
    try:
        return LevelsFilter(levels=isolation_filter_parse(query.getlist("isolation")))
    except BidRejected as refused:
        return LevelsFilter(error=refused.message)


def _book_context(
    gpu, *, now=None, market_open: bool | None = None, minimum: Decimal | None = None,
    levels: LevelsFilter = LevelsFilter(),
) -> dict:
    query = {"min_reliability": minimum} if minimum is not None else {}
    if levels.levels is not None:
        query["isolation"] = levels.levels
    return {
        "gpu": gpu,
        "book": selectors.order_book(
            gpu_model_id=gpu.pk, now=now, min_reliability=minimum, isolation_levels=levels.levels
        ),
        "trades": selectors.trades_recent(gpu_model_id=gpu.pk, limit=10),
        "market_open": selectors.market_is_open() if market_open is None else market_open,
        "min_reliability": minimum,
        "isolation_filter": isolation_levels_named(levels.levels) if levels.levels is not None else "",
        "isolation_error": levels.error,
        # The book refreshes itself with the page's filter.
        "book_query": urlencode(query),
    }


def _shown_prices(prices: dict[int, Decimal]) -> dict:
    return {f"price_{count}": price for count, price in prices.items()}


def _buy_chosen(query) -> dict:
    """The GPUs and hours a link chose for the buy form (`?gpus=2&hours=10`): those valid for an
    order, others left out. Never a price or a key."""
    chosen = {}
    gpus, hours = query.get("gpus", ""), query.get("hours", "")
    if gpus.isdecimal() and len(gpus) < 3 and int(gpus) in BID_GPU_COUNTS:
        chosen["gpus"] = int(gpus)
    if hours.isdecimal() and len(hours) < 6 and 1 <= int(hours) <= MAX_BID_HOURS:
        chosen["hours"] = int(hours)
    return chosen


def _saved_keys(request) -> list:
    """The signed-in buyer's saved SSH keys, for the order forms to offer (none for a visitor)."""
    if not request.user.is_authenticated:
        return []
    if not hasattr(request, "_saved_ssh_keys"):  # both order forms offer them: read them once
        request._saved_ssh_keys = list(selectors.ssh_keys_for_buyer(buyer=request.user))
    return request._saved_ssh_keys


def _trade_page(
    request, gpu, *, minimum: Decimal | None, buy_form=None, bid_form=None, preview=None, status=200,
    buy_chosen=None,
):
    """The page, its offers filtered by `minimum` and the query string's isolation levels (which the
    order forms start from)."""
    levels = _levels(request.GET)
    prices = selectors.best_asks_by_size(
        gpu_model_id=gpu.pk, min_reliability=minimum, isolation_levels=levels.levels
    )
    chosen = {"min_reliability": minimum}
    if levels.levels is not None:
        chosen["isolation"] = list(levels_of_text(levels.levels))
    context = _book_context(gpu, minimum=minimum, levels=levels) | {
        "filter_form": TradeFilterForm(initial={"isolation": list(levels_of_text(ANY_LEVEL))} | chosen),
        "reliability_days": settings.RELIABILITY_DAYS,
        "buy_form": buy_form or BuyNowForm(
            initial=_shown_prices(prices) | chosen | (buy_chosen or {}), saved_keys=_saved_keys(request)
        ),
        "bid_form": bid_form or BidForm(
            initial={"max_price_usd": prices.get(1)} | chosen, saved_keys=_saved_keys(request)
        ),
        "buy_rows": _buy_rows(request, prices),
        "preview": preview,
        "alert_form": PriceAlertForm(
            initial={"gpu_model": gpu.pk, "gpus": 1}, model_hidden=True, auto_id="alert_%s",
        ),
    }
    return render(request, "exchange/trade.html", context, status=status)


@dataclass(frozen=True)
class BidPreview:
    """What the bid being typed would do and cost, or why the exchange would refuse it."""

    errors: list[str] = field(default_factory=list)
    place: selectors.BidPlace | None = None
    cost: CostPreview | None = None
    price: Decimal | None = None  # per GPU-hour: what it buys at now, else its maximum price
    total_usd: Decimal | None = None  # for all its GPUs: for the hours asked, else for one hour
    hours: int | None = None


def _bid_preview(request, gpu, data) -> BidPreview:
    """The preview of a bid's terms, validated as placing the bid validates them (the form's
    fields, then `bid_terms_check`)."""
    form = BidTermsForm(data)
    if not form.is_valid():
        return BidPreview(errors=[error for errors in form.errors.values() for error in errors])
    terms = form.cleaned_data
    try:
        bid_terms_check(
            gpus=terms["gpus"], max_price_usd=terms["max_price_usd"], hours=terms["hours"],
            min_reliability=terms["min_reliability"],
        )
    except BidRejected as rejected:
        return BidPreview(errors=[rejected.message])
    place = selectors.bid_book_place(
        gpu_model_id=gpu.pk, gpus=terms["gpus"], region=terms["region"],
        max_price_usd=terms["max_price_usd"], min_reliability=terms["min_reliability"],
        isolation_levels=terms["isolation"], template_id=_template_id(terms),
    )
    price = place.fill_price or terms["max_price_usd"]
    return BidPreview(
        place=place,
        cost=order_cost_preview(user=request.user, price_usd=price, gpus=terms["gpus"], hours=terms["hours"]),
        price=price,
        total_usd=selectors.order_total_usd(price_usd=price, gpus=terms["gpus"], hours=terms["hours"]),
        hours=terms["hours"],
    )


@require_http_methods(["GET", "POST"])
def trade(request, slug: str):
    """GET: the page; its query string fills no price or key (only the buy form's GPUs and hours).
    POST: an order form sent back without
    JavaScript, to preview a bid's cost or to change an order after its confirmation. It shows
    the values sent, and places nothing."""
    gpu = _gpu_or_404(slug)
    if request.method == "GET":
        return _trade_page(request, gpu, minimum=_minimum(request.GET), buy_chosen=_buy_chosen(request.GET))
    sent = request.POST.dict()
    sent.pop("confirmed_price_usd", None)  # changing the order asks for a new confirmation
    if "isolation" in request.POST:
        sent["isolation"] = request.POST.getlist("isolation")  # checkboxes: every value ticked
    minimum = _minimum(request.POST)
    if request.POST.get("form") == "buy":
        prices = selectors.best_asks_by_size(gpu_model_id=gpu.pk, min_reliability=minimum)
        return _trade_page(
            request, gpu, minimum=minimum, buy_form=BuyNowForm(
                initial=sent | _shown_prices(prices), saved_keys=_saved_keys(request)
            )
        )
    return _trade_page(
        request, gpu, minimum=minimum, bid_form=BidForm(initial=sent, saved_keys=_saved_keys(request)),
        preview=_bid_preview(request, gpu, request.POST),
    )


@require_GET
def trade_book(request, slug: str):
    """The order book and last trades alone: htmx swaps it in every few seconds. Shared by every
    visitor until its book changes or one of its bids expires (the book filtered by reliability
    or isolation has a query string: rendered for each request)."""
    now = timezone.now()
    minimum, levels = _minimum(request.GET), _levels(request.GET)
    gpu = SimpleLazyObject(lambda: _gpu_or_404(slug))  # read only to render: a copy is found by address
    return page_cached(
        request, name="trade-book", versions=lambda: selectors.market_versions(gpu_slug=slug),
        render=lambda market: render(request, "exchange/_book.html", _book_context(
            gpu, now=now, market_open=market.is_open if market is not None else None, minimum=minimum,
            levels=levels,
        )),
        valid_until=lambda: selectors.bids_next_expiry(gpu_model_id=gpu.pk, now=now),
    )


@require_POST
def trade_preview(request, slug: str):
    """The preview of the bid being typed, as htmx asks for it: a POST, since it reads a price."""
    gpu = _gpu_or_404(slug)
    return render(request, "exchange/_preview.html", {"preview": _bid_preview(request, gpu, request.POST)})


def _confirm_page(request, gpu, form, *, kind: str, offer, moved: bool, form_token=None):
    """The page that asks the buyer to confirm an order that buys at once from `offer` (an
    `OfferQuote`): its price, region and reliability, what it spends in US dollars and in the
    wallet's currency, the balance after its first hour and the runway; the form's values in hidden
    fields, the price confirmed with them. Nothing is placed yet."""
    data = form.cleaned_data
    price = offer.price
    values = [
        (form[name].html_name, value) for name in form.fields if name != "confirmed_price_usd"
        for value in _values_of(form[name], replaced=form_token if name == "form_token" else None)
    ]
    hours = data.get("hours")
    minimum = data.get("min_reliability")
    return render(request, "exchange/confirm.html", {
        "gpu": gpu,
        "kind": kind,
        "action": reverse(f"exchange:trade-{kind}", kwargs={"slug": gpu.slug}),
        "values": values,
        "confirmed_price": formatting.number_input(price, places=2, language="en"),
        "moved": moved,
        "price": price,
        "gpus": data["gpus"],
        "hours": hours,
        "hours_text": formatting.number(hours) if hours else "",
        "region": Region(data["region"]).label if data.get("region") else "",
        "server_region": Region(offer.region).label if offer.region in Region.values else offer.region,
        "server_reliability": offer.reliability,
        "min_reliability_text": formatting.share(minimum) if minimum is not None else "",
        "isolation_text": isolation_levels_named(data["isolation"]),
        # Named only where it runs: in a container, which the order accepts.
        "template": (
            data.get("template") if IsolationLevel.CONTAINER in levels_of_text(data["isolation"]) else None
        ),
        "total_usd": selectors.order_total_usd(price_usd=price, gpus=data["gpus"], hours=hours),
        "spend": order_spend_preview(user=request.user, price_usd=price, gpus=data["gpus"], hours=hours),
    })


def _values_of(bound_field, *, replaced=None) -> list:
    """What a field posts, one value per hidden input (the isolation checkboxes post several)."""
    if replaced is not None:
        return [replaced]
    value = bound_field.value()
    return list(value) if isinstance(value, list | tuple) else [value]


def _place(request, gpu, form, time_in_force: str, *, max_price_usd: Decimal):
    data = form.cleaned_data
    placed = order_place(
        buyer=request.user, gpu_model_id=gpu.pk, gpus=data["gpus"], max_price_usd=max_price_usd,
        region=data.get("region") or "", hours=data.get("hours"), time_in_force=time_in_force,
        expires_at=data.get("expires_at"), ssh_public_key=data["ssh_public_key"],
        form_token=data["form_token"], min_reliability=data.get("min_reliability"),
        isolation_levels=data["isolation"], container_template=data.get("template"),
    )
    if data.get("save_key_as"):
        _pasted_key_save(request, name=data["save_key_as"], public_key=data["ssh_public_key"])
    return placed


def _template_id(data) -> int | None:
    template = data.get("template")
    return template.pk if template is not None else None


def _pasted_key_save(request, *, name: str, public_key: str) -> None:
    """Save the key pasted on an order placed (its name was checked with the form, the key by the
    order). The order stands whatever happens here: a key saved already or one too many is said."""
    try:
        ssh_key_add(buyer=request.user, name=name, public_key=public_key)
    except SshKeyRejected as rejected:
        if rejected.code != "ssh_key_duplicate":
            messages.warning(request, rejected.message)
        return
    messages.info(request, _("Your key is saved as “%(name)s”: your next orders offer it.") % {"name": name})


def _terms_refused(form, *, price: Decimal) -> bool:
    """Check the terms at `price` as the exchange will, the refusal shown on the form; True when
    refused."""
    data = form.cleaned_data
    try:
        bid_terms_check(
            gpus=data["gpus"], max_price_usd=price, hours=data["hours"],
            min_reliability=data.get("min_reliability"),
        )
    except BidRejected as rejected:
        _refusal_show(form, rejected)
        return True
    return False


def _no_offer_error(form) -> None:
    data = form.cleaned_data
    if data.get("region"):
        message = _(
            "No single server in the region %(region)s offers %(count)d GPUs of this model right now."
        ) % {"region": Region(data["region"]).label, "count": data["gpus"]}
    else:
        message = _("No single server offers %(count)d GPUs of this model right now.") % {
            "count": data["gpus"]
        }
    form.add_error("gpus", message)


@login_required
def trade_buy(request, slug: str):
    """Buy now at the best offer for the GPUs and region chosen. When that price is not the one
    the page showed (another region, or the book moved), the confirmation shows it and asks."""
    gpu = _gpu_or_404(slug)
    if request.method != "POST":
        # After signing in from a form, the login page sends the buyer back here.
        return redirect("exchange:trade", slug=slug)
    form = BuyNowForm(request.POST, saved_keys=_saved_keys(request))
    if not form.is_valid():
        return _trade_page(request, gpu, minimum=_minimum(request.POST), buy_form=form, status=400)
    data = form.cleaned_data
    offer = selectors.order_offer_best(
        gpu_model_id=gpu.pk, gpus=data["gpus"], region=data["region"],
        min_reliability=data["min_reliability"], isolation_levels=data["isolation"],
        template_id=_template_id(data),
    )
    if offer is None:
        _no_offer_error(form)
        return _trade_page(request, gpu, minimum=_minimum(request.POST), buy_form=form, status=400)
    quote = offer.price
    if _terms_refused(form, price=quote):
        return _trade_page(request, gpu, minimum=_minimum(request.POST), buy_form=form, status=400)
    agreed = data["confirmed_price_usd"]
    if agreed is None or quote != agreed:
        # Every buy now asks once; again when the best price is no longer the one confirmed. "Changed"
        # when the buyer saw another price for this very order (the page's, for no region).
        shown = form.price_agreed()
        moved = agreed is not None or (
            shown is not None and not data["region"] and _book_price(gpu, data, quote=quote) != shown
        )
        return _confirm_page(request, gpu, form, kind="buy", offer=offer, moved=moved)
    try:
        placed = _place(request, gpu, form, TimeInForce.BUY_NOW, max_price_usd=agreed)
    except DomainError as rejected:
        _refusal_show(form, rejected)
        return _trade_page(request, gpu, minimum=_minimum(request.POST), buy_form=form, status=400)
    if placed.rental is None:
        return _bought_nothing(request, gpu, form)
    return _rental_answer(request, placed.rental)


def _book_price(gpu, data, *, quote: Decimal) -> Decimal | None:
    """The best price for the order as the page's book shows it, for any template: a template held
    only by dearer servers raises the quote, and that is no change of the book."""
    if _template_id(data) is None:
        return quote
    offer = selectors.order_offer_best(
        gpu_model_id=gpu.pk, gpus=data["gpus"], region="", min_reliability=data["min_reliability"],
        isolation_levels=data["isolation"], template_id=None,
    )
    return offer.price if offer is not None else None


def _bought_nothing(request, gpu, form):
    """The best offer went between the quote and the order: ask again at the new price, with a
    new form token (the one sent names the order that bought nothing)."""
    data = form.cleaned_data
    offer = selectors.order_offer_best(
        gpu_model_id=gpu.pk, gpus=data["gpus"], region=data["region"],
        min_reliability=data["min_reliability"], isolation_levels=data["isolation"],
        template_id=_template_id(data),
    )
    if offer is None:
        # Sent again, the form's token finds the order that bought nothing and comes back here.
        _no_offer_error(form)
        return _trade_page(request, gpu, minimum=_minimum(request.POST), buy_form=form, status=409)
    return _confirm_page(request, gpu, form, kind="buy", offer=offer, moved=True, form_token=uuid.uuid4())


@login_required
def trade_bid(request, slug: str):
    """Place a bid. One that would buy at once shows the confirmation first, and is placed when
    the buyer confirms the price it shows."""
    gpu = _gpu_or_404(slug)
    if request.method != "POST":
        return redirect("exchange:trade", slug=slug)
    form = BidForm(request.POST, saved_keys=_saved_keys(request))
    if not form.is_valid() or _terms_refused(form, price=form.cleaned_data["max_price_usd"]):
        return _trade_page(request, gpu, minimum=_minimum(request.POST), bid_form=form, status=400)
    data = form.cleaned_data
    place = selectors.bid_book_place(
        gpu_model_id=gpu.pk, gpus=data["gpus"], region=data["region"], max_price_usd=data["max_price_usd"],
        min_reliability=data["min_reliability"], isolation_levels=data["isolation"],
        template_id=_template_id(data),
    )
    confirmed = data["confirmed_price_usd"]
    if place.fill_price is not None and place.fill_price != confirmed:
        offer = selectors.order_offer_best(
            gpu_model_id=gpu.pk, gpus=data["gpus"], region=data["region"], max_price_usd=place.fill_price,
            min_reliability=data["min_reliability"], isolation_levels=data["isolation"],
            template_id=_template_id(data),
        ) or selectors.OfferQuote(price=place.fill_price, region="", reliability=None)
        return _confirm_page(request, gpu, form, kind="bid", offer=offer, moved=confirmed is not None)
    try:
        placed = _place(request, gpu, form, TimeInForce.BID, max_price_usd=data["max_price_usd"])
    except DomainError as rejected:
        _refusal_show(form, rejected)
        return _trade_page(request, gpu, minimum=_minimum(request.POST), bid_form=form, status=400)
    if placed.rental is None:
        messages.success(
            request, _("Your bid rests in the book. We start your rental as soon as an offer matches it.")
        )
        return redirect("exchange:orders")
    return _rental_answer(request, placed.rental)


def _rental_answer(request, rental):
    if rental.state == RentalState.ENDED:
        messages.error(request, _("Your balance could not pay the first hour, so the rental did not start."))
    else:
        messages.success(request, _("Your first hour is paid: the server is creating your login."))
    return redirect("exchange:rental", pk=rental.pk)
