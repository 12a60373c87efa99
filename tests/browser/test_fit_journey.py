"""The fit calculator in French: a 70B model in 4-bit for ten hours, the cheapest fitting
configuration first (as htmx updates it while typing), and its "rent" link prefills the trade page."""

from decimal import Decimal

import pytest

from catalog.fit import Method
from exchange.selectors import fit_configurations

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NBSP = "\u00a0"


def test_french_visitor_finds_the_cheapest_fitting_gpus_and_rents_them(live_server, demo_book, page):
    expected = fit_configurations(params_billions=Decimal(70), method=Method.INFERENCE4, hours=10)[0]
    assert expected.fits and expected.price_usd is not None

    page.goto(f"{live_server.url}/fr/")
    page.locator(".main-nav").get_by_role("link", name="Calculateur").click()
    page.wait_for_url(f"{live_server.url}/fr/fit/")
    page.get_by_label("Méthode").select_option("inference4")
    page.get_by_label("Heures (facultatif)").fill("10")
    page.get_by_label("Taille du modèle, en milliards de paramètres").fill("70")
    first = page.locator("#fit-table tbody tr").first
    first.wait_for()  # htmx swapped the results in, without a submit
    assert first.locator("th").inner_text() == expected.gpu.name
    cells = first.locator("td").all_inner_texts()
    assert cells[0] == str(expected.gpus) and cells[2] == "Convient"
    total = f"{expected.total_usd:.2f}".replace(".", ",")
    assert cells[5].replace("\u202f", " ").replace(NBSP, " ").endswith(f"{total} $US".replace(NBSP, " "))

    first.get_by_role("link", name="Louer celle-ci").click()
    page.wait_for_url(f"**/fr/trade/{expected.gpu.slug}/?gpus={expected.gpus}&hours=10")
    buy = page.locator("form[action$='/buy/']")
    assert buy.locator("select[name=gpus]").input_value() == str(expected.gpus)
    assert buy.locator("input[name=hours]").input_value() == "10"
