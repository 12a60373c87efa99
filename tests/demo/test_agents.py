"""The simulated host agents of the demo servers (demo.agents): real callers of the heartbeat
service, with a token each, so that `make run` verifies its servers and delivers rentals."""

import uuid
from decimal import Decimal

import pytest

from billing.services import order_place
from demo.agents import demo_agent_enroll, demo_agent_secret
from demo.seed import demo_agents_run
from exchange.models import Rental
from marketplace.celery import app
from sellers.models import AgentToken, Server, ServerAgent, ServerEvent, ServerEventKind
from sellers.services import agent_token_create
from tests.exchange.support import buyer_with, market_set
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_demo_servers_are_enrolled_and_verified_by_their_agents(demo_book):
    servers = list(Server.objects.all())

    assert servers and all(server.agent_verified_at is not None for server in servers)
    assert ServerAgent.objects.filter(agent_version="demo").count() == len(servers)
    assert ServerEvent.objects.filter(kind=ServerEventKind.VERIFIED).count() == len(servers)
    for server in servers:
        assert AgentToken.objects.get(server=server, revoked_at__isnull=True).prefix == \
            demo_agent_secret(server_id=server.pk)[:12]


def test_a_demo_rental_starts_with_the_next_run_of_the_agents(demo_book, ed25519_public_key):
    market_set(True)
    buyer = buyer_with(amount="500", currency="USD")
    placed = order_place(  # the buyer's own order: its first hour is charged at once
        buyer=buyer, gpu_model_id=demo_book["rtx-4090"].pk, gpus=1, max_price_usd=Decimal("5.00"),
        time_in_force="buy_now", ssh_public_key=ed25519_public_key, form_token=uuid.uuid4(),
    )
    rental = Rental.objects.get(bid_id=placed.bid.pk)
    assert (rental.state, rental.paid_through is not None) == ("starting", True)

    assert demo_agents_run() == Server.objects.count()

    rental.refresh_from_db()
    assert (rental.state, rental.username) == ("running", f"evx-{rental.pk}")


def test_a_server_with_a_real_agent_is_left_to_it(demo_book):
    server = Server.objects.order_by("pk").first()
    agent_token_create(seller=server.seller, server_id=server.pk, user=UserFactory())  # the seller's own

    assert demo_agent_enroll(server=server) is None
    assert demo_agents_run() == Server.objects.count() - 1


def test_only_the_demo_app_schedules_its_agents():
    entry = app.conf.beat_schedule["demo-agents-heartbeat"]
    assert (entry["task"], entry["schedule"]) == ("demo.agents_heartbeat", 15.0)
