"""Who reaches the seller's operations of the API: a `sell` token acts for its own seller only
(another seller's servers, offers and rentals answer 404, exactly as the portal's pages do), a
token without the scope answers 403, no usable token 401, and a `sell` token whose user left the
seller or lost two-factor authentication 403 `seller_access_lost`. A refusal changes nothing."""

import pytest
from allauth.mfa.models import Authenticator

from accounts.services import api_token_create, api_token_revoke
from exchange.models import Offer
from sellers.models import SellerMembership, Server
from tests.factories import OfferFactory, RentalFactory, SellerFactory, ServerFactory
from tests.sellers.support import Api, member, sell_token

pytestmark = pytest.mark.django_db

READS = ["/seller", "/seller/servers", "/seller/offers", "/seller/rentals", "/seller/earnings",
         "/seller/payouts"]


@pytest.fixture
def world():
    """Seller A (with a token) and seller B, each with a server, an offer and a rental."""
    a, b = SellerFactory(name="Alpha GPU Lda"), SellerFactory(name="Beta GPU SA")
    a_offer = OfferFactory(server=ServerFactory(seller=a, name="a-one"))
    b_offer = OfferFactory(server=ServerFactory(seller=b, name="b-one"))
    RentalFactory(offer=a_offer)
    b_rental = RentalFactory(offer=b_offer)
    return {"a": a, "b": b, "a_offer": a_offer, "b_offer": b_offer, "b_server": b_offer.server,
            "b_rental": b_rental}


def offers_state():
    return list(Offer.objects.order_by("pk").values_list("pk", "gpus_offered", "price_usd", "state"))


def every_operation(server_id: int, offer_id: int) -> list[tuple[str, str, dict | None]]:
    return [
        *[("get", path, None) for path in READS],
        ("get", f"/seller/servers/{server_id}", None),
        ("get", f"/seller/offers/{offer_id}", None),
        ("post", "/seller/servers", {"gpu_model": "x", "name": "n", "gpu_count": 1, "region": "europe",
                                     "host": "n.example.com"}),
        ("post", "/seller/offers", {"server_id": server_id, "gpus": 1, "price": "2.00"}),
        ("patch", f"/seller/offers/{offer_id}", {"price": "1.00"}),
        ("post", f"/seller/offers/{offer_id}/withdraw", None),
    ]


def call(api: Api, method: str, path: str, body):
    return api.get(path) if method == "get" else api.send(method, path, body)


def test_seller_a_finds_nothing_of_seller_b(client, world):
    api = Api(client, sell_token(world["a"]))
    b_server, b_offer = world["b_server"], world["b_offer"]
    before = offers_state()
    refused = [
        ("get", f"/seller/servers/{b_server.pk}", None),
        ("get", f"/seller/offers/{b_offer.pk}", None),
        ("post", "/seller/offers", {"server_id": b_server.pk, "gpus": 1, "price": "1.00"}),
        ("patch", f"/seller/offers/{b_offer.pk}", {"gpus": 1, "price": "1.00"}),
        ("post", f"/seller/offers/{b_offer.pk}/withdraw", None),
    ]
    for method, path, body in refused:
        response = call(api, method, path, body)
        assert response.status_code == 404, path
        assert response["Content-Type"].startswith("application/problem+json")
        assert response.json()["code"] in ("server_not_found", "offer_not_found")
    assert offers_state() == before

    servers = [item["id"] for item in api.get("/seller/servers").json()["items"]]
    offers = [item["id"] for item in api.get("/seller/offers").json()["items"]]
    rentals = [item["id"] for item in api.get("/seller/rentals").json()["items"]]
    assert servers == [world["a_offer"].server_id]
    assert offers == [world["a_offer"].pk]
    assert world["b_rental"].pk not in rentals and len(rentals) == 1
    assert api.get("/seller").json()["name"] == "Alpha GPU Lda"


@pytest.mark.parametrize("scopes", [["read"], ["trade"], ["read", "trade"]])
def test_a_token_without_the_sell_scope_is_refused(client, world, scopes):
    user = member(world["a"])  # a member of the seller, yet the token does not name the scope
    _token, secret = api_token_create(user=user, name="buyer", scopes=scopes)
    api = Api(client, secret)
    before = (offers_state(), Server.objects.count())
    for method, path, body in every_operation(world["a_offer"].server_id, world["a_offer"].pk):
        response = call(api, method, path, body)
        assert (response.status_code, response.json()["code"]) == (403, "scope_missing"), path
    assert (offers_state(), Server.objects.count()) == before


@pytest.mark.parametrize("secret", [None, "", "evx_" + "x" * 40, "not-a-token"])
def test_no_usable_token_answers_401(client, world, secret):
    api = Api(client, None)
    if secret is not None:
        api.headers = {"Authorization": f"Bearer {secret}"}
    for method, path, body in every_operation(world["a_offer"].server_id, world["a_offer"].pk):
        response = call(api, method, path, body)
        assert response.status_code == 401, path
        assert response.json()["code"] == "token_invalid"
        assert response["WWW-Authenticate"] == "Bearer"


def test_a_revoked_token_answers_401(client, world):
    user = member(world["a"])
    secret = sell_token(world["a"], user=user)
    token = user.api_tokens.get()
    api_token_revoke(user=user, token_id=token.pk)
    assert Api(client, secret).get("/seller").status_code == 401


def _assert_access_lost(api: Api, world) -> None:
    before = (offers_state(), Server.objects.count())
    for method, path, body in every_operation(world["a_offer"].server_id, world["a_offer"].pk):
        response = call(api, method, path, body)
        assert (response.status_code, response.json()["code"]) == (403, "seller_access_lost"), path
    assert (offers_state(), Server.objects.count()) == before


def test_a_sell_token_stops_when_its_user_leaves_the_seller(client, world):
    user = member(world["a"])
    api = Api(client, sell_token(world["a"], user=user))
    assert api.get("/seller").status_code == 200
    SellerMembership.objects.filter(user=user).delete()
    _assert_access_lost(api, world)


def test_a_sell_token_stops_when_its_user_turns_two_factor_off(client, world):
    user = member(world["a"])
    api = Api(client, sell_token(world["a"], user=user))
    assert api.get("/seller").status_code == 200
    Authenticator.objects.filter(user=user).delete()
    _assert_access_lost(api, world)


def test_a_sell_token_acts_for_its_seller_not_for_a_later_one(client, world):
    """Moving to another seller does not carry a token over: it named the seller it was made for."""
    user = member(world["a"])
    api = Api(client, sell_token(world["a"], user=user))
    SellerMembership.objects.filter(user=user).delete()
    SellerMembership.objects.create(seller=world["b"], user=user)
    assert api.get(f"/seller/servers/{world['b_server'].pk}").json()["code"] == "seller_access_lost"


def test_another_users_token_is_theirs_only(client, world):
    """Two members of one seller: each token acts for the seller, whoever made it."""
    first, second = member(world["a"]), member(world["a"])
    for user in (first, second):
        response = Api(client, sell_token(world["a"], user=user)).get("/seller/offers")
        assert [item["id"] for item in response.json()["items"]] == [world["a_offer"].pk]
