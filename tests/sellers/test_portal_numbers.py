"""Numbers a seller types in the portal are read in the page's language, ASCII digits only."""

from decimal import Decimal

import pytest

from exchange.models import Offer
from tests.factories import OfferFactory, SellerFactory, ServerFactory
from tests.sellers.support import member, url

pytestmark = pytest.mark.django_db


@pytest.fixture
def server(client):
    seller = SellerFactory()
    client.force_login(member(seller))
    return ServerFactory(seller=seller, gpu_count=8)


@pytest.mark.parametrize(
    ("language", "typed"), [("pt", "2,10"), ("fr", "2,10"), ("en", "2.10"), ("en", "2,10")]
)
def test_an_offer_price_in_the_pages_notation(client, server, language, typed):
    response = client.post(url("sellers:portal-offer-post", language, server_id=server.pk),
                           {"gpus": "4", "price_usd": typed})
    assert response.status_code == 302
    offer = Offer.objects.get(server=server)
    assert (offer.gpus_offered, offer.price_usd) == (4, Decimal("2.10"))
    page = client.get(url("sellers:portal-server", language, server_id=server.pk)).content.decode()
    shown = "2.10" if language == "en" else "2,10"
    assert f'name="price_usd" value="{shown}" inputmode="decimal"' in page


@pytest.mark.parametrize(
    ("gpus", "price"),
    [("٤", "2,10"), ("４", "2,10"), ("4", "٢,١٠"), ("4", "1.000,00"), ("4", "2,105"), ("4,5", "2,10"),
     ("4", "NaN"), ("4", "1e1")],
)
def test_other_digits_and_separators_are_refused(client, server, gpus, price):
    offer = OfferFactory(server=server, gpus_offered=2)
    before = (offer.gpus_offered, offer.price_usd)
    response = client.post(url("sellers:portal-offer-update", "pt", offer_id=offer.pk),
                           {"gpus": gpus, "price_usd": price})
    assert response.status_code == 400
    offer.refresh_from_db()
    assert (offer.gpus_offered, offer.price_usd) == before
