"""A French buyer's rental on a server whose agent gives each rental its own sshd: the agent
reports the login ready on port 41xxx with the server's host key; the exchange reads the SSH banner
there (a listener on 127.0.0.1 standing in for the rental's sshd) and delivers; the rental page
shows the rental's port, never the host's, and the known_hosts line to copy."""

import uuid
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from playwright.sync_api import expect

from billing.services import order_place
from exchange.models import RentalState, TimeInForce
from exchange.services import agent_heartbeat_receive
from exchange.services.agents import GpuReport, HeartbeatReport, LoginReport
from sellers.services import agent_token_create
from tests.browser.support import PASSWORD, french_buyer_with_balance, new_page
from tests.exchange.agents_support import BannerListener
from tests.exchange.support import market_set
from tests.factories import OfferFactory, ServerFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

H100 = "NVIDIA H100 80GB HBM3"
NBSP = "\u00a0"


def _heartbeat(secret: str, *, rental=None, port=None, host_key: str = "", service_ports=None) -> None:
    report = HeartbeatReport(
        agent_version="1.1.0", sent_at=datetime.now(UTC), ssh_host_key=host_key,
        gpus=(GpuReport(index=0, name=H100, memory_total_mib=81559, ecc_uncorrected=0),),
        logins=() if rental is None else (LoginReport(rental_id=rental.pk, username=f"evx-{rental.pk}",
                                                      state="ready", gpu_indices=(0,), ssh_port=port,
                                                      service_ports=service_ports or {}),),
    )
    agent_heartbeat_receive(secret=secret, report=report, address="127.0.0.1")


def test_the_rental_page_gives_the_rentals_own_port_and_its_known_hosts_line(
    live_server, gpu_catalog, browser, ed25519_public_key, settings
):
    settings.RENTAL_SSH_PROBE_SECONDS = 2
    market_set(True)
    server = ServerFactory(gpu_model=gpu_catalog["h100-sxm"], gpu_count=1, host="127.0.0.1", ssh_port=22,
                           agent_verified_at=None)
    OfferFactory(server=server, gpus_offered=1, price_usd=Decimal("2.50"))
    secret = agent_token_create(seller=server.seller, server_id=server.pk, user=UserFactory()).secret
    host_key = ed25519_public_key.replace("buyer@laptop", "root@gpu-01")
    _heartbeat(secret, host_key=host_key)  # enrolled and verified: the offer is in the book
    buyer = french_buyer_with_balance()
    rental = order_place(
        buyer=buyer, gpu_model_id=server.gpu_model_id, gpus=1, max_price_usd=Decimal("3.00"),
        time_in_force=TimeInForce.BUY_NOW, ssh_public_key=ed25519_public_key, form_token=uuid.uuid4(),
    ).rental
    assert rental is not None and rental.state == RentalState.STARTING

    with BannerListener() as sshd:
        # Ready (the banner is read), with its template's Jupyter port published on the server.
        _heartbeat(secret, rental=rental, port=sshd.port, host_key=host_key, service_ports={"8888": 41999})
    rental.refresh_from_db()
    assert (rental.state, rental.ssh_port, sshd.accepted) == (RentalState.RUNNING, sshd.port, 1)

    page = new_page(browser, "fr")
    page.goto(f"{live_server.url}/fr/account/login/")
    page.locator("input[name=login]").fill(buyer.email)
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("main form button[type=submit]").last.click()
    page.wait_for_url(f"{live_server.url}/fr/account/")
    page.goto(f"{live_server.url}/fr/account/rentals/{rental.pk}/")

    key_type, blob = host_key.split()[:2]
    expect(page.get_by_test_id("ssh-command")).to_have_text(f"ssh -p {sshd.port} evx-{rental.pk}@127.0.0.1")
    expect(page.get_by_test_id("ssh-port")).to_have_text(str(sshd.port))
    expect(page.get_by_role("heading", name="Clé d’hôte")).to_be_visible()
    expect(page.get_by_text(
        f"Ajoutez cette ligne à ~/.ssh/known_hosts pour vérifier que vous atteignez votre location{NBSP}: "
        "ssh refusera alors tout autre serveur à sa place."
    )).to_be_visible()
    expect(page.get_by_test_id("known-hosts")).to_have_text(f"[127.0.0.1]:{sshd.port} {key_type} {blob}")
    expect(page.get_by_text("Port 8888 du conteneur")).to_be_visible()
    expect(page.get_by_test_id("service-port-8888")).to_have_text("127.0.0.1:41999")
