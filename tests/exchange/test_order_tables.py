"""The buyer's orders and rentals tables name the model column apart from the GPU count, and the
count carries its unit, in every language."""

import re

import pytest

from tests.exchange.support import buyer_with, place, signed_in
from tests.factories import RentalFactory

pytestmark = pytest.mark.django_db

HEADERS = {
    "en": ("GPU model", "Number of GPUs", "2 GPUs"),
    "pt": ("Modelo de GPU", "Número de GPU", "2 GPU"),
    "fr": ("Modèle de GPU", "Nombre de GPU", "2 GPU"),
}


def headers(html: str) -> list[str]:
    return re.findall(r'<th scope="col"(?: class="num")?>([^<]*)</th>', html)


@pytest.mark.parametrize("language", ["en", "pt", "fr"])
def test_the_orders_table_names_model_and_count_apart(demo_book, ssh_key, language):
    model, count, cell = HEADERS[language]
    buyer = buyer_with(currency="USD")
    bid = place(buyer, demo_book["h100-sxm"], ssh_key, gpus=2, price="0.50").bid
    html = signed_in(buyer).get(f"/{language}/account/orders/").content.decode()
    assert headers(html)[1:3] == [model, count]
    row = re.search(rf'<tr data-bid="{bid.pk}">(.*?)</tr>', html, re.S).group(1)
    assert f'<td class="num">{cell}</td>' in row


@pytest.mark.parametrize("language", ["en", "pt", "fr"])
def test_the_rentals_table_names_model_and_count_apart(language):
    model, count, cell = HEADERS[language]
    buyer = buyer_with()
    rental = RentalFactory(buyer=buyer, gpus=2)
    html = signed_in(buyer).get(f"/{language}/account/rentals/").content.decode()
    assert headers(html)[1:3] == [model, count]
    row = re.search(rf'<tr data-rental="{rental.pk}">(.*?)</tr>', html, re.S).group(1)
    assert f'<td class="num">{cell}</td>' in row
