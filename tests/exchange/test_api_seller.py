"""A seller's offers and rentals in the API: the portal's services and selectors answer, so an offer
posted through the API stands in the portal with the same place in the book, the exchange's price
rules refuse the same prices with the same messages, and hostile values change nothing."""

from decimal import Decimal

import pytest
from allauth.mfa.models import Authenticator
from django.utils import translation
from django.utils.html import escape

from billing.services import rental_charge_next_hour
from exchange.models import BidState, Offer, OfferState, Rental
from exchange.selectors import buyer_alias, offer_book_place
from exchange.services import price_message, seller_suspend, server_retire
from sellers.models import MemberRole, SellerMembership, Server, ServerStatus
from tests.billing.support import START, buyer_with
from tests.factories import (
    BidFactory,
    GpuModelFactory,
    OfferFactory,
    RentalFactory,
    SellerFactory,
    ServerFactory,
    UserFactory,
    operator_make,
)
from tests.sellers.support import Api, sell_token, url

pytestmark = pytest.mark.django_db

D = Decimal


@pytest.fixture
def seller():
    return SellerFactory(name="Alpha GPU Lda")


@pytest.fixture
def owner(seller):
    user = UserFactory()
    SellerMembership.objects.create(seller=seller, user=user, role=MemberRole.OWNER)
    Authenticator.objects.create(user=user, type=Authenticator.Type.TOTP, data={"secret": "x"})
    return user


@pytest.fixture
def api(client, seller, owner):
    return Api(client, sell_token(seller, user=owner))


@pytest.fixture
def gpu():
    return GpuModelFactory(slug="h100-sxm")


@pytest.fixture
def server(seller, gpu):
    return ServerFactory(seller=seller, gpu_model=gpu, name="lis-01", gpu_count=8)


@pytest.fixture
def rival(gpu):
    """Another seller's cheaper offer of the same GPU model."""
    return OfferFactory(server=ServerFactory(gpu_model=gpu, gpu_count=8), gpus_offered=3, price_usd=D("1.50"))


def offers_state():
    return list(
        Offer.objects.order_by("pk").values_list("pk", "server_id", "gpus_offered", "price_usd", "state")
    )


def place_of(body) -> dict:
    return body["book_place"]


# --- posting, changing, withdrawing ----------------------------------------------------------------


def test_an_offer_posted_through_the_api_stands_in_the_portal(client, api, seller, owner, server, rival):
    response = api.post("/seller/offers", {"server_id": server.pk, "gpus": 4, "price": "2.10"})
    assert response.status_code == 201
    body = response.json()
    offer = Offer.objects.get(server=server)
    assert body == {
        "id": offer.pk, "server_id": server.pk, "gpu_model": "h100-sxm", "gpus_offered": 4,
        "price": {"amount": "2.10", "currency": "USD"}, "state": "active",
        "created_at": offer.created_at.isoformat().replace("+00:00", "Z"),
        "book_place": {"best_ask": {"amount": "1.50", "currency": "USD"}, "gpus_cheaper": 3,
                       "sells_now": False},
    }
    place = offer_book_place(seller_id=seller.pk, offer_id=offer.pk)
    assert (place.best_ask, place.gpus_cheaper, place.sells_now) == (D("1.50"), 3, False)
    client.force_login(owner)
    page = client.get(url("sellers:portal-server", server_id=server.pk)).content.decode()
    assert "You offer 4 GPUs at $2.10 per GPU-hour." in page
    assert "3 GPUs are offered cheaper than yours." in page
    assert "The best ask of this GPU model is $1.50 per GPU-hour." in page
    assert api.get(f"/seller/offers/{offer.pk}").json() == body


def test_an_offer_posted_in_the_portal_reads_the_same_in_the_api(client, api, owner, server, rival):
    client.force_login(owner)
    client.post(url("sellers:portal-offer-post", server_id=server.pk), {"gpus": 2, "price_usd": "1.20"})
    BidFactory(gpu_model=server.gpu_model, max_price_usd=D("1.30"), state=BidState.OPEN, time_in_force="bid")
    item = api.get("/seller/offers").json()["items"][0]
    assert (item["gpus_offered"], item["price"]["amount"]) == (2, "1.20")
    assert place_of(item) == {"best_ask": {"amount": "1.20", "currency": "USD"}, "gpus_cheaper": 0,
                              "sells_now": True}


def test_change_and_withdraw_an_offer(api, server):
    offer = OfferFactory(server=server, gpus_offered=4, price_usd=D("2.00"))
    response = api.patch(f"/seller/offers/{offer.pk}", {"price": "1.99"})
    assert response.status_code == 200
    assert (response.json()["gpus_offered"], response.json()["price"]["amount"]) == (4, "1.99")
    assert api.patch(f"/seller/offers/{offer.pk}", {"gpus": 6}).json()["gpus_offered"] == 6
    assert api.patch(f"/seller/offers/{offer.pk}", {}).json()["price"]["amount"] == "1.99"
    offer.refresh_from_db()
    assert (offer.gpus_offered, offer.price_usd) == (6, D("1.99"))

    response = api.post(f"/seller/offers/{offer.pk}/withdraw")
    assert (response.status_code, response.json()["state"], response.json()["book_place"]) == (
        200, "withdrawn", None
    )
    assert api.post(f"/seller/offers/{offer.pk}/withdraw").json()["state"] == "withdrawn"  # again: no change
    response = api.patch(f"/seller/offers/{offer.pk}", {"price": "1.00"})
    assert (response.status_code, response.json()["code"]) == (422, "offer_not_active")
    offer.refresh_from_db()
    assert (offer.state, offer.price_usd) == (OfferState.WITHDRAWN, D("1.99"))


def test_one_active_offer_per_server(api, server):
    OfferFactory(server=server)
    before = offers_state()
    response = api.post("/seller/offers", {"server_id": server.pk, "gpus": 1, "price": "2.00"})
    assert (response.status_code, response.json()["code"]) == (422, "offer_exists")
    assert offers_state() == before


def test_a_crossing_offer_trades_at_the_bids_price(api, server, open_market, balances):
    BidFactory(gpu_model=server.gpu_model, max_price_usd=D("2.40"), state=BidState.OPEN, time_in_force="bid",
               gpus=2)
    response = api.post("/seller/offers", {"server_id": server.pk, "gpus": 4, "price": "2.00"})
    assert response.status_code == 201
    rental = Rental.objects.get(server=server)
    assert (rental.gpus, rental.price_usd) == (2, D("2.40"))


def test_a_suspended_seller_posts_and_changes_nothing(api, seller, server):
    offer = OfferFactory(server=ServerFactory(seller=seller, gpu_model=server.gpu_model, name="lis-02"))
    seller_suspend(seller_id=seller.pk, operator=operator_make(), reason="Unpaid fees")
    before = offers_state()
    response = api.post("/seller/offers", {"server_id": server.pk, "gpus": 1, "price": "2.00"})
    assert (response.status_code, response.json()["code"]) == (422, "seller_suspended")
    response = api.patch(f"/seller/offers/{offer.pk}", {"price": "1.00"})
    assert response.json()["code"] in ("offer_not_active", "seller_suspended")
    assert offers_state() == before


def test_a_retired_server_offers_nothing_in_the_api_or_the_portal(client, api, owner, server):
    server_retire(seller_id=server.seller_id, server_id=server.pk)
    response = api.post("/seller/offers", {"server_id": server.pk, "gpus": 1, "price": "2.00"})
    assert (response.status_code, response.json()["code"]) == (422, "server_retired")
    assert response.json()["detail"] == "This server is retired: it can no longer offer GPUs."
    client.force_login(owner)
    page = client.post(url("sellers:portal-offer-post", server_id=server.pk),
                       {"gpus": 1, "price_usd": "2.00"})
    assert page.status_code == 400
    assert escape("This server is retired: it can no longer offer GPUs.") in page.content.decode()
    assert not Offer.objects.exists()


def test_a_pending_server_may_offer_as_in_the_portal(api, server):
    server.status = ServerStatus.PENDING
    server.save()
    response = api.post("/seller/offers", {"server_id": server.pk, "gpus": 1, "price": "2.00"})
    assert response.status_code == 201
    assert response.json()["book_place"]["best_ask"] is None  # buyers see it once the server is active


# --- the exchange's rules, and hostile values -------------------------------------------------------


@pytest.mark.parametrize("price, problem", [
    ("2.999", "price_off_tick"), ("2.005", "price_off_tick"), ("0", "price_out_of_range"),
    ("0.00", "price_out_of_range"), ("100.01", "price_out_of_range"), ("99999999", "price_out_of_range"),
])
@pytest.mark.parametrize("language", ["en", "pt", "fr"])
def test_prices_the_exchange_refuses_with_its_messages(client, api, server, price, problem, language):
    offer = OfferFactory(server=ServerFactory(seller=server.seller, gpu_model=server.gpu_model, name="x"))
    before = offers_state()
    headers = {**api.headers, "Accept-Language": language}
    for method, path, body in [
        ("post", "/seller/offers", {"server_id": server.pk, "gpus": 2, "price": price}),
        ("patch", f"/seller/offers/{offer.pk}", {"price": price}),
    ]:
        response = getattr(client, method)(f"/api/v1{path}", data=body, content_type="application/json",
                                           headers=headers)
        assert (response.status_code, response.json()["code"]) == (422, problem)
        with translation.override(language):
            assert response.json()["detail"] == str(price_message(problem))
    assert offers_state() == before


def test_more_gpus_than_the_server_has_is_refused(api, server):
    response = api.post("/seller/offers", {"server_id": server.pk, "gpus": 9, "price": "2.00"})
    assert (response.status_code, response.json()["code"]) == (422, "gpus_out_of_range")
    assert response.json()["detail"] == "A server with 8 GPUs can offer from 1 to 8 of them."
    assert not Offer.objects.exists()


def test_a_whole_server_offers_all_its_gpus_or_nothing(api, server):
    Server.objects.filter(pk=server.pk).update(isolation_level="whole")

    response = api.post("/seller/offers", {"server_id": server.pk, "gpus": 4, "price": "2.00"})

    assert (response.status_code, response.json()["code"]) == (422, "whole_server_all_gpus")
    assert response.json()["detail"] == (
        "This server is sold as a whole server, one rental at a time: offer all its 8 GPUs."
    )
    assert not Offer.objects.exists()
    offer_id = api.post("/seller/offers", {"server_id": server.pk, "gpus": 8, "price": "2.00"}).json()["id"]
    response = api.patch(f"/seller/offers/{offer_id}", {"gpus": 2})
    assert (response.status_code, response.json()["code"]) == (422, "whole_server_all_gpus")
    assert offers_state() == [(offer_id, server.pk, 8, D("2.00"), OfferState.ACTIVE)]


HOSTILE_OFFERS = [
    {"price": "NaN"}, {"price": "nan"}, {"price": "Infinity"}, {"price": "1e999"}, {"price": "1E2"},
    {"price": "-1"}, {"price": "-0.01"}, {"price": "+2.00"}, {"price": "2,50"}, {"price": "1 000"},
    {"price": "２.００"}, {"price": ""}, {"price": " 2.00"}, {"price": "0x10"}, {"price": "1" * 30},
    {"price": 2.5}, {"price": 2}, {"price": None}, {"price": True}, {"price": ["2.00"]},
    {"gpus": 0}, {"gpus": 10000}, {"gpus": "x"}, {"gpus": "2"}, {"gpus": True}, {"gpus": 2.0},
    {"gpus": -1}, {"gpus": None}, {"gpus": 2**80}, {"server_id": "1"}, {"server_id": 0},
    {"server_id": 2**70}, {"server_id": None}, {"state": "active"}, {"price_usd": "2.00"},
    {"gpus_offered": 2},
]


@pytest.mark.parametrize("overrides", HOSTILE_OFFERS)
def test_hostile_offers_are_refused_and_move_nothing(api, server, overrides):
    offer = OfferFactory(server=ServerFactory(seller=server.seller, gpu_model=server.gpu_model, name="x"))
    before = offers_state()
    body = {"server_id": server.pk, "gpus": 2, "price": "2.00"} | overrides
    response = api.post("/seller/offers", body)
    assert 400 <= response.status_code < 500, response.content
    assert response["Content-Type"].startswith("application/problem+json")
    change = {key: value for key, value in overrides.items() if key != "server_id"} or {"server_id": 1}
    response = api.patch(f"/seller/offers/{offer.pk}", change)
    assert 400 <= response.status_code < 500, response.content
    assert offers_state() == before
    response = api.get(f"/seller/offers/{offer.pk}")  # an answer after a refusal is plain JSON again
    assert (response.status_code, response["Content-Type"]) == (200, "application/json; charset=utf-8")


@pytest.mark.parametrize("raw", ['{"server_id": 1, "gpus": 2, "price": NaN}', '{"gpus": Infinity}',
                                 "[1, 2]", "2.00", "{", "null"])
def test_bodies_that_are_no_offer_are_refused(api, server, raw):
    offer = OfferFactory(server=server)
    before = offers_state()
    assert 400 <= api.post("/seller/offers", raw=raw).status_code < 500
    assert 400 <= api.patch(f"/seller/offers/{offer.pk}", raw=raw).status_code < 500
    assert offers_state() == before


@pytest.mark.parametrize("path", ["/seller/offers/0", "/seller/offers/-1", "/seller/offers/x",
                                  "/seller/offers/99999999999999999999999", "/seller/offers/1.5"])
def test_odd_offer_ids_answer_4xx(api, path):
    assert 400 <= api.get(path).status_code < 500
    assert 400 <= api.post(f"{path}/withdraw").status_code < 500


# --- rentals ---------------------------------------------------------------------------------------


def test_rentals_show_anonymous_buyers_and_what_each_earned(client, api, seller, owner, server):
    buyer = buyer_with("USD", "10.00")
    paid = RentalFactory(offer=OfferFactory(server=server, price_usd=D("2.50")), buyer=buyer,
                         started_at=START, gpus=2)
    rental_charge_next_hour(rental_id=paid.pk, now=START)  # 2 GPUs at $2.50, less the 10 % fee
    waiting = RentalFactory(offer=OfferFactory(server=ServerFactory(seller=seller, name="lis-new")))
    RentalFactory()  # another seller's
    items = api.get("/seller/rentals").json()["items"]
    assert [item["id"] for item in items] == [waiting.pk, paid.pk]
    item = items[1]
    assert item == {
        "id": paid.pk, "buyer": buyer_alias(buyer_id=buyer.pk, seller_id=seller.pk), "server_id": server.pk,
        "gpu_model": "h100-sxm", "gpus": 2, "price": {"amount": "2.50", "currency": "USD"}, "hours": None,
        "state": Rental.objects.get(pk=paid.pk).state,
        "started_at": "2026-12-01T10:00:00Z", "ended_at": None, "end_reason": None,
        "revenue": {"amount": "4.50", "currency": "USD"},
    }
    assert items[0]["revenue"] is None
    assert buyer.email not in str(items)
    client.force_login(owner)
    page = client.get(url("sellers:portal-rentals")).content.decode()
    assert f"Buyer #{item['buyer']}" in page and "$4.50" in page


def test_the_lists_run_a_fixed_number_of_queries(api, seller, server, gpu, django_assert_max_num_queries):
    def grow(n):
        for i in range(n):
            other = ServerFactory(seller=seller, gpu_model=GpuModelFactory())
            offer = OfferFactory(server=other, price_usd=D("1.00") + i)
            OfferFactory(server=other, state=OfferState.WITHDRAWN)
            RentalFactory(offer=offer)

    grow(1)
    for path in ("/seller/offers", "/seller/rentals"):
        with django_assert_max_num_queries(10) as small:
            assert api.get(path).status_code == 200
        grow(12)
        with django_assert_max_num_queries(len(small.captured_queries)):
            assert len(api.get(path).json()["items"]) > 12
