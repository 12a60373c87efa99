"""`SharedPagesMiddleware`: a page `page_cached` rendered for everyone is answered the next time
before sessions, users and messages run, with the same bytes and headers as the whole stack gives;
anyone with a session or a message waiting, a query string or another host goes the whole way."""

from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from exchange.services import offer_post
from marketplace import page_cache
from tests.factories import ServerFactory

pytestmark = pytest.mark.django_db

ADDRESSES = [
    "/en/", "/pt/gpus/", "/fr/gpus/h100-sxm/", "/pt/workloads/fine-tuning/", "/fr/trade/h100-sxm/book/",
]


@pytest.fixture(autouse=True)
def no_routes_learned():
    page_cache._routes.clear()
    yield
    page_cache._routes.clear()


@pytest.fixture
def frozen():
    with time_machine.travel(timezone.now().replace(second=10), tick=False) as traveller:
        yield traveller


def served_early(response) -> bool:
    """Whether the middleware answered: the stack below it sets the user on every request."""
    return not hasattr(response.wsgi_request, "user")


def headers(response) -> dict[str, str]:
    return {name: value for name, value in response.items() if name != "Date"}


@pytest.mark.parametrize("address", ADDRESSES)
def test_the_second_visitor_is_answered_before_the_session_and_user(demo_book, frozen, address):
    rendered = Client().get(address)
    served = Client().get(address)
    assert not served_early(rendered) and served_early(served)
    assert served.status_code == 200
    assert served.content == rendered.content
    assert headers(served) == headers(rendered)
    assert "Content-Security-Policy" in served and "X-Frame-Options" in served


def test_an_early_answer_costs_one_statement(demo_book, frozen, django_assert_num_queries):
    Client().get("/fr/gpus/h100-sxm/")
    with django_assert_num_queries(1):
        assert served_early(Client().get("/fr/gpus/h100-sxm/"))


def test_a_change_of_the_book_is_seen_by_the_early_answer(demo_book):
    h100 = demo_book["h100-sxm"]
    Client().get("/en/")
    assert served_early(Client().get("/en/"))
    offer_post(server=ServerFactory(gpu_model=h100, gpu_count=8, status="active"), gpus=8,
               price_usd=Decimal("0.11"))
    fresh = Client().get("/en/")
    assert not served_early(fresh) and "$0.11" in fresh.content.decode()


def test_the_gpu_page_of_the_next_minute_is_rendered_afresh(demo_book, frozen):
    Client().get("/en/gpus/h100-sxm/")
    assert served_early(Client().get("/en/gpus/h100-sxm/"))
    frozen.shift(timedelta(minutes=1))
    assert not served_early(Client().get("/en/gpus/h100-sxm/"))
    assert served_early(Client().get("/en/gpus/h100-sxm/"))


@pytest.mark.parametrize("cookie", ["sessionid", "messages"])
def test_a_visitor_with_a_session_or_a_message_goes_the_whole_way(demo_book, cookie):
    Client().get("/en/")
    visitor = Client()
    visitor.cookies[cookie] = "anything"
    assert not served_early(visitor.get("/en/"))


def test_a_query_string_or_a_post_goes_the_whole_way(demo_book):
    Client().get("/en/gpus/")
    assert not served_early(Client().get("/en/gpus/?sort=price"))
    assert not served_early(Client().post("/en/gpus/"))


def test_another_host_is_not_answered_from_the_copy_of_this_one(demo_book):
    Client().get("/en/")
    assert not served_early(Client(HTTP_HOST="localhost").get("/en/"))
    assert Client(HTTP_HOST="evil.example").get("/en/").status_code == 400


def test_a_copy_gone_from_the_cache_is_rendered_and_stored_again(demo_book):
    Client().get("/en/")
    cache.clear()
    assert not served_early(Client().get("/en/"))
    assert served_early(Client().get("/en/"))


def test_a_page_that_is_not_found_is_never_learned(demo_book):
    for _attempt in range(2):
        assert Client().get("/en/gpus/no-such-gpu/").status_code == 404
    assert page_cache._routes == {}


def test_a_process_learns_an_address_from_a_copy_another_process_stored(demo_book):
    Client().get("/en/")
    page_cache._routes.clear()  # a worker that has not served this address yet
    assert not served_early(Client().get("/en/"))
    assert served_early(Client().get("/en/"))


def test_a_copy_missing_at_a_known_address_reads_the_versions_once(
    demo_book, frozen, django_assert_max_num_queries
):
    Client().get("/fr/trade/h100-sxm/book/")
    cache.clear()
    with django_assert_max_num_queries(10) as context:  # a render's own queries besides
        Client().get("/fr/trade/h100-sxm/book/")
    # The versions' read is the one prepared statement of this page, which Django records without
    # its text (parameters bound on the server).
    prepared = [query for query in context.captured_queries if query["sql"] is None]
    assert len(prepared) == 1
