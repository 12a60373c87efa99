"""Orders that name the isolation levels they accept, from the trade page (checkboxes, with and
without JavaScript: the forms post either way) and the API (`isolation`): only servers sold at one
of those levels fill them; none, or an unknown level, is refused and places nothing."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.utils import translation
from django.utils.html import escape
from django.utils.translation import gettext

from billing.services import fx_rates_load
from exchange.models import Bid
from tests.api_tokens import post_json, token_client
from tests.exchange.support import bid_form, buyer_with, orders_state, signed_in
from tests.factories import GpuModelFactory, OfferFactory, ServerFactory

pytestmark = pytest.mark.django_db

D = Decimal
NBSP = "\u00a0"
MESSAGE = "Choose at least one isolation level: container, shared server or whole server."
TRADE = "/fr/trade/h200/"


@pytest.fixture
def rates():
    fx_rates_load(rates={"EUR": D("0.92")}, valid_from=datetime(2026, 1, 1, tzinfo=UTC), source="test")


@pytest.fixture
def book():
    """A cheap shared server, a dearer container one and a dearest whole server of 8 GPUs."""
    gpu = GpuModelFactory(slug="h200")

    def ask(price, level):
        server = ServerFactory(gpu_model=gpu, gpu_count=8, isolation_level=level)
        return OfferFactory(server=server, gpus_offered=8, price_usd=D(price))

    return {level: ask(price, level) for price, level in [("2.00", "shared"), ("2.50", "container"),
                                                           ("3.00", "whole")]}


@pytest.fixture
def buyer(book, rates, open_market):
    return buyer_with()


def french(message: str) -> str:
    with translation.override("fr"):
        text = gettext(message)
    assert text != message
    return text


def state() -> tuple:
    return orders_state("isolation_levels")


# --- the trade page --------------------------------------------------------------------------------


def test_the_order_forms_offer_every_level_ticked(client, book):
    html = client.get(TRADE).content.decode()
    for prefix in ("buy", "bid"):
        for position, (value, label) in enumerate(
            [("container", "Conteneur"), ("shared", "Serveur partagé"), ("whole", "Serveur entier")]
        ):
            assert (
                f'<input type="checkbox" name="isolation" value="{value}" id="{prefix}_isolation_{position}" '
                f'checked>' in html
            ), (prefix, value)
            assert f"{label}</label>" in html
    assert html.count('<input type="hidden" name="isolation" value="">') == 2


def test_a_bid_accepting_only_containers_buys_from_the_container_server(book, buyer, ed25519_public_key):
    client = signed_in(buyer)
    data = bid_form(ed25519_public_key, max_price_usd="3,00") | {"isolation": ["", "container"]}
    confirm = client.post(f"{TRADE}bid/", data)
    assert confirm.status_code == 200  # it buys at once: the confirmation asks first
    html = confirm.content.decode()
    assert f"2,50{NBSP}$US" in html
    assert '<dd data-testid="confirm-isolation">Conteneur</dd>' in html
    assert '<input type="hidden" name="isolation" value="">' in html
    assert '<input type="hidden" name="isolation" value="container">' in html
    response = client.post(f"{TRADE}bid/", data | {"confirmed_price_usd": "2.50", "form": "bid"})
    assert response.status_code == 302
    bid = Bid.objects.get(buyer=buyer)
    assert (bid.isolation_levels, bid.state) == ("container", "filled")
    assert (bid.rental.server_id, bid.rental.isolation_level) == (book["container"].server_id, "container")


def test_buy_now_with_two_levels_confirms_the_best_of_them(buyer, ed25519_public_key):
    client = signed_in(buyer)
    data = {
        "gpus": "8", "hours": "", "region": "", "isolation": ["", "container", "whole"],
        "ssh_public_key": ed25519_public_key, "form_token": "6f1f3a52-8d0e-4b59-9a57-2f0c7f1e4b12",
    }
    html = client.post(f"{TRADE}buy/", data).content.decode()
    assert f"2,50{NBSP}$US" in html
    assert '<dd data-testid="confirm-isolation">Conteneur, Serveur entier</dd>' in html
    response = client.post(f"{TRADE}buy/", data | {"confirmed_price_usd": "2.50", "form": "buy"})
    assert response.status_code == 302
    assert Bid.objects.get(buyer=buyer).isolation_levels == "container,whole"


def test_a_whole_server_is_quoted_only_for_all_its_gpus(buyer, ed25519_public_key):
    client = signed_in(buyer)
    data = {
        "gpus": "4", "hours": "", "region": "", "isolation": ["", "whole"],
        "ssh_public_key": ed25519_public_key, "form_token": "6f1f3a52-8d0e-4b59-9a57-2f0c7f1e4b13",
    }
    response = client.post(f"{TRADE}buy/", data)
    assert response.status_code == 400
    assert not Bid.objects.exists()


@pytest.mark.parametrize("path", ["bid/", "buy/"])
@pytest.mark.parametrize("sent", [[""], ["", "everything"], ["", "shared\x00"], ["", "x" * 5000]])
def test_no_level_or_an_unknown_one_places_nothing(buyer, ed25519_public_key, path, sent):
    before = state()
    data = bid_form(ed25519_public_key, gpus="1", max_price_usd="3,00") | {"isolation": sent}
    response = signed_in(buyer).post(f"{TRADE}{path}", data)
    assert response.status_code == 400
    if "\x00" not in sent[-1]:  # a NUL anywhere is refused before the form (the control-character guard)
        assert escape(french(MESSAGE)) in response.content.decode()
    assert state() == before


def test_the_preview_quotes_from_the_levels_ticked(client, book, rates, open_market):
    html = client.post("/en/trade/h200/preview/", {
        "gpus": "1", "max_price_usd": "3.00", "hours": "", "region": "", "isolation": ["", "container"],
    }).content.decode()
    assert "This bid buys now at $2.50 per GPU-hour" in html
    html = client.post("/fr/trade/h200/preview/", {
        "gpus": "1", "max_price_usd": "3,00", "isolation": [""],
    }).content.decode()
    assert 'class="preview-errors"' in html and escape(french(MESSAGE)) in html


def test_sent_back_without_javascript_the_form_keeps_the_levels_ticked(client, book):
    html = client.post(TRADE, {
        "form": "bid", "preview": "1", "gpus": "1", "max_price_usd": "3,00", "isolation": ["", "whole"],
    }).content.decode()
    assert '<input type="checkbox" name="isolation" value="whole" id="bid_isolation_2" checked>' in html
    assert '<input type="checkbox" name="isolation" value="container" id="bid_isolation_0">' in html


# --- the API ---------------------------------------------------------------------------------------


def order(key, **overrides) -> dict:
    body = {"gpu_model": "h200", "gpus": 1, "max_price": "3.00", "time_in_force": "buy_now",
            "ssh_public_key": key}
    return body | overrides


def test_an_api_bid_accepts_every_level_by_default(buyer, ed25519_public_key):
    data = post_json(token_client(buyer, "trade"), "/api/v1/bids", order(ed25519_public_key)).json()
    assert data["bid"]["isolation"] == ["container", "shared", "whole"]
    assert data["rental"]["price"]["amount"] == "2.00"


def test_an_api_bid_buys_only_at_the_levels_it_names(buyer, ed25519_public_key):
    api = token_client(buyer, "trade")
    response = post_json(api, "/api/v1/bids", order(ed25519_public_key, isolation=["whole", "container"]))
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["bid"]["isolation"] == ["container", "whole"] and data["rental"]["price"]["amount"] == "2.50"
    whole = post_json(api, "/api/v1/bids", order(ed25519_public_key, gpus=8, isolation=["whole"])).json()
    assert whole["rental"]["price"]["amount"] == "3.00"
    assert Bid.objects.get(pk=whole["bid"]["id"]).rental.server_id == book_server(buyer, "whole")


def book_server(buyer, level) -> int:
    return Bid.objects.filter(buyer=buyer, rental__server__isolation_level=level).get().rental.server_id


def test_an_api_quote_prices_the_levels_it_names(buyer):
    api = token_client(buyer, "read")
    quote = post_json(api, "/api/v1/quote", {"gpu_model": "h200", "gpus": 8, "isolation": ["whole"]})
    assert (quote.status_code, quote.json()["price"]["amount"]) == (200, "3.00")
    none = post_json(api, "/api/v1/quote", {"gpu_model": "h200", "gpus": 1, "isolation": ["whole"]})
    assert (none.status_code, none.json()["code"]) == (404, "no_offer")


@pytest.mark.parametrize("sent, code", [
    ([], "isolation_levels_invalid"), (["any"], "isolation_levels_invalid"),
    (["Shared"], "isolation_levels_invalid"), ([""], "isolation_levels_invalid"),
    (["shared\u0000"], "isolation_levels_invalid"),
    ("shared", "validation_failed"), ([1], "validation_failed"), ([None], "validation_failed"),
    (["x" * 10_000], "validation_failed"), (["shared"] * 4, "validation_failed"),
    ({"shared": True}, "validation_failed"),
])
def test_bad_levels_are_problems_that_move_nothing(buyer, ed25519_public_key, sent, code):
    before = state()
    for path, scope, body in (
        ("/api/v1/bids", "trade", order(ed25519_public_key, isolation=sent)),
        ("/api/v1/quote", "read", {"gpu_model": "h200", "gpus": 1, "isolation": sent}),
    ):
        response = post_json(token_client(buyer, scope), path, body, **{"Accept-Language": "fr"})
        assert (response.status_code, response.json()["code"]) == (422, code), (path, response.content)
        assert response["Content-Type"].startswith("application/problem+json")
        if code == "isolation_levels_invalid":
            assert response.json()["detail"] == french(MESSAGE)
    assert state() == before
