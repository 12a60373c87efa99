"""A Portuguese buyer's rental page while the server's agent makes the login: "starting" with the
waiting text and no connection details, then, once the agent has reported the login ready, the
page (which polls while the rental starts) shows the ssh command of the agent's user, without a
reload by the buyer."""

import re
import uuid
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.utils import translation
from django.utils.translation import pgettext
from playwright.sync_api import expect

from billing.services import fx_rates_load, order_place
from exchange.models import Rental, RentalState, TimeInForce
from exchange.services import agent_heartbeat_receive
from exchange.services.agents import GpuReport, HeartbeatReport, LoginReport
from sellers.services import agent_token_create
from tests.browser.support import PASSWORD
from tests.exchange.support import buyer_with, market_set
from tests.factories import OfferFactory, ServerFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

H100 = "NVIDIA H100 80GB HBM3"


def _heartbeat(secret: str, *, gpus: int, ready: list[Rental] = ()) -> list:
    report = HeartbeatReport(
        agent_version="1.0.0", sent_at=datetime.now(UTC),
        gpus=tuple(GpuReport(index=index, name=H100, memory_total_mib=81559, ecc_uncorrected=0)
                   for index in range(gpus)),
        logins=tuple(LoginReport(rental_id=rental.pk, username=f"evx-{rental.pk}", state="ready",
                                 gpu_indices=(0,)) for rental in ready),
    )
    return agent_heartbeat_receive(secret=secret, report=report, address="127.0.0.1").logins


def test_the_connection_details_appear_once_the_agent_reported_the_login_ready(
    live_server, gpu_catalog, page, ed25519_public_key
):
    fx_rates_load(rates={"EUR": Decimal("0.92")}, valid_from=datetime(2026, 1, 1, tzinfo=UTC), source="test")
    market_set(True)
    server = ServerFactory(gpu_model=gpu_catalog["h100-sxm"], gpu_count=2, host="gpu7.example.test",
                           ssh_port=2207, agent_verified_at=None)
    OfferFactory(server=server, gpus_offered=2, price_usd=Decimal("2.50"))
    secret = agent_token_create(seller=server.seller, server_id=server.pk, user=UserFactory()).secret
    _heartbeat(secret, gpus=2)  # enrolled and verified: the offer is in the book
    buyer = buyer_with("100")
    buyer.profile.preferred_language = "pt"
    buyer.profile.save()
    rental = order_place(
        buyer=buyer, gpu_model_id=server.gpu_model_id, gpus=1, max_price_usd=Decimal("3.00"),
        time_in_force=TimeInForce.BUY_NOW, ssh_public_key=ed25519_public_key, form_token=uuid.uuid4(),
    ).rental
    assert rental is not None and rental.state == RentalState.STARTING

    page.goto(f"{live_server.url}/pt/account/login/")
    page.locator("input[name=login]").fill(buyer.email)
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("main form button[type=submit]").last.click()
    page.wait_for_url(f"{live_server.url}/pt/account/")
    page.goto(f"{live_server.url}/pt/account/rentals/{rental.pk}/")
    with translation.override("pt"):
        starting, running = pgettext("rental status", "Starting"), pgettext("rental status", "Running")
    expect(page.get_by_test_id("rental-state")).to_have_text(starting)
    expect(page.get_by_test_id("rental-starting")).to_contain_text("O servidor está a criar o seu acesso")
    expect(page.get_by_test_id("ssh-command")).to_have_count(0)
    assert "gpu7.example.test" not in page.content()

    desired = _heartbeat(secret, gpus=2)  # the agent is told to make the login...
    assert [login.rental_id for login in desired] == [rental.pk]
    _heartbeat(secret, gpus=2, ready=[rental])  # ...and reports it ready
    rental.refresh_from_db()
    assert rental.state == RentalState.RUNNING

    # The page asks again every 10 s while the rental starts: no reload by the buyer.
    command = page.get_by_test_id("ssh-command")
    expect(command).to_have_text(f"ssh -p 2207 evx-{rental.pk}@gpu7.example.test", timeout=20_000)
    expect(page.get_by_test_id("rental-state")).to_have_text(re.compile(rf"^{running}"))
