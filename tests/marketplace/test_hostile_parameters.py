"""No request answers 5xx, whatever its query string or form says.

The URL patterns are walked (every one but the admin's), so a new page is covered the day it is
added, or this test fails until it says how to build the page's address. The parameters each page
reads are found by recording what the views ask of `request.GET`; hostile values are then sent to
every one of them, one parameter at a time and all at once, alone and repeated.
"""

import uuid

import pytest
from django.http import QueryDict
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import translation

from billing.models import LedgerEntry
from catalog.workloads import WORKLOADS
from exchange.models import Bid, Offer, Rental
from tests.billing.support import buyer_with

pytestmark = pytest.mark.django_db

HOSTILE = [
    "NaN", "sNaN", "-Infinity", "Infinity", "1e30", "1e999999", "-1", "0", "", " ",
    "99999999999999999999999999999", "x" * 10_240, "١٠٠", "１００", "1.000,50", "2.505", "\x00",
    "<script>alert(1)</script>", "' OR 1=1 --", "../../etc/passwd", "%", "\u202e1",
]
# The values of numbers that broke pages before (a price, an amount, hours), for the slower posts.
NUMBERS = [
    "NaN", "sNaN", "Infinity", "1e30", "1e999999", "-1", "0", "", "99999999999999999999999999999",
    "x" * 10_240, "١٠٠", "１００", "1.000,50", "\x00",
]
# What the trade page's forms name, read by POST only: sent in every query string anyway (a link
# must not be able to fill them), and in the form posts below.
ORDER_FIELDS = [
    "gpus", "hours", "region", "max_price_usd", "ssh_public_key", "expires_at", "expires_in", "form_token",
    "confirmed_price_usd", "price_1", "price_8", "preview", "form",
]
# The fields of an order that hostile numbers go to.
ORDER_NUMBERS = ["gpus", "hours", "region", "max_price_usd", "expires_in", "confirmed_price_usd", "price_1"]
GPU = "h100-sxm"
# How to build the address of each pattern that takes arguments.
ARGUMENTS = {
    "slug": {"catalog:workload-detail": WORKLOADS[0].slug},
    "pk": 1, "number": "EXC-2026-000001", "month": "2026-01", "server_id": 1, "offer_id": 1,
    "invitation_id": 1, "key": "x", "uidb36": "1", "bid_id": 1, "rental_id": 1, "key_id": 1, "token_id": 1,
    "token": "x", "alert_id": 1,
    "filename": "everx_agent-1.0.0-py3-none-any.whl",
}


def _patterns(patterns=None, namespace=""):
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(pattern, URLResolver):
            inner = ":".join(part for part in (namespace, pattern.namespace) if part)
            if inner != "admin":
                yield from _patterns(pattern.url_patterns, inner)
        elif isinstance(pattern, URLPattern) and pattern.name:
            yield ":".join(part for part in (namespace, pattern.name) if part), pattern


def _address(name: str, pattern: URLPattern) -> str:
    kwargs = {}
    for argument in pattern.pattern.regex.groupindex:
        value = ARGUMENTS[argument]
        kwargs[argument] = value.get(name, GPU) if isinstance(value, dict) else value
    with translation.override("fr"):
        return reverse(name, kwargs=kwargs)


def _addresses() -> list[str]:
    return sorted({_address(name, pattern) for name, pattern in _patterns()})


@pytest.fixture
def parameters_read(monkeypatch):
    """The names views asked of any QueryDict, recorded while the fixture lives."""
    names: set[str] = set()
    for method in ("__getitem__", "__contains__", "get", "getlist"):
        original = getattr(QueryDict, method)

        def recording(self, key, *args, _original=original, **kwargs):
            names.add(key)
            return _original(self, key, *args, **kwargs)

        monkeypatch.setattr(QueryDict, method, recording)
    return names


def _no_5xx(client: Client, method: str, path: str, data) -> None:
    response = getattr(client, method)(path, data)
    assert response.status_code < 500, (method, path, str(data)[:200], response.status_code)


def _book() -> tuple:
    return (
        list(Bid.objects.order_by("pk").values_list("pk", "state")),
        list(Rental.objects.order_by("pk").values_list("pk", "state")),
        list(Offer.objects.order_by("pk").values_list("pk", "state", "price_usd", "gpus_offered")),
        LedgerEntry.objects.count(),
    )


def _hostile_queries(names, values) -> list:
    queries = []
    for value in values:
        queries.append(dict.fromkeys(names, value))  # every parameter at once
        queries.append({name: [value, "1", value] for name in names})  # repeated: an array
    return queries


def _fuzz(client: Client, parameters_read: set, path: str, values: list[str]) -> None:
    parameters_read.clear()
    _no_5xx(client, "get", path, {})
    read = sorted(parameters_read)
    for query in _hostile_queries(read + ORDER_FIELDS, values):
        _no_5xx(client, "get", path, query)
    for name in read:  # each parameter alone, so that none hides behind another's refusal
        for value in values:
            _no_5xx(client, "get", path, {name: value})


def test_every_public_page_and_fragment_survives_hostile_query_strings(
    client, demo_book, parameters_read
):
    addresses = _addresses() + ["/fr/does-not-exist/", "/api/v1/markets/nope/"]
    assert "/fr/trade/h100-sxm/preview/" in addresses and "/sitemap.xml" in addresses
    before = _book()
    for path in addresses:
        _fuzz(client, parameters_read, path, HOSTILE)
    assert _book() == before


def test_signed_in_pages_survive_hostile_query_strings(demo_book, parameters_read):
    buyer = buyer_with("EUR", "100.00")
    client = Client()
    client.force_login(buyer)
    before = _book()
    for path in _addresses():
        if "/account/" in path or "/seller" in path:
            _fuzz(client, parameters_read, path, NUMBERS)
    assert _book() == before


@pytest.mark.parametrize("path", ["/fr/trade/h100-sxm/preview/", "/fr/trade/h100-sxm/"])
def test_the_preview_posts_survive_hostile_forms(client, demo_book, path):
    before = _book()
    for value in HOSTILE:
        for name in ORDER_FIELDS:
            _no_5xx(client, "post", path, {"gpus": "1", "max_price_usd": "2,50", name: value})
        _no_5xx(client, "post", path, dict.fromkeys(ORDER_FIELDS, value))
    assert _book() == before


@pytest.mark.parametrize("order", ["bid", "buy"])
def test_hostile_orders_never_answer_5xx_and_move_nothing_unless_placed(
    demo_book, ed25519_public_key, order
):
    from exchange.models import Market

    Market.objects.update_or_create(pk=1, defaults={"is_open": True})
    client = Client()
    client.force_login(buyer_with("EUR", "100.00"))
    path = f"/fr/trade/{GPU}/{order}/"
    for value in NUMBERS:
        for name in ORDER_NUMBERS:
            form = {"gpus": "1", "max_price_usd": "1,50", "hours": "2", "region": "", "price_1": "2,88",
                    "ssh_public_key": ed25519_public_key, "form_token": str(uuid.uuid4()), name: value}
            before = _book()
            response = client.post(path, form)
            assert response.status_code < 500, (name, value[:50], response.status_code)
            if response.status_code != 302:  # refused, or asked to confirm: nothing moved
                assert _book() == before, (name, value[:50])
