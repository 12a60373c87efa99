"""A French buyer chooses what their container runs (issue 22): the book names the templates each
container server holds, the buy form offers the published ones with the operators' default chosen,
the confirmation names the one chosen and quotes a server holding it, and the rental page says
which template it runs."""

import re
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from exchange.models import Market, Rental
from sellers.models import ServerTemplate
from tests.browser.support import buyer_sign_in, french, french_buyer_with_balance
from tests.factories import ContainerTemplateFactory, GpuModelFactory, OfferFactory, ServerFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NBSP = "\u00a0"


@pytest.fixture
def book():
    gpu = GpuModelFactory(slug="h200", name="H200")
    Market.objects.update_or_create(pk=1, defaults={"is_open": True})
    pytorch = ContainerTemplateFactory(slug="pytorch", name_fr="PyTorch avec CUDA", is_default=True)
    jupyter = ContainerTemplateFactory(slug="jupyter", name_fr="Jupyter Lab")
    servers = {}
    for price, template in (("2.00", pytorch), ("2.50", jupyter)):
        server = ServerFactory(gpu_model=gpu, isolation_level="container")
        ServerTemplate.objects.create(server=server, template=template, since=timezone.now())
        OfferFactory(server=server, gpus_offered=8, price_usd=Decimal(price))
        servers[template.slug] = server
    return servers


def test_a_buyer_chooses_a_template_and_the_rental_runs_it(live_server, book, page, ed25519_public_key):
    buyer = french_buyer_with_balance()
    base = live_server.url
    buyer_sign_in(page, base, buyer)

    page.goto(f"{base}/fr/trade/h200/")
    expect(page.locator("#asks").get_by_test_id("ask-templates")).to_have_text(
        [f"modèles{NBSP}: PyTorch avec CUDA", f"modèles{NBSP}: Jupyter Lab"]
    )
    buy = page.locator("form[action$='/buy/']")
    chosen = buy.get_by_label("Modèle de conteneur")
    expect(chosen).to_have_value("pytorch")
    chosen.select_option(label="Jupyter Lab")
    buy.locator("textarea[name=ssh_public_key]").fill(ed25519_public_key)
    buy.get_by_role("button", name=french("Buy now")).click()

    expect(page.get_by_test_id("confirm-template")).to_have_text("Jupyter Lab")
    expect(page.locator("main")).to_contain_text(f"2,50{NBSP}$US")  # the server holding Jupyter
    page.get_by_test_id("confirm-order").click()
    page.wait_for_url(re.compile(r".*/fr/account/rentals/\d+/$"))
    expect(page.get_by_test_id("rental-template")).to_have_text("Jupyter Lab")
    rental = Rental.objects.get(buyer=buyer)
    assert (rental.server_id, rental.container_template.slug) == (book["jupyter"].pk, "jupyter")
