"""The public pages cached under the versions of the books they show: live, shared by anonymous
visitors only, and the same bytes as a page rendered from the selectors."""

from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine
from django.core.cache import cache
from django.test import Client
from django.urls import reverse
from django.utils import timezone, translation

from exchange.models import MarketBook
from exchange.selectors import market_versions
from exchange.services import market_close, offer_post
from tests.factories import ServerFactory

from .support import buyer_with, place, signed_in

pytestmark = pytest.mark.django_db


def url(name: str, language: str = "en", **kwargs) -> str:
    with translation.override(language):
        return reverse(name, kwargs=kwargs or None)


def book_url(gpu, language: str = "en") -> str:
    return url("exchange:trade-book", language, slug=gpu.slug)


PUBLIC = (
    ("catalog:home", {}),
    ("catalog:gpu-list", {}),
    ("catalog:gpu-detail", {"slug": "h100-sxm"}),
    ("catalog:workload-detail", {"slug": "fine-tuning"}),
    ("exchange:trade-book", {"slug": "h100-sxm"}),
)


@pytest.fixture
def frozen():
    """The clock stopped inside one minute: the GPU page's chart is the same from one request to
    the next."""
    with time_machine.travel(timezone.now().replace(second=10), tick=False) as traveller:
        yield traveller


def test_an_order_between_two_requests_changes_the_second_answer(client, demo_book, ssh_key, balances):
    h100 = demo_book["h100-sxm"]
    first = client.get(book_url(h100)).content.decode()
    assert "$0.07" not in first
    place(buyer_with("100"), h100, ssh_key, price="0.07")  # rests far below every ask
    second = client.get(book_url(h100)).content.decode()
    assert "$0.07" in second


def test_a_new_cheapest_offer_shows_on_the_next_home_page(client, demo_book):
    h100 = demo_book["h100-sxm"]
    assert "$0.11" not in client.get(url("catalog:home")).content.decode()
    server = ServerFactory(gpu_model=h100, gpu_count=8, status="active")
    offer_post(server=server, gpus=8, price_usd=Decimal("0.11"))
    assert "$0.11" in client.get(url("catalog:home")).content.decode()


def test_closing_the_market_shows_on_the_next_page(client, demo_book):
    page = url("catalog:workload-detail", slug="fine-tuning")
    client.get(page)
    market_close()
    assert "Be ready on launch day" in client.get(page).content.decode()


def test_every_writer_of_a_book_bumps_its_version(demo_book, ssh_key, balances):
    h100, a100 = demo_book["h100-sxm"], demo_book["a100-sxm"]
    before = market_versions(gpu_model_ids=[h100.pk]).key
    others = market_versions(gpu_model_ids=[a100.pk]).key
    place(buyer_with("100"), h100, ssh_key, price="0.07")
    assert market_versions(gpu_model_ids=[h100.pk]).key != before
    assert market_versions(gpu_model_ids=[a100.pk]).key == others  # another book did not move
    assert MarketBook.objects.filter(gpu_model=h100).exists()


@pytest.mark.parametrize(("name", "kwargs"), PUBLIC)
@pytest.mark.parametrize("language", ["en", "pt", "fr"])
def test_the_cached_page_is_byte_identical_to_a_fresh_render(demo_book, frozen, name, kwargs, language):
    address = url(name, language, **kwargs)
    client = Client()
    rendered = client.get(address)
    served = client.get(address)
    assert rendered.status_code == served.status_code == 200
    assert served.content == rendered.content
    cache.clear()
    assert Client().get(address).content == served.content


@pytest.mark.parametrize(("name", "kwargs", "queries"), [
    ("catalog:home", {}, 1), ("catalog:workload-detail", {"slug": "fine-tuning"}, 1),
    ("catalog:gpu-detail", {"slug": "h100-sxm"}, 1), ("exchange:trade-book", {"slug": "h100-sxm"}, 1),
])
def test_a_cached_page_costs_its_versions_read_only(
    client, demo_book, frozen, django_assert_num_queries, name, kwargs, queries
):
    address = url(name, **kwargs)
    client.get(address)
    with django_assert_num_queries(queries):  # the versions, found by the address for a GPU's pages
        assert client.get(address).status_code == 200


def test_a_signed_in_visitor_is_never_served_the_shared_copy(demo_book):
    anonymous, buyer = Client(), signed_in(buyer_with("100"))
    home = url("catalog:home")
    shared = anonymous.get(home).content.decode()
    assert "Sign out" not in shared and "Sign in" in shared
    personal = buyer.get(home)
    assert "Sign out" in personal.content.decode() and "Sign in" not in personal.content.decode()
    assert "no-store" in personal["Cache-Control"]
    # Nor is their page stored for anyone else.
    assert "Sign out" not in anonymous.get(home).content.decode()
    cache.clear()
    buyer.get(home)
    assert "Sign out" not in anonymous.get(home).content.decode()


def test_shared_pages_carry_no_csrf_token_and_set_no_cookie(demo_book):
    client = Client()
    for name, kwargs in PUBLIC:
        for _attempt in range(2):  # rendered, then served from the cache
            response = client.get(url(name, **kwargs))
            assert "csrfmiddlewaretoken" not in response.content.decode(), name
            assert not response.cookies, name


def test_a_query_string_is_never_served_from_the_shared_copy(client, demo_book):
    page = url("catalog:gpu-list")
    client.get(page)
    sorted_page = client.get(page + "?sort=-price").content.decode()
    assert 'aria-sort="descending"' in sorted_page or "descending" in sorted_page


def test_the_book_is_not_served_after_a_bid_in_it_expires(client, demo_book, ssh_key, balances):
    h100 = demo_book["h100-sxm"]
    expires = timezone.now() + timedelta(minutes=5)
    place(buyer_with("100"), h100, ssh_key, price="0.07", expires_at=expires)
    assert "$0.07" in client.get(book_url(h100)).content.decode()
    with time_machine.travel(expires + timedelta(seconds=1)):
        assert "$0.07" not in client.get(book_url(h100)).content.decode()


def test_a_visitor_with_a_message_waiting_gets_a_page_of_their_own(client, demo_book):
    from django.contrib.messages.storage.cookie import CookieStorage

    home = url("catalog:home")
    client.get(home)  # the shared copy
    storage = CookieStorage(client.get(home).wsgi_request)
    storage.add(20, "You have signed out.")
    response_cookies = storage._encode(storage._loaded_messages + storage._queued_messages)
    client.cookies["messages"] = response_cookies
    assert "You have signed out." in client.get(home).content.decode()


@pytest.mark.parametrize("name", ["catalog:gpu-detail", "exchange:trade-book"])
def test_a_gpu_we_do_not_list_is_404_every_time(client, demo_book, name):
    """Its versions are the market's alone: never served from the cache, always refused."""
    address = url(name, slug="no-such-gpu")

    assert [client.get(address).status_code for _ in range(2)] == [404, 404]


def test_the_book_filtered_by_isolation_varies_with_its_filter(client, demo_book):
    whole_book = client.get(book_url(demo_book["h100-sxm"])).content.decode()  # stored: shared by all
    assert whole_book.count('data-testid="ask-isolation"') == 3
    container = client.get(book_url(demo_book["h100-sxm"]) + "?isolation=container").content.decode()
    assert container.count('data-testid="ask-isolation">Container<') == 1
    assert container.count('data-testid="ask-isolation"') == 1
    assert 'data-hx-get="/en/trade/h100-sxm/book/?isolation=container"' in container
    shared = client.get(book_url(demo_book["h100-sxm"]) + "?isolation=shared").content.decode()
    assert shared.count('data-testid="ask-isolation">Shared server<') == 2
    assert client.get(book_url(demo_book["h100-sxm"])).content.decode() == whole_book
