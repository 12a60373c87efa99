"""The server page of the seller portal: the level the server is sold at, and its agent's latest
isolation report as a checklist with the command that fixes each missing fact."""

import pytest

from exchange.services import agent_heartbeat_receive
from sellers.isolation import FACTS
from sellers.models import ServerIsolationReport
from sellers.selectors import server_isolation_checklist
from tests.exchange.agents_support import enrolled, isolation_of, report_for
from tests.factories import SellerFactory
from tests.sellers.support import member, url

pytestmark = pytest.mark.django_db


@pytest.fixture
def h100(gpu_catalog):
    return gpu_catalog["h100-sxm"]


def reported(server, secret, **facts):
    agent_heartbeat_receive(secret=secret, report=report_for(server, isolation=isolation_of(server, **facts)),
                            address="192.0.2.7")


def test_the_checklist_lists_every_fact_and_the_command_for_each_missing_one(h100):
    server, secret = enrolled(h100)
    reported(server, secret, driver_keeps_permissions=False, processes_hidden=False)

    checklist = server_isolation_checklist(seller=server.seller, server_id=server.pk)

    assert [(fact.name, fact.holds, fact.command) for fact in checklist.facts] == [
        (name, name not in ("driver_keeps_permissions", "processes_hidden"), {
            "driver_keeps_permissions": "sudo everx-agent harden --apply",
            "processes_hidden": "sudo everx-agent harden",
        }.get(name, ""))
        for name in FACTS
    ]
    assert checklist.received_at == ServerIsolationReport.objects.get(server=server).received_at


def test_mig_holds_when_it_is_off(h100):
    server, secret = enrolled(h100)
    reported(server, secret, mig_enabled=True)

    checklist = server_isolation_checklist(seller=server.seller, server_id=server.pk)
    facts = {fact.name: fact for fact in checklist.facts}

    assert (facts["mig_enabled"].holds, facts["mig_enabled"].command) == (False, "sudo nvidia-smi -mig 0")


def test_another_sellers_server_or_an_agent_without_a_report_has_no_checklist(h100):
    server, secret = enrolled(h100)
    assert server_isolation_checklist(seller=server.seller, server_id=server.pk) is None
    reported(server, secret)

    assert server_isolation_checklist(seller=SellerFactory(), server_id=server.pk) is None
    # The report is gone from the heartbeats (an older agent again): no checklist of an old report.
    agent_heartbeat_receive(secret=secret, report=report_for(server), address="192.0.2.7")
    assert server_isolation_checklist(seller=server.seller, server_id=server.pk) is None


def test_the_server_page_shows_the_level_and_the_checklist_in_portuguese(client, h100):
    server, secret = enrolled(h100)
    client.force_login(member(server.seller))
    reported(server, secret, host_login_closed=False)

    html = client.get(url("sellers:portal-server", "pt", server_id=server.pk)).content.decode()

    assert "Vendido como: Servidor inteiro." in html
    assert 'data-testid="isolation-command-host_login_closed">sudo everx-agent harden --apply</code>' in html
    assert 'data-testid="isolation-fact-devices_locked" data-holds="yes"' in html
    assert 'data-testid="isolation-command-devices_locked"' not in html


def test_the_server_page_without_a_report_says_so(client, h100):
    server, _secret = enrolled(h100)
    client.force_login(member(server.seller))

    html = client.get(url("sellers:portal-server", server_id=server.pk)).content.decode()

    assert "Sold as: Whole server." in html
    assert "has sent no isolation report" in html


def test_the_server_page_runs_the_same_queries_with_a_report_or_without(
    client, h100, django_assert_max_num_queries
):
    server, secret = enrolled(h100)
    client.force_login(member(server.seller))
    page = url("sellers:portal-server", server_id=server.pk)
    with django_assert_max_num_queries(30) as without:
        assert client.get(page).status_code == 200
    for _ in range(3):
        reported(server, secret, tmp_private=False)
        reported(server, secret)
    assert ServerIsolationReport.objects.filter(server=server).count() == 6

    with django_assert_max_num_queries(len(without.captured_queries)):
        assert "isolation-fact-tmp_private" in client.get(page).content.decode()
