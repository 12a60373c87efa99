"""The buyer's orders and rentals, the market rules and the public market data (the trade page
is `views_trade`).

Entry points only: forms in, one service or selector, render.
"""


from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from billing.selectors import rental_costs, wallet_price_convert
from marketplace import formatting
from marketplace.errors import DomainError
from sellers.isolation import FACTS, SHARED_FACTS, Reserves
from sellers.models import SERVICE_TOKEN_PATH

from . import selectors
from .exceptions import (
    BidNotFound,
    PriceAlertNotFound,
    PriceAlertRejected,
    RentalNotFound,
    ServiceTokenUnavailable,
    SshKeyNotFound,
    SshKeyRejected,
)
from .forms import PriceAlertForm, SshKeyForm
from .models import RentalState
from .services import (
    bid_cancel,
    price_alert_set,
    price_alert_stop,
    price_alert_stop_by_token,
    rental_service_token_reveal,
    rental_stop,
    ssh_key_add,
    ssh_key_delete,
)
from .ssh_keys import ssh_connect_command, ssh_known_hosts_line


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


def _rental_or_404(request, pk: int):
    rental = selectors.rental_get_for_buyer(buyer=request.user, rental_id=pk)
    if rental is None:
        raise Http404(_("We could not find this rental."))
    return rental


@login_required
@require_GET
def rental_detail(request, pk: int):
    rental = _rental_or_404(request, pk)
    running = rental.state == RentalState.RUNNING  # running: its agent made the login
    ended = rental.state == RentalState.ENDED
    ends_at = rental.started_at + timedelta(hours=rental.hours) if rental.hours else None
    # Time left: to the end of the hours booked, else to the end of the hour paid.
    until = ends_at or rental.paid_through
    converted = wallet_price_convert(user=request.user, price_usd=rental.price_usd)
    port = selectors.rental_ssh_port(rental)
    return render(request, "exchange/rental.html", {
        "rental": _with_costs([rental])[0],
        "running": running,
        "ended": ended,
        "ends_at": ends_at,
        "time_left_until": until if not ended and until and until > timezone.now() else None,
        "price_text": formatting.usd(rental.price_usd),
        "price_wallet_text": formatting.money(*converted) if converted else "",
        "ssh_port": port,
        "service_ports": selectors.rental_service_ports(rental) if running else [],
        "takes_token": running and selectors.rental_takes_service_token(rental),
        "token_path": SERVICE_TOKEN_PATH,
        "ssh_command": ssh_connect_command(
            host=rental.server.host, port=port, username=rental.username
        ) if running else "",
        "known_hosts": ssh_known_hosts_line(
            host=rental.server.host, port=port, host_key=rental.server_host_key
        ) if running and rental.server_host_key else "",
        "delivery_minutes": settings.RENTAL_DELIVERY_SECONDS // 60,
    })


@login_required
@require_http_methods(["GET", "POST"])
def rental_stop_view(request, pk: int):
    """GET, or a POST without `confirmed`: the page that asks to confirm the stop (no JavaScript
    needed). A POST with `confirmed`: stop the rental."""
    if request.method != "POST" or request.POST.get("confirmed") != "1":
        rental = _rental_or_404(request, pk)
        if rental.state == RentalState.ENDED:
            return redirect("exchange:rental", pk=pk)
        return render(request, "exchange/rental_stop.html", {
            "rental": rental, "paid_through": rental.paid_through,
        })
    try:
        rental_stop(buyer=request.user, rental_id=pk)
    except RentalNotFound as missing:
        raise Http404(_("We could not find this rental.")) from missing
    except DomainError as rejected:
        messages.error(request, rejected.message)
    else:
        messages.success(request, _("Your rental is stopped and its GPUs are released."))
    return redirect("exchange:rental", pk=pk)


@login_required
@require_POST
@never_cache  # the page holds a secret: no copy in any cache, nor in the browser's history
def rental_service_token_view(request, pk: int):
    """The rental's service token, shown this once; afterwards back to the rental with why not."""
    try:
        rental = rental_service_token_reveal(buyer=request.user, rental_id=pk)
    except RentalNotFound as missing:
        raise Http404(missing.message) from missing
    except ServiceTokenUnavailable as unavailable:
        messages.error(request, unavailable.message)
        return redirect("exchange:rental", pk=pk)
    return render(request, "exchange/rental_token.html", {
        "rental": rental, "token": rental.service_token, "token_env": rental.container_template.token_env,
        "token_path": SERVICE_TOKEN_PATH,
    })


def _ssh_keys_page(request, form, *, status=200):
    return render(request, "exchange/ssh_keys.html", {
        "keys": selectors.ssh_keys_for_buyer(buyer=request.user), "form": form,
    }, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def ssh_keys(request):
    """The buyer's saved keys, and the form that adds one."""
    if request.method != "POST":
        return _ssh_keys_page(request, SshKeyForm())
    form = SshKeyForm(request.POST)
    if not form.is_valid():
        return _ssh_keys_page(request, form, status=400)
    try:
        key = ssh_key_add(buyer=request.user, **form.cleaned_data)
    except SshKeyRejected as rejected:
        form.add_error("name" if rejected.code.startswith("name") else "public_key", rejected.message)
        return _ssh_keys_page(request, form, status=400)
    messages.success(request, _("Your key %(name)s is saved.") % {"name": key.name})
    return redirect("exchange:ssh-keys")


@login_required
@require_POST
def ssh_key_delete_view(request, pk: int):
    try:
        ssh_key_delete(buyer=request.user, key_id=pk)
    except SshKeyNotFound as missing:
        raise Http404(missing.message) from missing
    messages.success(request, _("The key is deleted. Rentals that use it keep it until they end."))
    return redirect("exchange:ssh-keys")


def _price_alerts_page(request, form, *, status=200):
    return render(request, "exchange/price_alerts.html", {
        "alerts": selectors.price_alerts_for_buyer(buyer=request.user), "form": form,
    }, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def price_alerts(request):
    """The buyer's price alerts, and the form that sets one (the trade page's panel posts here
    too: its errors come back on this page, with the model to pick)."""
    if request.method != "POST":
        return _price_alerts_page(request, PriceAlertForm(initial={"gpus": 1}))
    form = PriceAlertForm(request.POST)
    if not form.is_valid():
        return _price_alerts_page(request, form, status=400)
    data = form.cleaned_data
    try:
        alert = price_alert_set(
            buyer=request.user, gpu_model_id=data["gpu_model"].pk, gpus=data["gpus"],
            threshold_usd=data["threshold_usd"],
        )
    except PriceAlertRejected as rejected:
        field = {"gpus_not_allowed": "gpus", "gpu_model_unknown": "gpu_model"}.get(rejected.code)
        form.add_error(field if field else ("threshold_usd" if rejected.code.startswith("price") else None),
                       rejected.message)
        return _price_alerts_page(request, form, status=400)
    messages.success(request, _("Your alert is set: we email you when %(count)d × %(gpu)s costs %(price)s "
                                "per GPU-hour or less.") % {
        "count": alert.gpus, "gpu": data["gpu_model"].name, "price": formatting.usd(alert.threshold_usd),
    })
    return redirect("exchange:price-alerts")


@login_required
@require_POST
def price_alert_stop_view(request, pk: int):
    try:
        price_alert_stop(buyer=request.user, alert_id=pk)
    except PriceAlertNotFound as missing:
        raise Http404(missing.message) from missing
    messages.success(request, _("The alert is stopped."))
    return redirect("exchange:price-alerts")


@require_http_methods(["GET", "POST"])
def price_alert_unsubscribe(request, token: str):
    """The link in an alert's email, signed in or not. GET asks (mail scanners open links);
    the one button POSTs and stops the alert."""
    if request.method != "POST":
        return render(request, "exchange/price_alert_unsubscribe.html", {"token": token, "stopped": None})
    try:
        alert = price_alert_stop_by_token(token=token)
    except PriceAlertNotFound as missing:
        raise Http404(missing.message) from missing
    return render(request, "exchange/price_alert_unsubscribe.html", {"token": token, "stopped": alert})


# What container mode needs of an agent's report besides a runtime that answered, by the key of
# the report's `container` object that `sellers.isolation.facts_reach` reads (tests/exchange check
# that each one alone keeps a server from "container").
CONTAINER_CONDITIONS = {
    "gpus_by_uuid": gettext_lazy(
        "the container runtime gives each container its own GPUs by their UUID;"
    ),
    "self_test": gettext_lazy(
        "the agent's self-test passed: a test container lists exactly its one GPU and no other GPU device;"
    ),
    "disk_limited": gettext_lazy("each container's disk is limited to its share;"),
}


def _isolation_rules() -> dict:
    """The published rule of `sellers.isolation`, read from its own data: the page and the function
    that derives a server's level cannot disagree."""
    reserves = Reserves.of_settings()
    return {
        "container_conditions": list(CONTAINER_CONDITIONS.values()),
        "toolkit_minimum": settings.CONTAINER_TOOLKIT_MINIMUM,
        "shared_facts": [FACTS[name] for name in SHARED_FACTS],
        "shown_facts": [FACTS[name] for name in FACTS if name not in SHARED_FACTS and name != "mig_enabled"],
        "reserve_cores": formatting.number(reserves.cpu_cores),
        "reserve_memory": formatting.number(reserves.memory_mib // 1024),
        "reserve_disk": formatting.number(reserves.disk_gb),
    }


@require_GET
def market_rules(request):
    # The published rules quote the thresholds the exchange runs with.
    return render(request, "exchange/market_rules.html", {
        "delivery_minutes": settings.RENTAL_DELIVERY_SECONDS // 60,
        "unreachable_minutes": settings.AGENT_UNREACHABLE_SECONDS // 60,
        "reliability_days": settings.RELIABILITY_DAYS,
        "new_days": settings.RELIABILITY_NEW_DAYS,
    } | _isolation_rules())


