"""The buyer's operations of the exchange in the API: the cost of an order, bids and rentals
(docs/api.md). Entry points only: the token's user, one service or selector, the answer shaped.
Every object is looked up through a selector that takes the buyer: another buyer's answers 404."""

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Literal

from django.core.exceptions import ObjectDoesNotExist
from django.http import HttpResponse
from django.utils.translation import gettext_lazy as _
from ninja import Field, Router, Schema, Status
from pydantic import StrictInt

from billing.selectors import order_cost_preview, rental_costs
from billing.services import order_place
from catalog.selectors import gpu_model_get
from marketplace.api_support import (
    READ,
    TRADE,
    ApiProblem,
    DecimalText,
    InputSchema,
    Money,
    Page,
    UtcTime,
    money,
    page_of,
    problems,
    share,
    token_of,
    usd,
)
from sellers.isolation import levels_of_text
from sellers.models import SERVICE_TOKEN_PATH, Region

from . import selectors
from .models import RentalState
from .services import (
    bid_cancel,
    bid_terms_check,
    container_template_choose,
    isolation_levels_parse,
    min_reliability_parse,
    order_terms_check,
    rental_service_token_reveal,
    rental_stop,
)
from .ssh_keys import ssh_connect_command, ssh_known_hosts_line

router = Router(tags=["orders"])

# Idempotency keys name bids through this namespace: the same token and key give the same form token.
IDEMPOTENT_BIDS = uuid.UUID("6f1f3a52-8d0e-4b59-9a57-2f0c7f1e4b11")
GpuCount = Annotated[StrictInt, Field(examples=[1], description="GPUs on one server: 1, 2, 4 or 8.")]
Hours = Annotated[
    StrictInt | None, Field(None, examples=[24], description="Whole hours; null to run until stopped.")
]
RegionText = Annotated[
    str, Field("", max_length=20, examples=["europe"], description="Empty for any region.")
]
MinReliabilityText = Annotated[
    str | None,
    Field(
        None, max_length=20, examples=["0.95"],
        description="A share from 0 to 1, at most 3 decimals: only servers at least this reliable; "
                    "new servers, without a score yet, never are. Null for any server.",
    ),
]

IsolationList = Annotated[
    list[Annotated[str, Field(max_length=20)]] | None,
    Field(
        None, max_length=3, examples=[["container", "shared"]],
        description="The isolation levels accepted: container, shared and/or whole (the market rules). "
                    "Null or absent for all of them; never empty.",
    ),
]


TemplateText = Annotated[
    str | None,
    Field(
        None, max_length=40, examples=["pytorch"],
        description="The container template (GET /templates) a server sold as container runs for it; only "
                    "servers holding it fill the order there. Null or absent for the operators' default.",
    ),
]


def _gpu_for_order(slug: str):
    gpu = gpu_model_get(slug=slug)
    if gpu is None:
        raise ApiProblem(422, "gpu_model_unknown", _("We do not list this GPU."))
    return gpu


def _no_offer(*, gpus: int, region: str) -> ApiProblem:
    if region:
        detail = _(
            "No single server in the region %(region)s offers %(count)d GPUs of this model right now."
        ) % {"region": Region(region).label, "count": gpus}
    else:
        detail = _("No single server offers %(count)d GPUs of this model right now.") % {"count": gpus}
    return ApiProblem(404, "no_offer", detail)


class QuoteIn(InputSchema):
    gpu_model: str = Field(max_length=80, examples=["h100-sxm"])
    gpus: GpuCount
    hours: Hours
    region: RegionText
    min_reliability: MinReliabilityText
    isolation: IsolationList
    template: TemplateText


class QuoteOut(Schema):
    gpu_model: str = Field(examples=["h100-sxm"])
    gpus: int = Field(examples=[2])
    hours: int | None = Field(examples=[24])
    price: Money = Field(description="Per GPU-hour: the best offer that fills the order on one server.")
    per_hour_usd: Money = Field(description="What one hour of all the GPUs costs in US dollars.")
    total_usd: Money | None = Field(
        description="For all the hours asked; null when the order runs until stopped."
    )
    per_hour: Money | None = Field(
        description="One hour in the wallet's currency at the current rate (US dollars before the first "
                    "top-up); null when the currency has no rate."
    )
    total: Money | None = Field(description="All the hours in the wallet's currency; null when open-ended.")
    covers_first_hour: bool | None = Field(description="Whether the balance pays the first hour.")


@router.post(
    "/quote", response={200: QuoteOut, **problems(400, 401, 403, 404, 422, 429)},
    auth=READ, tags=["orders"], operation_id="quote",
    summary="What an order would cost now at the best offer, in US dollars and in the wallet's currency",
)
def quote(request, payload: QuoteIn):
    minimum = min_reliability_parse(payload.min_reliability)
    levels = isolation_levels_parse(payload.isolation)
    order_terms_check(gpus=payload.gpus, hours=payload.hours, region=payload.region, min_reliability=minimum)
    gpu = _gpu_for_order(payload.gpu_model)
    template = container_template_choose(payload.template)
    price = selectors.order_quote(
        gpu_model_id=gpu.pk, gpus=payload.gpus, region=payload.region, min_reliability=minimum,
        isolation_levels=levels, template_id=template.pk if template else None,
    )
    if price is None:
        raise _no_offer(gpus=payload.gpus, region=payload.region)
    bid_terms_check(gpus=payload.gpus, max_price_usd=price, hours=payload.hours)
    cost = order_cost_preview(
        user=token_of(request).user, price_usd=price, gpus=payload.gpus, hours=payload.hours
    )
    total_usd = selectors.order_total_usd(price_usd=price, gpus=payload.gpus, hours=payload.hours)
    return {
        "gpu_model": gpu.slug, "gpus": payload.gpus, "hours": payload.hours, "price": usd(price),
        "per_hour_usd": usd(price * payload.gpus),
        "total_usd": usd(total_usd) if payload.hours else None,
        "per_hour": money(cost.per_hour, cost.currency) if cost else None,
        "total": money(cost.total, cost.currency) if cost else None,
        "covers_first_hour": cost.covers_first_hour if cost else None,
    }


class BidIn(InputSchema):
    gpu_model: str = Field(max_length=80, examples=["h100-sxm"])
    gpus: GpuCount
    max_price: DecimalText = Field(
        description="US dollars per GPU-hour, tick 0.01: the most this order pays."
    )
    hours: Hours
    region: RegionText
    time_in_force: Literal["buy_now", "bid"] = Field(
        examples=["bid"], description="buy_now: fill at the best offer or cancel; bid: rest in the book."
    )
    expires_at: datetime | None = Field(None, description="A resting bid only: when it leaves the book.")
    min_reliability: MinReliabilityText
    isolation: IsolationList
    template: TemplateText
    ssh_public_key: str | None = Field(
        None, max_length=16384, examples=["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI... me@laptop"],
        description="The one line of your public key file: the rental's server lets this key in. "
                    "Send it or ssh_key_id, not both.",
    )
    ssh_key_id: int | None = Field(
        None, ge=1, le=2**62, examples=[7], description="One of your saved keys (GET /ssh-keys) instead."
    )


class BidOut(Schema):
    id: int = Field(examples=[42])
    gpu_model: str = Field(examples=["h100-sxm"])
    gpus: int = Field(examples=[2])
    max_price: Money
    hours: int | None = Field(examples=[24])
    region: str = Field(examples=[""])
    time_in_force: str = Field(examples=["bid"])
    expires_at: UtcTime | None
    min_reliability: str | None = Field(
        examples=["0.950"], description="Only servers at least this reliable; null for any server."
    )
    isolation: list[str] = Field(
        examples=[["container", "shared", "whole"]], description="The isolation levels it accepts."
    )
    template: str | None = Field(
        examples=["pytorch"], description="The container template it runs in a container; null for none."
    )
    state: str = Field(examples=["open"], description="open, filled, cancelled or expired.")
    cancel_reason: str = Field(
        examples=[""], description="buyer, not_filled, insufficient_balance or operator; empty otherwise."
    )
    created_at: UtcTime
    rental_id: int | None = Field(examples=[None], description="The rental it made, once filled.")


class ConnectionOut(Schema):
    host: str = Field(examples=["gpu1.example.com"])
    port: int = Field(examples=[41003], description="The rental's own SSH port (the server's for a server "
                      "whose agent gives rentals no sshd of their own).")
    username: str = Field(examples=["evx-42"])
    ssh_command: str = Field(examples=["ssh -p 41003 evx-42@gpu1.example.com"])
    known_hosts: str | None = Field(
        examples=["[gpu1.example.com]:41003 ssh-ed25519 "
                  "AAAAC3NzaC1lZDI1NTE5AAAAIHxnZ3pXq0m1XbVdyQwLzfZbCq8YtE0R3w1b7J2h9kQs"],
        description="The line to add to ~/.ssh/known_hosts, so that ssh checks it reaches this rental; null "
                    "when the server's agent reports no host key.")
    service_ports: dict[str, int] = Field(
        default_factory=dict, examples=[{"8888": 41005}],
        description="A container rental's other ports (its template's, Jupyter's 8888 say): the container's "
                    "port to the one to reach on the host; empty for other rentals.")


class RentalOut(Schema):
    id: int = Field(examples=[7])
    gpu_model: str = Field(examples=["h100-sxm"])
    gpus: int = Field(examples=[2])
    price: Money = Field(description="Per GPU-hour, locked when the bid matched.")
    hours: int | None = Field(examples=[None], description="Hours booked; null to run until stopped.")
    state: str = Field(examples=["running"], description="starting, running or ended.")
    started_at: UtcTime
    paid_through: UtcTime | None
    ended_at: UtcTime | None
    end_reason: str = Field(examples=[""])
    cost_so_far: Money | None = Field(description="What its hours have cost, in the wallet's currency.")
    isolation: str = Field(examples=["container"], description="The isolation level it was sold at.")
    template: str | None = Field(
        examples=["pytorch"], description="The container template its container runs; null for none."
    )
    connection: ConnectionOut | None = Field(description="Only while it runs.")
    service_token: Literal["none", "unshown", "shown"] = Field(
        examples=["unshown"],
        description="Its container's token (Jupyter's): none when its template takes none; unshown until "
                    "POST /rentals/{id}/service-token gives it, once; shown afterwards.")


class ServiceTokenOut(Schema):
    token: str = Field(examples=["kM3r9QeX0b7TzY2wVn5LcA8dHs1uPjFo"],
                       description="The token, given this once: store it where you keep passwords.")
    variable: str = Field(examples=["JUPYTER_TOKEN"],
                          description="The environment variable its container reads it from.")
    path: str = Field(examples=[SERVICE_TOKEN_PATH],
                      description="The file that holds it in the container, to read over SSH.")
    shown_at: UtcTime


class OrderPlacedOut(Schema):
    bid: BidOut
    rental: RentalOut | None = Field(description="The rental, when the bid matched at once.")


def _rental_id(bid) -> int | None:
    try:
        return bid.rental.pk
    except ObjectDoesNotExist:
        return None


def _bid_out(bid) -> dict:
    return {
        "id": bid.pk, "gpu_model": bid.gpu_model.slug, "gpus": bid.gpus, "max_price": usd(bid.max_price_usd),
        "hours": bid.hours, "region": bid.region, "time_in_force": bid.time_in_force,
        "expires_at": bid.expires_at, "min_reliability": share(bid.min_reliability),
        "isolation": list(levels_of_text(bid.isolation_levels)), "state": bid.state,
        "template": bid.container_template.slug if bid.container_template else None,
        "cancel_reason": bid.cancel_reason,
        "created_at": bid.created_at, "rental_id": _rental_id(bid),
    }


def _rentals_out(rentals) -> list[dict]:
    """Rentals with their cost so far (one query for all) and, while running, how to connect."""
    costs = rental_costs(rental_ids=[rental.pk for rental in rentals])
    shaped = []
    for rental in rentals:
        cost = costs.get(rental.pk)
        connection = None
        if rental.state == RentalState.RUNNING:
            server, port = rental.server, selectors.rental_ssh_port(rental)
            connection = {
                "host": server.host, "port": port, "username": rental.username,
                "ssh_command": ssh_connect_command(host=server.host, port=port, username=rental.username),
                "known_hosts": ssh_known_hosts_line(
                    host=server.host, port=port, host_key=rental.server_host_key
                ) if rental.server_host_key else None,
                "service_ports": {inside: int(outside)
                                  for inside, outside in selectors.rental_service_ports(rental)},
            }
        shaped.append({
            "id": rental.pk, "gpu_model": rental.gpu_model.slug, "gpus": rental.gpus,
            "price": usd(rental.price_usd), "hours": rental.hours, "state": rental.state,
            "started_at": rental.started_at, "paid_through": rental.paid_through, "ended_at": rental.ended_at,
            "end_reason": rental.end_reason, "cost_so_far": money(*cost) if cost else None,
            "isolation": rental.isolation_level,
            "template": rental.container_template.slug if rental.container_template else None,
            "connection": connection, "service_token": _service_token_state(rental),
        })
    return shaped


def _service_token_state(rental) -> str:
    if not selectors.rental_takes_service_token(rental):
        return "none"
    return "shown" if rental.service_token_shown_at else "unshown"


def _form_token(request) -> uuid.UUID:
    """One bid per Idempotency-Key of a token: the key names the order as a form's token does."""
    key = request.headers.get("Idempotency-Key")
    if not key:
        return uuid.uuid4()
    return uuid.uuid5(IDEMPOTENT_BIDS, f"{token_of(request).pk}:{key}")


def _ssh_key_text(request, payload: BidIn) -> str:
    """The key the order sends: the one pasted, or the text of the buyer's saved key it names."""
    if payload.ssh_key_id is None:
        return payload.ssh_public_key or ""
    if payload.ssh_public_key:
        raise ApiProblem(
            422, "ssh_key_twice", _("Send either an SSH public key or a saved key's id, not both.")
        )
    saved = selectors.ssh_key_get_for_buyer(buyer=token_of(request).user, key_id=payload.ssh_key_id)
    if saved is None:
        raise ApiProblem(422, "ssh_key_not_found", _("We could not find this SSH key."))
    return saved.public_key


@router.post(
    "/bids", response={201: OrderPlacedOut, **problems(400, 401, 403, 422, 429)}, auth=TRADE, tags=["orders"],
    operation_id="bid_place",
    summary="Place an order: buy now at the best offer up to max_price, or bid and rest in the book",
)
def bid_place(request, payload: BidIn):
    gpu = _gpu_for_order(payload.gpu_model)
    ssh_public_key = _ssh_key_text(request, payload)
    placed = order_place(
        buyer=token_of(request).user, gpu_model_id=gpu.pk, gpus=payload.gpus,
        max_price_usd=Decimal(payload.max_price), region=payload.region, hours=payload.hours,
        time_in_force=payload.time_in_force, expires_at=payload.expires_at,
        ssh_public_key=ssh_public_key, form_token=_form_token(request),
        min_reliability=min_reliability_parse(payload.min_reliability),
        isolation_levels=isolation_levels_parse(payload.isolation),
        container_template=container_template_choose(payload.template),
    )
    bid = selectors.bid_get_for_buyer(buyer=token_of(request).user, bid_id=placed.bid.pk)
    rental = _rentals_out([placed.rental])[0] if placed.rental else None
    return Status(201, {"bid": _bid_out(bid), "rental": rental})


@router.get(
    "/bids", response={200: Page[BidOut], **problems(400, 401, 403, 422, 429)}, auth=READ, tags=["orders"],
    operation_id="bids_list", summary="Your bids, newest first",
)
def bids_list(
    request, state: Literal["open", "filled", "cancelled", "expired"] | None = None,
    cursor: str | None = None, limit: int | None = None,
):
    bids, next_cursor = page_of(
        selectors.bids_for_buyer(buyer=token_of(request).user, state=state), cursor=cursor, limit=limit
    )
    return {"items": [_bid_out(bid) for bid in bids], "next_cursor": next_cursor}


def _bid_or_404(request, bid_id: int):
    bid = selectors.bid_get_for_buyer(buyer=token_of(request).user, bid_id=bid_id)
    if bid is None:
        raise ApiProblem(404, "bid_not_found", _("We could not find this order."))
    return bid


@router.get(
    "/bids/{bid_id}", response={200: BidOut, **problems(401, 403, 404, 422, 429)}, auth=READ, tags=["orders"],
    operation_id="bid_get", summary="One of your bids",
)
def bid_get(request, bid_id: int):
    return _bid_out(_bid_or_404(request, bid_id))


@router.post(
    "/bids/{bid_id}/cancel", response={200: BidOut, **problems(401, 403, 404, 409, 422, 429)}, auth=TRADE,
    tags=["orders"], operation_id="bid_cancel", summary="Cancel one of your open bids",
)
def bid_cancel_op(request, bid_id: int):
    bid_cancel(buyer=token_of(request).user, bid_id=bid_id)
    return _bid_out(_bid_or_404(request, bid_id))


@router.get(
    "/rentals", response={200: Page[RentalOut], **problems(400, 401, 403, 422, 429)},
    auth=READ, tags=["rentals"],
    operation_id="rentals_list", summary="Your rentals, newest first: live (starting or running) or ended",
)
def rentals_list(
    request, state: Literal["live", "ended"] | None = None, cursor: str | None = None,
    limit: int | None = None,
):
    live = None if state is None else state == "live"
    rentals, next_cursor = page_of(
        selectors.rentals_for_buyer(buyer=token_of(request).user, live=live), cursor=cursor, limit=limit
    )
    return {"items": _rentals_out(rentals), "next_cursor": next_cursor}


def _rental_or_404(request, rental_id: int):
    rental = selectors.rental_get_for_buyer(buyer=token_of(request).user, rental_id=rental_id)
    if rental is None:
        raise ApiProblem(404, "rental_not_found", _("We could not find this rental."))
    return rental


@router.get(
    "/rentals/{rental_id}", response={200: RentalOut, **problems(401, 403, 404, 422, 429)},
    auth=READ, tags=["rentals"],
    operation_id="rental_get",
    summary="One of your rentals, with how to connect while it runs and its cost so far",
)
def rental_get(request, rental_id: int):
    return _rentals_out([_rental_or_404(request, rental_id)])[0]


@router.post(
    "/rentals/{rental_id}/stop", response={200: RentalOut, **problems(401, 403, 404, 422, 429)},
    auth=TRADE, tags=["rentals"],
    operation_id="rental_stop",
    summary="Stop one of your rentals now: its GPUs are released, the hour already paid is not refunded",
)
def rental_stop_op(request, rental_id: int):
    rental_stop(buyer=token_of(request).user, rental_id=rental_id)
    return _rentals_out([_rental_or_404(request, rental_id)])[0]


@router.post(
    "/rentals/{rental_id}/service-token",
    response={200: ServiceTokenOut, **problems(401, 403, 404, 409, 422, 429)}, auth=TRADE, tags=["rentals"],
    operation_id="rental_service_token",
    summary="Your container rental's token (Jupyter's), given once: 409 when it was given already or its "
            "template takes none",
)
def rental_service_token_op(request, rental_id: int, response: HttpResponse):
    rental = rental_service_token_reveal(buyer=token_of(request).user, rental_id=rental_id)
    response["Cache-Control"] = "no-store"  # a secret: no cache, shared or the client's, keeps it
    return {"token": rental.service_token, "variable": rental.container_template.token_env,
            "path": SERVICE_TOKEN_PATH, "shown_at": rental.service_token_shown_at}
