"""The SDK: money as Decimal, problem details as ApiError, idempotency keys and the one retry."""

import json
import subprocess
import sys
import uuid
from decimal import Decimal

import httpx
import pytest
from everx_cli.client import ApiError, EverxClient, Money, NetworkError, api_base, to_json

from tests.cli.conftest import CLI_SOURCE, TOKEN, URL, FakeExchange
from tests.cli.support import MARKETS, QUOTE, RENTAL_RUNNING


def client_of(fake, **options) -> EverxClient:
    return EverxClient(URL, token=TOKEN, language=options.pop("language", "fr"),
                       transport=httpx.MockTransport(fake), **options)


def test_money_comes_back_as_decimal_and_goes_out_as_the_same_string():
    fake = FakeExchange()
    fake.answer("GET", "/rentals/7", body={**RENTAL_RUNNING, "price": {"amount": "2.10", "currency": "USD"}})
    rental = client_of(fake).rental(7)
    assert rental["price"] == Money(amount=Decimal("2.10"), currency="USD")
    assert isinstance(rental["cost_so_far"].amount, Decimal)
    assert to_json(rental)["price"] == {"amount": "2.10", "currency": "USD"}
    assert to_json(rental) == RENTAL_RUNNING | {"price": {"amount": "2.10", "currency": "USD"}}


def test_market_prices_written_as_bare_strings_are_decimals_too():
    fake = FakeExchange()
    fake.answer("GET", "/markets/h100-sxm", body={"gpu_model": "h100-sxm", "best_ask": "2.88", "spread": None,
                                                  "asks": [{"price": "2.88", "gpus": 8}], "unit": "GPU-hour"})
    market = client_of(fake).market("h100-sxm")
    assert market["best_ask"] == Decimal("2.88") and market["spread"] is None
    assert market["asks"][0]["price"] == Decimal("2.88")
    assert market["unit"] == "GPU-hour"


def test_every_request_names_the_token_the_language_and_the_client():
    fake = FakeExchange()
    fake.answer("GET", "/markets", body=MARKETS)
    client_of(fake, language="pt").markets()
    (request,) = fake.requests
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.headers["Accept-Language"] == "pt"
    assert request.headers["User-Agent"].startswith("everx-cli/")
    assert "Idempotency-Key" not in request.headers


def test_writes_carry_a_fresh_idempotency_key_each():
    fake = FakeExchange()
    fake.answer("POST", "/quote", body=QUOTE)
    fake.answer("PATCH", "/seller/offers/41", body={})
    client = client_of(fake)
    client.quote(gpu_model="h100-sxm", gpus=2, hours=5)
    client.quote(gpu_model="h100-sxm", gpus=2, hours=5)
    client.offer_update(41, price=Decimal("3.20"))
    keys = [request.headers["Idempotency-Key"] for request in fake.requests]
    assert len(set(keys)) == 3
    assert all(uuid.UUID(key).version == 4 for key in keys)
    assert json.loads(fake.requests[0].content) == {"gpu_model": "h100-sxm", "gpus": 2, "hours": 5}
    assert json.loads(fake.requests[2].content) == {"price": "3.20"}


def test_a_write_whose_connection_dropped_is_sent_again_with_the_same_key():
    fake = FakeExchange()
    fake.answer("POST", "/rentals/7/stop", body=RENTAL_RUNNING)
    seen = []

    def flaky(request):
        seen.append(request)
        if len(seen) == 1:
            raise httpx.ConnectError("connection reset", request=request)
        return fake(request)

    client = EverxClient(URL, token=TOKEN, transport=httpx.MockTransport(flaky))
    assert client.rental_stop(7)["id"] == 7
    assert len(seen) == 2
    assert seen[0].headers["Idempotency-Key"] == seen[1].headers["Idempotency-Key"]


def test_two_lost_connections_are_a_network_error():
    def down(request):
        raise httpx.ConnectError("connection refused", request=request)

    client = EverxClient(URL, token=TOKEN, transport=httpx.MockTransport(down))
    with pytest.raises(NetworkError, match="exchange.test"):
        client.wallet()


def test_problem_details_become_an_api_error_with_the_translated_detail():
    fake = FakeExchange()
    fake.problem("POST", "/bids", 422, "validation_failed", "Certains champs sont manquants ou invalides.",
                 errors=[{"field": "gpus", "code": "invalid", "detail": "1, 2, 4 ou 8."}])
    with pytest.raises(ApiError) as raised:
        client_of(fake).buy(gpu_model="h100-sxm", gpus=3, max_price="2.90", ssh_public_key="ssh-ed25519 AAA")
    error = raised.value
    assert (error.status, error.code) == (422, "validation_failed")
    assert error.detail == "Certains champs sont manquants ou invalides."
    assert error.errors == [{"field": "gpus", "code": "invalid", "detail": "1, 2, 4 ou 8."}]
    assert error.body["type"].endswith("/validation_failed")


def test_an_error_that_is_not_json_still_has_a_status_and_a_code():
    client = EverxClient(URL, transport=httpx.MockTransport(
        lambda request: httpx.Response(502, text="<html>Bad gateway</html>")
    ))
    with pytest.raises(ApiError) as raised:
        client.gpus()
    assert (raised.value.status, raised.value.code) == (502, "http_502")


def test_no_content_is_none_and_lists_are_followed_to_their_last_page():
    answers = {None: {"items": [{"id": 3}, {"id": 2}], "next_cursor": "Mg"}, "Mg": {"items": [{"id": 1}],
                                                                                     "next_cursor": None}}

    def paged(request):
        if request.method == "DELETE":
            return httpx.Response(204)
        return httpx.Response(200, json=answers[request.url.params.get("cursor")])

    client = EverxClient(URL, token=TOKEN, transport=httpx.MockTransport(paged))
    assert [row["id"] for row in client.pages("/bids", limit=2)] == [3, 2, 1]
    assert client.ssh_key_delete(5) is None


def test_the_address_may_be_given_with_or_without_the_api_path():
    assert api_base("https://exchange.example/api/v1/") == "https://exchange.example"
    assert api_base(" https://exchange.example/ ") == "https://exchange.example"


def test_the_package_never_imports_django():
    code = ("import sys, everx_cli.main, everx_cli.client; "
            "sys.exit(any(name == 'django' or name.startswith('django.') for name in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(CLI_SOURCE)}, check=False)
    assert done.returncode == 0
