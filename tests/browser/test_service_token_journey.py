"""A French buyer's container rental whose template is Jupyter (issue 22): once its agent reports
it ready, with Jupyter's port published on the server, the rental page offers the rental's token;
the buyer shows it, copies it, and back on the rental page it is no longer there, only where to
read it over SSH."""

import uuid
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from billing.services import order_place
from exchange.models import Rental, RentalState, TimeInForce
from exchange.services import agent_heartbeat_receive
from exchange.services.agents import GpuReport, HeartbeatReport, LoginReport
from sellers.models import Server, ServerTemplate
from sellers.services import agent_token_create
from tests.browser.support import buyer_sign_in, french, french_buyer_with_balance
from tests.exchange.support import market_set
from tests.factories import ContainerTemplateFactory, OfferFactory, ServerFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

H100 = "NVIDIA H100 80GB HBM3"
NBSP = "\u00a0"


def _heartbeat(secret: str, *, rental=None) -> None:
    """The server's agent, from a version that publishes no sshd of the rental's own (delivered at
    once on the server's port), with the container's Jupyter port on 41999."""
    report = HeartbeatReport(
        agent_version="1.2.0", sent_at=datetime.now(UTC),
        gpus=(GpuReport(index=0, uuid="GPU-3f2c8a51-7d4e-1b9a-c0d2-5e6f7a8b9c01", name=H100,
                        memory_total_mib=81559, ecc_uncorrected=0),),
        logins=() if rental is None else (LoginReport(rental_id=rental.pk, username=f"evx-{rental.pk}",
                                                      state="ready", gpu_indices=(0,),
                                                      service_ports={"8888": 41999}),),
    )
    agent_heartbeat_receive(secret=secret, report=report, address="127.0.0.1")


def test_the_buyer_sees_the_jupyter_token_once(live_server, gpu_catalog, page, ed25519_public_key):
    market_set(True)
    jupyter = ContainerTemplateFactory(slug="jupyter", name_fr="JupyterLab avec PyTorch", ports=[22, 8888],
                                       token_env="JUPYTER_TOKEN", is_default=True)
    server = ServerFactory(gpu_model=gpu_catalog["h100-sxm"], gpu_count=1, host="gpu1.example.com",
                           agent_verified_at=None)
    secret = agent_token_create(seller=server.seller, server_id=server.pk, user=UserFactory()).secret
    _heartbeat(secret)  # enrolled and verified
    Server.objects.filter(pk=server.pk).update(isolation_level="container")  # as its report would say
    ServerTemplate.objects.create(server=server, template=jupyter, since=timezone.now())
    OfferFactory(server=server, gpus_offered=1, price_usd=Decimal("2.50"))
    buyer = french_buyer_with_balance()
    rental = order_place(
        buyer=buyer, gpu_model_id=server.gpu_model_id, gpus=1, max_price_usd=Decimal("3.00"),
        time_in_force=TimeInForce.BUY_NOW, ssh_public_key=ed25519_public_key, form_token=uuid.uuid4(),
        container_template=jupyter,
    ).rental
    _heartbeat(secret, rental=rental)
    rental = Rental.objects.get(pk=rental.pk)
    assert (rental.state, rental.isolation_level) == (RentalState.RUNNING, "container")

    base = live_server.url
    buyer_sign_in(page, base, buyer)
    page.goto(f"{base}/fr/account/rentals/{rental.pk}/")
    expect(page.get_by_test_id("service-port-8888")).to_have_text("gpu1.example.com:41999")
    expect(page.get_by_role("heading", name="Jeton des services")).to_be_visible()
    expect(page.get_by_text(f"Il n'est affiché qu'une fois{NBSP}: gardez-le")).to_be_visible()
    page.get_by_test_id("token-reveal").click()

    expect(page.get_by_role("heading", name="Jeton des services")).to_be_visible()
    expect(page.get_by_text(f"Copiez-le maintenant{NBSP}: il ne sera plus affiché.")).to_be_visible()
    expect(page.get_by_test_id("service-token")).to_have_text(rental.service_token)
    expect(page.get_by_text("dans la variable JUPYTER_TOKEN et dans le fichier /etc/everx/service-token"))\
        .to_be_visible()
    page.get_by_role("link", name=french("Back to the rental")).click()

    page.wait_for_url(f"{base}/fr/account/rentals/{rental.pk}/")
    expect(page.get_by_test_id("token-shown")).to_contain_text(
        f"Vous l'avez perdu{NBSP}? Connectez-vous en SSH et lisez-le dans /etc/everx/service-token.")
    expect(page.get_by_test_id("token-reveal")).to_have_count(0)
    expect(page.locator("main")).not_to_contain_text(rental.service_token)
