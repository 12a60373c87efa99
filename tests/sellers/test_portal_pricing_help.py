"""The pricing help of the portal's offer forms: on the server page (for the offer's price, or the
price sent back), and alone as htmx asks for it while the seller types; only for the seller's own
servers, in the page's language, and a hint (never a 500) for a price the exchange would refuse."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone, translation
from django.utils.html import escape
from django.utils.translation import gettext

from exchange.models import Offer, OfferState
from exchange.services import price_message
from tests.exchange.support import market_set
from tests.factories import (
    BidFactory,
    GpuModelFactory,
    OfferFactory,
    RentalFactory,
    SellerFactory,
    ServerFactory,
    UserFactory,
)
from tests.sellers.support import member, person, url

pytestmark = pytest.mark.django_db

NBSP = "\u00a0"


@pytest.fixture
def gpu():
    return GpuModelFactory(name="H100 SXM", slug="h100-sxm")


@pytest.fixture
def seller_a():
    return SellerFactory(name="Alpha GPU Lda")


@pytest.fixture
def client_a(client, seller_a):
    client.force_login(member(seller_a))
    return client


@pytest.fixture
def server(seller_a, gpu):
    return ServerFactory(seller=seller_a, gpu_model=gpu, gpu_count=8)


def book(gpu, *, asks=("2.20", "2.40", "2.60"), bids=("1.90",), trades=("2.10", "2.30", "2.50")):
    for price in asks:
        OfferFactory(server=ServerFactory(gpu_model=gpu), price_usd=Decimal(price))
    for price in bids:
        BidFactory(gpu_model=gpu, max_price_usd=Decimal(price), state="open", time_in_force="bid")
    now = timezone.now()
    for index, price in enumerate(trades):
        offer = OfferFactory(server=ServerFactory(gpu_model=gpu), price_usd=Decimal(price), state="withdrawn")
        started = now - timedelta(hours=index + 1)
        RentalFactory(offer=offer, started_at=started, state="ended", ended_at=started + timedelta(minutes=5),
                      end_reason="stopped_by_buyer")


def help_url(server, language="en", **query):
    return url("sellers:portal-pricing-help", language, server_id=server.pk)


def test_the_server_page_shows_the_help_for_the_offers_price(client_a, server, gpu):
    book(gpu)
    OfferFactory(server=server, price_usd=Decimal("2.50"))
    page = client_a.get(url("sellers:portal-server", "pt", server_id=server.pk)).content.decode()
    assert f'data-hx-get="/pt/seller/servers/{server.pk}/pricing/"' in page
    with translation.override("pt"):
        assert escape(gettext("Median price of the last 24 h")) in page
    assert f"US${NBSP}2,20" in page  # the best ask
    assert f"US${NBSP}1,90" in page  # the best bid
    assert "US$\u00a02,30 (3 negócios)" in page  # the median of 2.10, 2.30, 2.50
    # 2.20 and 2.40 are cheaper: the third of four asks (its own counted once).
    assert "a oferta n.º 3 de 4" in page


def test_a_new_offer_sees_the_market_and_no_place(client_a, server, gpu):
    book(gpu)
    page = client_a.get(url("sellers:portal-server", server_id=server.pk)).content.decode()
    assert 'data-testid="pricing-help"' in page
    assert 'data-testid="pricing-place"' not in page
    assert "$2.30 (3 trades)" in page


def test_the_fragment_follows_the_price_typed_in_the_pages_language(client_a, server, gpu):
    book(gpu)
    answer = client_a.get(help_url(server, "fr"), {"price_usd": "2,10", "gpus": "4"})
    assert answer.status_code == 200
    text = answer.content.decode()
    assert text.startswith('<div id="pricing-help"')
    assert "2,20\u00a0$US" in text
    assert 'data-testid="pricing-place"' in text
    assert "la moins chère des 4 offres" in text


def test_a_price_at_a_resting_bid_would_trade_at_once(client_a, server, gpu):
    market_set(True)
    book(gpu, bids=("2.70",))
    text = client_a.get(help_url(server), {"price_usd": "2.65", "gpus": "8"}).content.decode()
    assert "At this price your offer would trade at once with a resting bid at $2.70." in text
    market_set(False)
    text = client_a.get(help_url(server), {"price_usd": "2.65", "gpus": "8"}).content.decode()
    assert "your offer would trade at $2.70 when the market opens." in text


@pytest.mark.parametrize(("typed", "problem"), [
    ("abc", None), ("2.555", None), ("0", "price_out_of_range"), ("100.01", "price_out_of_range"),
    ("-1", None), ("1e9", None), ("9" * 80, None), ("NaN", None),
])
def test_bad_prices_get_a_translated_hint_and_the_market_alone(client_a, server, gpu, typed, problem):
    book(gpu)
    answer = client_a.get(help_url(server, "pt"), {"price_usd": typed, "gpus": "x"})
    assert answer.status_code == 200
    text = answer.content.decode()
    assert 'data-testid="pricing-errors"' in text
    assert 'data-testid="pricing-place"' not in text
    assert f"US${NBSP}2,20" in text
    if problem:
        with translation.override("pt"):
            assert escape(str(price_message(problem))) in text


def test_an_empty_price_is_no_error(client_a, server, gpu):
    text = client_a.get(help_url(server), {"price_usd": "", "gpus": ""}).content.decode()
    assert 'data-testid="pricing-errors"' not in text


def test_an_offer_sent_back_shows_the_help_for_the_price_entered(client_a, server, gpu):
    book(gpu)
    post_url = url("sellers:portal-offer-post", server_id=server.pk)
    answer = client_a.post(post_url, {"gpus": "99", "price_usd": "2.30"})
    assert answer.status_code == 400
    text = answer.content.decode()
    assert "At this price yours would be ask number 2 of 4, the cheapest first." in text
    assert not Offer.objects.filter(server=server).exists()
    bad = client_a.post(post_url, {"gpus": "4", "price_usd": "0,005"})
    assert bad.status_code == 400
    assert 'data-testid="pricing-errors"' in bad.content.decode()


def test_the_help_only_for_the_sellers_own_servers(client, server, gpu):
    other = ServerFactory(gpu_model=gpu)
    client.force_login(member(server.seller))
    assert client.get(help_url(other), {"price_usd": "2.00"}).status_code == 404
    assert client.get(url("sellers:portal-pricing-help", server_id=999999)).status_code == 404
    assert client.post(help_url(server), {"price_usd": "2.00"}).status_code == 405


def test_no_help_for_who_is_not_a_member_with_two_factor(client, server):
    assert client.get(help_url(server)).status_code == 302  # signed out: to sign in
    client.force_login(UserFactory())
    assert client.get(help_url(server)).url.endswith("/sell/")
    client.force_login(person(server.seller, mfa=False))
    assert client.get(help_url(server)).status_code == 302
    assert 'pricing' not in client.get(help_url(server)).content.decode()


def test_a_constant_number_of_queries(client_a, server, gpu, django_assert_max_num_queries):
    OfferFactory(server=server, price_usd=Decimal("2.50"))
    book(gpu, asks=("2.20",), bids=("1.90",), trades=("2.10",))
    with django_assert_max_num_queries(12) as small:
        assert client_a.get(help_url(server), {"price_usd": "2.00"}).status_code == 200
    book(gpu, asks=[f"2.{n}0" for n in range(10)], bids=[f"1.{n}0" for n in range(10)],
         trades=[f"2.{n}5" for n in range(10)])
    with django_assert_max_num_queries(len(small.captured_queries)):
        assert client_a.get(help_url(server), {"price_usd": "2.00"}).status_code == 200
    with django_assert_max_num_queries(len(small.captured_queries) + 12):
        assert client_a.get(url("sellers:portal-server", server_id=server.pk)).status_code == 200


def test_a_retired_server_has_no_help(client_a, server):
    server.status = "retired"
    server.save()
    page = client_a.get(url("sellers:portal-server", server_id=server.pk)).content.decode()
    assert 'data-testid="pricing-help"' not in page
    assert OfferState.ACTIVE
