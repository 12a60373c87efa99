"""The seller's operations of the API on the exchange: its offers (asks) with their place in the
book, and the rentals on its servers with anonymous buyers (docs/api.md, "Seller"). Entry points
only: the same selectors and services as the seller portal's pages, with the same checks."""

from decimal import Decimal

from django.utils.translation import gettext_lazy as _
from ninja import Field, Router, Schema, Status
from pydantic import ConfigDict

from billing.selectors import seller_revenue_by_rental
from marketplace.api_support import (
    SELL,
    TOKEN_ERRORS,
    ApiProblem,
    DecimalText,
    InputSchema,
    Money,
    ObjectId,
    Page,
    PageCursor,
    PageLimit,
    Problem,
    UtcTime,
    page_of,
    token_of,
    usd,
    whole_number,
)
from sellers.models import Server
from sellers.selectors import server_get_for_seller

from .models import Offer, OfferState, Rental
from .selectors import (
    BookPlace,
    buyer_alias,
    offer_book_places,
    offer_get_for_seller,
    offers_for_seller,
    rentals_on_seller_servers,
)
from .services import offer_post, offer_update, offer_withdraw

router = Router(tags=["seller"], auth=SELL)

GPUS = whole_number(low=1, high=Server.MAX_GPUS, example=4)


class BookPlaceOut(Schema):
    best_ask: Money | None = Field(description="The best ask of the GPU model now; null when none sells.")
    gpus_cheaper: int = Field(examples=[3], description="GPUs offered below this offer's price now.")
    sells_now: bool = Field(examples=[False], description="A resting bid is at or above this price.")


class OfferOut(Schema):
    id: int = Field(examples=[41])
    server_id: int = Field(examples=[12])
    gpu_model: str = Field(examples=["h100-sxm"])
    gpus_offered: int = Field(examples=[4])
    price: Money = Field(description="Per GPU-hour, in US dollars.")
    state: str = Field(examples=["active"], json_schema_extra={"enum": OfferState.values})
    created_at: UtcTime
    book_place: BookPlaceOut | None = Field(description="Where the offer stands; null once withdrawn.")


class OfferIn(InputSchema):
    model_config = ConfigDict(json_schema_extra={"examples": [{"server_id": 12, "gpus": 4, "price": "2.49"}]})

    server_id: int = Field(strict=True, ge=1, le=2**63 - 1, examples=[12])
    gpus: GPUS = Field(description="From 1 to the server's GPU count.")
    price: DecimalText = Field(
        description="US dollars per GPU-hour: above zero, at most 100.00, in steps of 0.01."
    )


class OfferChange(InputSchema):
    """Leave a field out to keep it as it is (null is refused)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"price": "2.39"}, {"gpus": 6, "price": "2.45"}]}
    )

    gpus: GPUS = Field(None, description="From 1 to the server's GPU count.")
    price: DecimalText = Field(None, description="US dollars per GPU-hour, as when posting.")


class SellerRentalOut(Schema):
    id: int = Field(examples=[301])
    buyer: str = Field(
        examples=["3F9A0C1B"], description="Anonymous and stable: another seller sees another id."
    )
    server_id: int = Field(examples=[12])
    gpu_model: str = Field(examples=["h100-sxm"])
    gpus: int = Field(examples=[2])
    price: Money = Field(description="Per GPU-hour, locked when the bid matched.")
    hours: int | None = Field(examples=[24], description="Hours booked; null when it runs until stopped.")
    state: str = Field(examples=["running"], json_schema_extra={"enum": ["starting", "running", "ended"]})
    started_at: UtcTime
    ended_at: UtcTime | None
    end_reason: str | None = Field(examples=[None])
    revenue: Money | None = Field(
        description="What it has earned the seller so far, after the fee; null before its first charge."
    )


def _place_out(place: BookPlace | None) -> BookPlaceOut | None:
    if place is None:
        return None
    return BookPlaceOut(
        best_ask=usd(place.best_ask), gpus_cheaper=place.gpus_cheaper, sells_now=place.sells_now
    )


def _offers_out(offers: list[Offer], *, seller_id: int) -> list[OfferOut]:
    """The offers with their places in the book (active ones), in a fixed number of queries."""
    active = [offer.pk for offer in offers if offer.state == OfferState.ACTIVE]
    places = offer_book_places(seller_id=seller_id, offer_ids=active) if active else {}
    return [
        OfferOut(
            id=offer.pk, server_id=offer.server_id, gpu_model=offer.server.gpu_model.slug,
            gpus_offered=offer.gpus_offered, price=usd(offer.price_usd), state=offer.state,
            created_at=offer.created_at, book_place=_place_out(places.get(offer.pk)),
        )
        for offer in offers
    ]


def _offer_answer(*, seller_id: int, offer_id: int) -> OfferOut:
    offer = offers_for_seller(seller_id=seller_id).filter(pk=offer_id).first()
    if offer is None:
        raise ApiProblem(404, "offer_not_found", _("We could not find this offer."))
    return _offers_out([offer], seller_id=seller_id)[0]


def _offer_or_404(*, seller_id: int, offer_id: int) -> Offer:
    offer = offer_get_for_seller(seller_id=seller_id, offer_id=offer_id)
    if offer is None:
        raise ApiProblem(404, "offer_not_found", _("We could not find this offer."))
    return offer


def _price(text: str | None) -> Decimal | None:
    """The decimal string as a Decimal; its pattern (DecimalText) admits plain digits only, and the
    exchange's price rules (range, cent tick) judge the value."""
    return None if text is None else Decimal(text)


@router.get(
    "/seller/offers", response={200: Page[OfferOut], **TOKEN_ERRORS, frozenset({400, 422}): Problem},
    operation_id="seller_offers_list",
    summary="The seller's offers, newest first, with their place in the book",
)
def seller_offers_list(request, limit: PageLimit = None, cursor: PageCursor = None):
    """Active and withdrawn offers; an active one has its place in the book of its GPU model."""
    seller_id = token_of(request).seller_id
    offers, next_cursor = page_of(offers_for_seller(seller_id=seller_id), cursor=cursor, limit=limit)
    return {"items": _offers_out(offers, seller_id=seller_id), "next_cursor": next_cursor}


@router.get(
    "/seller/offers/{offer_id}", response={200: OfferOut, **TOKEN_ERRORS, frozenset({404, 422}): Problem},
    operation_id="seller_offer_get", summary="One of the seller's offers with its place in the book",
)
def seller_offer_get(request, offer_id: ObjectId):
    """Another seller's offer answers 404 `offer_not_found`, as an unknown one does."""
    return _offer_answer(seller_id=token_of(request).seller_id, offer_id=offer_id)


@router.post(
    "/seller/offers", response={201: OfferOut, **TOKEN_ERRORS, frozenset({404, 422}): Problem},
    operation_id="seller_offer_post",
    summary="Offer GPUs of one of the seller's servers at a price per GPU-hour (it may trade at once)",
)
def seller_offer_post(request, body: OfferIn):
    """The portal's offer: matched at once against resting bids, trading at their prices. Refused
    with 422: `price_out_of_range`, `price_off_tick`, `gpus_out_of_range`, `offer_exists`,
    `seller_suspended`, `server_retired`; another seller's server answers 404 `server_not_found`."""
    token = token_of(request)
    server = server_get_for_seller(seller=token.seller, server_id=body.server_id)
    if server is None:
        raise ApiProblem(404, "server_not_found", _("We could not find this server."))
    offer = offer_post(server=server, gpus=body.gpus, price_usd=_price(body.price))
    return Status(201, _offer_answer(seller_id=token.seller_id, offer_id=offer.pk))


@router.patch(
    "/seller/offers/{offer_id}", response={200: OfferOut, **TOKEN_ERRORS, frozenset({404, 422}): Problem},
    operation_id="seller_offer_update",
    summary="Change an active offer's GPUs or price (running rentals keep their price)",
)
def seller_offer_update(request, offer_id: ObjectId, body: OfferChange):
    """Leave a field out to keep it. A bigger or cheaper offer is matched again; it keeps its
    place in time. Refused with 422 as when posting, and `offer_not_active` once withdrawn."""
    seller_id = token_of(request).seller_id
    offer = _offer_or_404(seller_id=seller_id, offer_id=offer_id)
    offer_update(offer_id=offer.pk, gpus=body.gpus, price_usd=_price(body.price))
    return _offer_answer(seller_id=seller_id, offer_id=offer.pk)


@router.post(
    "/seller/offers/{offer_id}/withdraw",
    response={200: OfferOut, **TOKEN_ERRORS, frozenset({404, 422}): Problem},
    operation_id="seller_offer_withdraw",
    summary="Take an offer out of the book (running rentals go on at their price)",
)
def seller_offer_withdraw(request, offer_id: ObjectId):
    """Withdrawing again changes nothing."""
    seller_id = token_of(request).seller_id
    offer = _offer_or_404(seller_id=seller_id, offer_id=offer_id)
    offer_withdraw(offer_id=offer.pk)
    return _offer_answer(seller_id=seller_id, offer_id=offer.pk)


def _rental_out(rental: Rental, *, seller_id: int, revenue: dict[int, Decimal]) -> SellerRentalOut:
    return SellerRentalOut(
        id=rental.pk, buyer=buyer_alias(buyer_id=rental.buyer_id, seller_id=seller_id),
        server_id=rental.server_id, gpu_model=rental.gpu_model.slug, gpus=rental.gpus,
        price=usd(rental.price_usd), hours=rental.hours, state=rental.state, started_at=rental.started_at,
        ended_at=rental.ended_at, end_reason=rental.end_reason or None,
        revenue=usd(revenue.get(rental.pk)),
    )


@router.get(
    "/seller/rentals", response={200: Page[SellerRentalOut], **TOKEN_ERRORS, frozenset({400, 422}): Problem},
    operation_id="seller_rentals_list",
    summary="Rentals on the seller's servers, newest first, with anonymous buyers and what each earned",
)
def seller_rentals_list(request, limit: PageLimit = None, cursor: PageCursor = None):
    """The buyer is an anonymous id, stable for this seller, another at another seller."""
    seller_id = token_of(request).seller_id
    rentals, next_cursor = page_of(rentals_on_seller_servers(seller_id=seller_id), cursor=cursor, limit=limit)
    revenue = seller_revenue_by_rental(rental_ids=[rental.pk for rental in rentals])
    return {
        "items": [_rental_out(rental, seller_id=seller_id, revenue=revenue) for rental in rentals],
        "next_cursor": next_cursor,
    }
