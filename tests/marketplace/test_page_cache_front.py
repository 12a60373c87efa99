"""`SharedPagesFront`: a shared page the whole stack has answered once is answered the next time
before Django's handler, through the real WSGI application gunicorn serves, with the same bytes
and headers; whatever might be answered differently goes the whole way."""

import io
import sys
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import Client
from django.utils import timezone

from exchange.services import offer_post
from marketplace import page_cache
from marketplace.wsgi import application
from tests.factories import ProfileFactory, ServerFactory

pytestmark = pytest.mark.django_db

ADDRESSES = [
    "/en/", "/pt/gpus/", "/fr/gpus/h100-sxm/", "/pt/workloads/fine-tuning/", "/fr/trade/h100-sxm/book/",
]

SIGN_OUT = "Sair</button>"  # the header's sign-out button, in Portuguese


class CountingSite:
    """Django's WSGI handler, counting the requests that reach it."""

    def __init__(self, app):
        self.app = app
        self.calls = 0

    def __call__(self, environ, start_response):
        self.calls += 1
        return self.app(environ, start_response)


@pytest.fixture
def site():
    return CountingSite(application.site.app)


@pytest.fixture
def front(site):
    page_cache._routes.clear()
    yield page_cache.SharedPagesFront(site)
    page_cache._routes.clear()


@pytest.fixture
def frozen():
    with time_machine.travel(timezone.now().replace(second=10), tick=False) as traveller:
        yield traveller


def call(front, path, *, method="GET", query="", **headers):
    """One request as a WSGI server makes it: (status, headers without Date, body)."""
    environ = {
        "REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query, "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "80", "SERVER_PROTOCOL": "HTTP/1.1", "HTTP_HOST": "127.0.0.1",
        "REMOTE_ADDR": "198.51.100.7", "wsgi.input": io.BytesIO(b""), "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr, **headers,
    }
    answered = {}

    def start_response(status, response_headers, exc_info=None):
        answered["status"] = int(status.split()[0])
        answered["headers"] = [(name, value) for name, value in response_headers if name != "Date"]

    # As Django's test client does: the test's transaction keeps its connection through the request.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        response = front(environ, start_response)
        content = b"".join(response)
        if hasattr(response, "close"):
            response.close()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
    return answered["status"], answered["headers"], content


def served_in_front(front, site, path, **options) -> tuple[bool, tuple]:
    before = site.calls
    answer = call(front, path, **options)
    return site.calls == before, answer


@pytest.mark.parametrize("address", ADDRESSES)
def test_the_second_visitor_is_answered_in_front_with_the_same_bytes_and_headers(
    demo_book, frozen, front, site, address
):
    first = call(front, address)
    in_front, second = served_in_front(front, site, address)
    assert in_front and second == first
    status, headers, _content = second
    names = {name for name, _value in headers}
    assert status == 200
    outer = {"Content-Security-Policy", "X-Content-Type-Options"}  # the stack's outer middleware
    stored = {"X-Frame-Options", "Content-Language"}  # with the copy
    assert outer | stored <= names
    assert "Set-Cookie" not in names


def test_an_answer_in_front_costs_one_statement(demo_book, frozen, front, site, django_assert_num_queries):
    call(front, "/fr/gpus/h100-sxm/")
    with django_assert_num_queries(1):
        assert served_in_front(front, site, "/fr/gpus/h100-sxm/")[0]


def test_a_change_of_the_book_is_seen_by_the_next_request(demo_book, front, site):
    call(front, "/en/")
    assert served_in_front(front, site, "/en/")[0]
    offer_post(server=ServerFactory(gpu_model=demo_book["h100-sxm"], gpu_count=8, status="active"), gpus=8,
               price_usd=Decimal("0.11"))
    in_front, (_status, _headers, content) = served_in_front(front, site, "/en/")
    assert not in_front and "$0.11" in content.decode()
    assert served_in_front(front, site, "/en/")[0]


def test_the_gpu_page_of_the_next_minute_is_rendered_afresh(demo_book, frozen, front, site):
    call(front, "/pt/gpus/h100-sxm/")
    assert served_in_front(front, site, "/pt/gpus/h100-sxm/")[0]
    frozen.shift(timedelta(minutes=1))
    assert not served_in_front(front, site, "/pt/gpus/h100-sxm/")[0]
    assert served_in_front(front, site, "/pt/gpus/h100-sxm/")[0]


@pytest.mark.parametrize("options", [
    {"HTTP_COOKIE": "sessionid=anything"},
    {"HTTP_COOKIE": "theme=dark; messages=anything"},
    {"query": "sort=price"},
    {"method": "HEAD"},
    {"method": "POST"},
    {"HTTP_HOST": "localhost"},
    {"HTTP_X_FORWARDED_PROTO": "https"},
    {"wsgi.url_scheme": "https"},
])
def test_what_might_be_answered_differently_goes_the_whole_way(demo_book, front, site, options):
    call(front, "/en/gpus/")
    assert not served_in_front(front, site, "/en/gpus/", **options)[0]


def test_a_signed_in_buyer_gets_their_own_page_never_the_shared_copy(demo_book, front, site):
    call(front, "/pt/")
    client = Client()
    client.force_login(ProfileFactory().user)
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    in_front, (status, headers, content) = served_in_front(front, site, "/pt/", HTTP_COOKIE=cookie)
    assert not in_front and status == 200
    assert SIGN_OUT in content.decode()
    assert "private" in dict(headers)["Cache-Control"]
    # And the shared copy did not become theirs.
    in_front, (_status, _headers, shared) = served_in_front(front, site, "/pt/")
    assert in_front and SIGN_OUT not in shared.decode()


def test_a_page_not_found_is_never_answered_in_front(demo_book, front, site):
    for _attempt in range(2):
        in_front, (status, _headers, _content) = served_in_front(front, site, "/en/gpus/no-such-gpu/")
        assert not in_front and status == 404


def test_a_failure_in_front_lets_the_whole_stack_answer(demo_book, front, site):
    call(front, "/en/")

    def versions_unreadable():
        raise ConnectionError("the database is down")

    # Only the front's way to the page breaks: the stack below still reads the versions.
    (address, known), = front._routes.items()
    front._routes[address] = replace(known, route=page_cache._Route(known.route.name, versions_unreadable))
    in_front, (status, _headers, _content) = served_in_front(front, site, "/en/")
    assert not in_front and status == 200
