"""The buyer's operations of the API (issue 15): quote, bids and rentals, the same results as the
pages, another buyer's objects answering 404, scopes, and hostile input that moves nothing."""

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.urls import reverse

from billing.services import fx_rates_load
from exchange.models import Bid, Rental
from exchange.services import ssh_key_add
from marketplace import formatting
from tests.api_tokens import post_json, token_client
from tests.exchange.support import buyer_with, login_ready, orders_state, signed_in
from tests.factories import BidFactory, OfferFactory, RentalFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def rates():
    fx_rates_load(rates={"EUR": Decimal("0.92"), "GBP": Decimal("0.79")},
                  valid_from=datetime(2026, 1, 1, tzinfo=UTC), source="test")


@pytest.fixture
def buyer(demo_book, rates, open_market):
    return buyer_with()


def state() -> tuple:
    return orders_state()


def order(key, **overrides) -> dict:
    body = {"gpu_model": "h100-sxm", "gpus": 1, "max_price": "3.00", "time_in_force": "buy_now",
            "ssh_public_key": key}
    body.update(overrides)
    return body


# --- POST /quote -----------------------------------------------------------------------------------

def test_the_quote_is_the_trade_pages_preview(buyer):
    api = token_client(buyer, "read")
    quote = post_json(api, "/api/v1/quote", {"gpu_model": "h100-sxm", "gpus": 2, "hours": 3})
    assert quote.status_code == 200, quote.content
    data = quote.json()
    page = signed_in(buyer).post(
        "/en/trade/h100-sxm/preview/", {"gpus": "2", "max_price_usd": "9.00", "hours": "3", "region": ""}
    )
    preview = page.context["preview"]
    assert data["price"] == {"amount": f"{preview.price:.2f}", "currency": "USD"}
    assert data["total_usd"] == {"amount": f"{preview.total_usd:.2f}", "currency": "USD"}
    assert data["per_hour"] == {"amount": f"{preview.cost.per_hour}", "currency": "EUR"}
    assert data["total"] == {"amount": f"{preview.cost.total}", "currency": "EUR"}
    assert data["covers_first_hour"] is preview.cost.covers_first_hour is True
    assert data["per_hour_usd"]["amount"] == f"{preview.price * 2:.2f}"


def test_an_open_ended_quote_gives_the_hour_only(buyer):
    api = token_client(buyer, "read")
    data = post_json(api, "/api/v1/quote", {"gpu_model": "h100-sxm", "gpus": 1}).json()
    assert data["hours"] is None and data["total_usd"] is None and data["total"] is None
    assert data["per_hour"]["currency"] == "EUR"


def test_a_quote_nothing_can_fill_is_404_no_offer(buyer):
    response = post_json(token_client(buyer, "read"), "/api/v1/quote",
                         {"gpu_model": "h100-sxm", "gpus": 8, "region": "asia-pacific"})
    assert (response.status_code, response.json()["code"]) == (404, "no_offer")


def test_a_quote_needs_a_token_with_read(buyer):
    response = post_json(token_client(buyer, "trade"), "/api/v1/quote", {"gpu_model": "h100-sxm", "gpus": 1})
    assert (response.status_code, response.json()["code"]) == (403, "scope_missing")
    from django.test import Client

    response = post_json(Client(), "/api/v1/quote", {"gpu_model": "h100-sxm", "gpus": 1})
    assert (response.status_code, response.json()["code"]) == (401, "token_invalid")


# --- POST /bids ------------------------------------------------------------------------------------

def test_buy_now_through_the_api_runs_a_rental_that_the_pages_show(buyer, ed25519_public_key):
    api = token_client(buyer, "read", "trade")
    response = post_json(api, "/api/v1/bids", order(ed25519_public_key, gpus=2))
    assert response.status_code == 201, response.content
    data = response.json()
    bid = Bid.objects.get(buyer=buyer)
    assert data["bid"]["id"] == bid.pk and data["bid"]["state"] == "filled"
    rental = Rental.objects.get(bid=bid)
    assert data["rental"]["id"] == data["bid"]["rental_id"] == rental.pk
    # Paid, and starting until the server's agent reports the login ready: no connection yet.
    assert data["rental"]["state"] == "starting" and data["rental"]["price"]["amount"] == "2.88"
    assert data["rental"]["connection"] is None
    login_ready(rental)
    data = {"rental": api.get(f"/api/v1/rentals/{rental.pk}").json()}
    assert data["rental"]["state"] == "running"
    connection = data["rental"]["connection"]
    server = rental.server
    assert connection["ssh_command"] == f"ssh -p {server.ssh_port} {rental.username}@{server.host}"
    orders_page = signed_in(buyer).get(reverse("exchange:orders"))
    assert [shown.pk for shown in orders_page.context["bids"]] == [bid.pk]
    rental_page = signed_in(buyer).get(reverse("exchange:rental", kwargs={"pk": rental.pk}))
    cost = api.get(f"/api/v1/rentals/{rental.pk}").json()["cost_so_far"]
    shown = rental_page.context["rental"].cost_text
    assert formatting.money(Decimal(cost["amount"]), cost["currency"]) == shown


def test_a_bid_rests_in_the_book_and_cancels(buyer, ed25519_public_key):
    api = token_client(buyer, "read", "trade")
    response = post_json(api, "/api/v1/bids", order(
        ed25519_public_key, time_in_force="bid", max_price="1.00", hours=5, region="europe",
        expires_at="2099-01-01T00:00:00Z",
    ))
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["rental"] is None
    assert data["bid"] | {"id": None, "created_at": None} == {
        "id": None, "gpu_model": "h100-sxm", "gpus": 1, "max_price": {"amount": "1.00", "currency": "USD"},
        "hours": 5, "region": "europe", "time_in_force": "bid", "expires_at": "2099-01-01T00:00:00Z",
        # The demo book's default template: the bid accepts containers.
        "min_reliability": None, "isolation": ["container", "shared", "whole"], "template": "pytorch-cuda",
        "state": "open",
        "cancel_reason": "", "created_at": None, "rental_id": None,
    }
    bid_id = data["bid"]["id"]
    assert api.get(f"/api/v1/bids/{bid_id}").json() == data["bid"]
    cancelled = api.post(f"/api/v1/bids/{bid_id}/cancel")
    assert cancelled.status_code == 200
    assert (cancelled.json()["state"], cancelled.json()["cancel_reason"]) == ("cancelled", "buyer")
    again = api.post(f"/api/v1/bids/{bid_id}/cancel")
    assert (again.status_code, again.json()["code"]) == (409, "bid_not_open")


def test_a_buy_now_that_finds_nothing_comes_back_cancelled(buyer, ed25519_public_key):
    api = token_client(buyer, "trade")
    response = post_json(api, "/api/v1/bids", order(ed25519_public_key, max_price="0.50"))
    assert response.status_code == 201
    bid = response.json()["bid"]
    assert (bid["state"], bid["cancel_reason"]) == ("cancelled", "not_filled")
    assert response.json()["rental"] is None and not Rental.objects.exists()


def test_the_same_idempotency_key_places_one_bid(buyer, ed25519_public_key):
    api = token_client(buyer, "trade")
    first = post_json(api, "/api/v1/bids", order(ed25519_public_key), **{"Idempotency-Key": "k-1"})
    second = post_json(api, "/api/v1/bids", order(ed25519_public_key), **{"Idempotency-Key": "k-1"})
    assert first.json() == second.json() and Bid.objects.count() == 1
    other = post_json(api, "/api/v1/bids", order(ed25519_public_key), **{"Idempotency-Key": "k-2"})
    assert other.json()["bid"]["id"] != first.json()["bid"]["id"]
    # Another token's same key is another order.
    another = token_client(buyer, "trade")
    post_json(another, "/api/v1/bids", order(ed25519_public_key), **{"Idempotency-Key": "k-1"})
    assert Bid.objects.count() == 3


def test_refusals_of_the_exchange_are_problems_that_move_nothing(buyer, ed25519_public_key):
    api = token_client(buyer, "trade")
    before = state()
    cases = {
        "insufficient_balance": order(ed25519_public_key, gpus=8, max_price="50.00", time_in_force="bid"),
        "ssh_key_invalid": order("not a key"),
        "gpu_model_unknown": order(ed25519_public_key, gpu_model="nope"),
        "region_unknown": order(ed25519_public_key, region="mars"),
        "expiry_not_allowed": order(ed25519_public_key, expires_at="2099-01-01T00:00:00Z"),
        "expiry_in_past": order(ed25519_public_key, time_in_force="bid", expires_at="2000-01-01T00:00:00Z"),
        "template_invalid": order(ed25519_public_key, template="no-such-template"),
    }
    for code, body in cases.items():
        response = post_json(api, "/api/v1/bids", body)
        assert (response.status_code, response.json()["code"]) == (422, code), body
    assert state() == before


HOSTILE = [
    ("max_price", "NaN"), ("max_price", float("nan")), ("max_price", "1e999"), ("max_price", 2.5),
    ("max_price", "-1"), ("max_price", "2.999"), ("max_price", "0"), ("max_price", "99999999"),
    ("max_price", ""), ("max_price", None), ("max_price", "2,50"), ("max_price", " 2.50"),
    ("gpus", 3), ("gpus", -1), ("gpus", 0), ("gpus", "2"), ("gpus", True), ("gpus", 2.0), ("gpus", 10**30),
    ("gpus", None), ("hours", -1), ("hours", 0), ("hours", "5"), ("hours", 1.5), ("hours", 10**30),
    ("hours", False), ("time_in_force", "forever"), ("region", 5), ("region", "x" * 1000),
    ("expires_at", "yesterday"), ("expires_at", 1e999), ("ssh_public_key", 5), ("ssh_public_key", ["a"]),
    ("gpu_model", 5), ("gpu_model", {"slug": "h100-sxm"}), ("unknown_field", "x"), ("ssh_key_id", "x"),
    ("template", 7), ("template", ["pytorch"]), ("template", "x" * 41), ("template", "pytorch\x00"),
]


@pytest.mark.parametrize(("field", "value"), HOSTILE)
def test_hostile_order_fields_answer_4xx_and_move_nothing(buyer, ed25519_public_key, field, value):
    api = token_client(buyer, "trade", "read")
    before = state()
    for path in ("/api/v1/bids", "/api/v1/quote"):
        body = order(ed25519_public_key, time_in_force="bid") if path.endswith("bids") else {
            "gpu_model": "h100-sxm", "gpus": 1}
        if field in body or path.endswith("bids") or field in ("gpus", "hours", "region", "gpu_model"):
            body[field] = value
        else:
            continue
        text = json.dumps(body, allow_nan=True)
        response = post_json(api, path, text)
        assert 400 <= response.status_code < 500, (path, response.content)
        assert response["Content-Type"].startswith("application/problem+json")
        assert response.json()["code"]
    assert state() == before


@pytest.mark.parametrize(
    "body", ["{", "[]", '"x"', "null", "\xff", "{" * 5000 + "}" * 5000, '{"gpus": 1e999}']
)
def test_bodies_that_are_not_an_order_answer_4xx(buyer, body):
    before = state()
    response = post_json(token_client(buyer, "trade"), "/api/v1/bids", body)
    assert 400 <= response.status_code < 500
    assert state() == before


def test_a_read_token_cannot_place_a_bid(buyer, ed25519_public_key):
    before = state()
    response = post_json(token_client(buyer, "read"), "/api/v1/bids", order(ed25519_public_key))
    assert (response.status_code, response.json()["code"]) == (403, "scope_missing")
    assert state() == before


def test_a_trade_token_does_not_read(buyer):
    response = token_client(buyer, "trade").get("/api/v1/bids")
    assert (response.status_code, response.json()["code"]) == (403, "scope_missing")


# --- another buyer's objects -----------------------------------------------------------------------

def test_another_buyers_bids_and_rentals_are_404(buyer, ed25519_public_key):
    owner_api = token_client(buyer, "read", "trade")
    bid_id = post_json(owner_api, "/api/v1/bids", order(ed25519_public_key, time_in_force="bid",
                                                        max_price="1.00")).json()["bid"]["id"]
    rental_id = post_json(owner_api, "/api/v1/bids", order(ed25519_public_key)).json()["rental"]["id"]
    intruder = token_client(buyer_with(), "read", "trade")
    before = state()
    for method, path in [
        ("get", f"/api/v1/bids/{bid_id}"), ("post", f"/api/v1/bids/{bid_id}/cancel"),
        ("get", f"/api/v1/rentals/{rental_id}"), ("post", f"/api/v1/rentals/{rental_id}/stop"),
        ("get", "/api/v1/bids/999999"), ("get", "/api/v1/rentals/999999"),
    ]:
        response = getattr(intruder, method)(path)
        assert response.status_code == 404, path
        assert response.json()["code"] in ("bid_not_found", "rental_not_found")
    assert intruder.get("/api/v1/bids").json()["items"] == []
    assert intruder.get("/api/v1/rentals").json()["items"] == []
    assert state() == before


# --- lists and rentals -----------------------------------------------------------------------------

def test_bids_list_filters_by_state_and_pages(buyer, ed25519_public_key):
    api = token_client(buyer, "read", "trade")
    ids = [post_json(api, "/api/v1/bids", order(ed25519_public_key, time_in_force="bid", max_price="1.00"))
           .json()["bid"]["id"] for _ in range(3)]
    api.post(f"/api/v1/bids/{ids[0]}/cancel")
    assert [item["id"] for item in api.get("/api/v1/bids?state=open").json()["items"]] == ids[:0:-1]
    assert [item["id"] for item in api.get("/api/v1/bids?state=cancelled").json()["items"]] == [ids[0]]
    first = api.get("/api/v1/bids?limit=2").json()
    rest = api.get(f"/api/v1/bids?limit=2&cursor={first['next_cursor']}").json()
    assert [item["id"] for item in first["items"] + rest["items"]] == ids[::-1]
    assert rest["next_cursor"] is None
    assert api.get("/api/v1/bids?state=nope").status_code == 422
    assert api.get("/api/v1/bids?cursor=garbage!").status_code == 400
    assert api.get("/api/v1/bids?limit=101").status_code == 422


def test_rental_stop_and_the_live_and_ended_lists(buyer, ed25519_public_key):
    api = token_client(buyer, "read", "trade")
    rental_id = post_json(api, "/api/v1/bids", order(ed25519_public_key)).json()["rental"]["id"]
    assert [item["id"] for item in api.get("/api/v1/rentals?state=live").json()["items"]] == [rental_id]
    stopped = api.post(f"/api/v1/rentals/{rental_id}/stop")
    assert stopped.status_code == 200
    data = stopped.json()
    assert (data["state"], data["end_reason"], data["connection"]) == ("ended", "stopped_by_buyer", None)
    assert data["ended_at"].endswith("Z")
    assert api.get("/api/v1/rentals?state=live").json()["items"] == []
    assert [item["id"] for item in api.get("/api/v1/rentals?state=ended").json()["items"]] == [rental_id]
    assert api.post(f"/api/v1/rentals/{rental_id}/stop").status_code == 404
    assert Rental.objects.get(pk=rental_id).state == "ended"


def test_a_starting_rental_shows_no_connection(buyer):
    rental = RentalFactory(buyer=buyer, offer=OfferFactory(), state="starting")
    data = token_client(buyer, "read").get(f"/api/v1/rentals/{rental.pk}").json()
    assert data["connection"] is None and data["cost_so_far"] is None and data["state"] == "starting"


def test_lists_run_fixed_queries(buyer, django_assert_max_num_queries):
    api = token_client(buyer, "read")
    offer = OfferFactory(gpus_offered=8)
    api.get("/api/v1/bids")  # the token's last use is written once a minute: not in the counts below

    def add(count):
        for _ in range(count):
            BidFactory(buyer=buyer, state="open")
            RentalFactory(buyer=buyer, offer=offer, state="running",
                          paid_through=datetime.now(UTC) + timedelta(hours=1))
            offer.server.gpus_rented = 0
            offer.server.save(update_fields=["gpus_rented"])

    add(1)
    with django_assert_max_num_queries(3):
        api.get("/api/v1/bids")
    with django_assert_max_num_queries(4):
        api.get("/api/v1/rentals")
    add(20)
    with django_assert_max_num_queries(3):
        assert len(api.get("/api/v1/bids").json()["items"]) == 42  # 21 open and the rentals' 21
    with django_assert_max_num_queries(4):
        assert len(api.get("/api/v1/rentals").json()["items"]) == 21


def test_ids_in_paths_that_are_not_numbers_answer_4xx(buyer):
    api = token_client(buyer, "read", "trade")
    for path in ("/api/v1/bids/abc", "/api/v1/bids/1e3", "/api/v1/rentals/-1",
                 "/api/v1/bids/99999999999999999999999"):
        assert 400 <= api.get(path).status_code < 500, path


# --- a saved SSH key on an order -------------------------------------------------------------------

def test_an_order_with_a_saved_key_gives_the_rental_that_key(buyer, ed25519_public_key):
    saved = ssh_key_add(buyer=buyer, name="laptop", public_key=ed25519_public_key)
    api = token_client(buyer, "trade")
    placed = post_json(api, "/api/v1/bids", order(None, ssh_public_key=None, ssh_key_id=saved.pk))
    assert placed.status_code == 201, placed.content
    assert Rental.objects.get(buyer=buyer).ssh_public_key == saved.public_key


@pytest.mark.parametrize("which", ["theirs", "missing", "both"])
def test_another_buyers_key_a_missing_one_or_two_keys_are_refused(buyer, ed25519_public_key, which):
    theirs = ssh_key_add(buyer=buyer_with(), name="theirs", public_key=ed25519_public_key)
    body = {
        "theirs": order(None, ssh_public_key=None, ssh_key_id=theirs.pk),
        "missing": order(None, ssh_public_key=None, ssh_key_id=theirs.pk + 1000),
        "both": order(ed25519_public_key, ssh_key_id=theirs.pk),
    }[which]
    before = state()
    response = post_json(token_client(buyer, "trade"), "/api/v1/bids", body)
    assert response.status_code == 422
    assert response.json()["code"] == ("ssh_key_twice" if which == "both" else "ssh_key_not_found")
    assert state() == before
