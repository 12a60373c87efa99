"""A rental's own sshd (issue 22, the login): the agent reports each login's port and the server's
host key; the exchange keeps them, delivers a rental only once it has read the SSH banner on that
port, and gives the buyer the port and a known_hosts line. Every connection goes to 127.0.0.1."""

import json
from dataclasses import replace
from datetime import timedelta

import pytest
from django.utils import timezone

from exchange.api_agent import EXAMPLE_HEARTBEAT
from exchange.models import Offer, Rental
from exchange.services import rental_login_probe
from exchange.ssh_keys import (
    ssh_banner_read,
    ssh_host_key_valid,
    ssh_key_fingerprint,
    ssh_known_hosts_line,
)
from exchange.tasks import rental_login_probe_task
from sellers.models import ServerAgent, ServerEvent, ServerEventKind, ServerHeartbeat
from tests.api_tokens import token_client
from tests.factories import OfferFactory, RentalFactory

from .agents_support import (
    AgentClient,
    BannerListener,
    body_of,
    closed_port,
    enrolled,
    ready,
    report_for,
)
from .support import signed_in

pytestmark = pytest.mark.django_db

URL = "/api/v1/agent/heartbeat"
NBSP = "\u00a0"


@pytest.fixture
def h100(gpu_catalog):
    return gpu_catalog["h100-sxm"]


@pytest.fixture
def host_key(ed25519_public_key):
    """A host key as the agent reports it: `type base64`, with a comment."""
    return ed25519_public_key.replace("buyer@laptop", "root@gpu-01")


@pytest.fixture(autouse=True)
def quick_probe(settings):
    settings.RENTAL_SSH_PROBE_SECONDS = 1


def post(secret, body):
    return AgentClient().post(URL, data=json.dumps(body), content_type="application/json",
                              HTTP_AUTHORIZATION=f"Bearer {secret}", REMOTE_ADDR="198.51.100.4")


def offer_of(server):
    offer = Offer.objects.filter(server=server).first()
    return offer or OfferFactory(server=server, gpus_offered=server.gpu_count)


def paid_starting(server, **fields):
    now = timezone.now()
    return RentalFactory(offer=offer_of(server), gpus=1, state="starting", started_at=now,
                         paid_through=now + timedelta(hours=1), delivered_at=None, username="", **fields)


def heartbeat(secret, server, rental, *, port, host_key=""):
    return post(secret, body_of(replace(report_for(server), logins=(ready(rental, [0], ssh_port=port),),
                                        ssh_host_key=host_key)))


# --- the host key and the port in the heartbeat ----------------------------------------------------

READY = {"rental_id": 1, "username": "evx-1", "state": "ready"}


def test_host_keys_of_the_accepted_types_pass_and_anything_else_does_not(host_key):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric import rsa as rsa_keys

    def line(key) -> str:
        return key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                             serialization.PublicFormat.OpenSSH).decode()

    assert ssh_host_key_valid(host_key)
    assert ssh_host_key_valid(host_key.rsplit(" ", 1)[0])  # no comment
    assert ssh_host_key_valid(line(rsa_keys.generate_private_key(public_exponent=65537, key_size=3072)))
    for curve in (ec.SECP256R1(), ec.SECP384R1(), ec.SECP521R1()):
        assert ssh_host_key_valid(line(ec.generate_private_key(curve)))
    assert ssh_host_key_valid(EXAMPLE_HEARTBEAT["ssh_host_key"])  # the protocol's example
    key_type, blob = host_key.split()[:2]
    for hostile in [
        f"ssh-dss {blob}", f"ssh-rsa {blob}",  # a type the body does not name
        f"{key_type} {blob}\nssh-ed25519 {blob}", f"{key_type} {blob} root\x00", f"{key_type}",
        f"{key_type} not-base64!", f"{key_type} {blob} {'x' * 1000}", f"@cert-authority {key_type} {blob}",
        f"{key_type}  {blob}", f" {key_type} {blob}", f"{key_type} {blob[:-4]}", 41000, None,
    ]:
        assert not ssh_host_key_valid(hostile), hostile


def test_the_known_hosts_line_names_the_port_as_openssh_does(host_key):
    key_type, blob = host_key.split()[:2]
    assert ssh_known_hosts_line(host="gpu1.example.com", port=41003, host_key=host_key) == (
        f"[gpu1.example.com]:41003 {key_type} {blob}")
    assert ssh_known_hosts_line(host="203.0.113.10", port=22, host_key=host_key) == (
        f"203.0.113.10 {key_type} {blob}")
    assert ssh_known_hosts_line(host="2001:db8::1", port=41000, host_key=host_key) == (
        f"[2001:db8::1]:41000 {key_type} {blob}")


def test_the_host_key_is_kept_and_each_change_is_an_event(h100, host_key, ed25519_public_key):
    server, secret = enrolled(h100)
    for key in ("", host_key, host_key, ed25519_public_key):
        assert post(secret, body_of(replace(report_for(server), ssh_host_key=key))).status_code == 200

    assert ServerAgent.objects.get(server=server).ssh_host_key == ed25519_public_key
    changes = ServerEvent.objects.filter(server=server, kind=ServerEventKind.HOST_KEY_CHANGED).order_by("id")
    assert [event.detail for event in changes] == [
        {"before": "", "after": ssh_key_fingerprint(host_key)},
        {"before": ssh_key_fingerprint(host_key), "after": ssh_key_fingerprint(ed25519_public_key)},
    ]
    assert str(ServerEventKind.HOST_KEY_CHANGED.label) == "SSH host key changed"


@pytest.mark.parametrize(("change", "field"), [
    ({"ssh_host_key": "ssh-dss AAAAB3NzaC1kc3MAAACBAP"}, "ssh_host_key"),
    ({"ssh_host_key": "ssh-ed25519 AAAA\nssh-ed25519 AAAA"}, "ssh_host_key"),
    ({"ssh_host_key": "ssh-ed25519 " + "A" * 1000}, "ssh_host_key"),
    ({"ssh_host_key": None}, "ssh_host_key"),
    ({"ssh_host_key": ["ssh-ed25519"]}, "ssh_host_key"),
    ({"logins": [{"rental_id": 1, "username": "evx-1", "state": "ready", "ssh_port": 0}]},
     "logins.0.ssh_port"),
    ({"logins": [{"rental_id": 1, "username": "evx-1", "state": "ready", "ssh_port": 65536}]},
     "logins.0.ssh_port"),
    ({"logins": [{"rental_id": 1, "username": "evx-1", "state": "ready", "ssh_port": "41000"}]},
     "logins.0.ssh_port"),
    ({"logins": [{"rental_id": 1, "username": "evx-1", "state": "ready", "ssh_port": True}]},
     "logins.0.ssh_port"),
    ({"logins": [{"rental_id": 1, "username": "evx-1", "state": "ready", "ssh_port": 41000.0}]},
     "logins.0.ssh_port"),
    ({"logins": [READY | {"service_ports": {"jupyter": 41001}}]}, "logins.0.service_ports.jupyter"),
    ({"logins": [READY | {"service_ports": {"8888": 0}}]}, "logins.0.service_ports.8888"),
    ({"logins": [READY | {"service_ports": {"70000": 41001}}]}, "logins.0.service_ports.70000"),
    ({"logins": [READY | {"service_ports": {"8888": "41001"}}]}, "logins.0.service_ports.8888"),
    ({"logins": [READY | {"service_ports": {str(port): 41001 for port in range(8000, 8009)}}]},
     "logins.0.service_ports"),
])
def test_a_hostile_host_key_or_port_is_422_with_its_field_and_changes_nothing(h100, change, field):
    server, secret = enrolled(h100)
    rental = paid_starting(server)
    post(secret, body_of(report_for(server)))
    agent_before = list(ServerAgent.objects.filter(server=server).values())
    events_before = ServerEvent.objects.count()
    body = {**body_of(report_for(server)), **change}
    if field.startswith("logins"):
        body["logins"][0] |= {"rental_id": rental.pk, "username": f"evx-{rental.pk}", "gpu_indices": [0]}

    response = post(secret, body)

    assert response.status_code == 422
    problem = response.json()
    assert problem["code"] == "invalid_input"
    assert field in [error["field"] for error in problem["errors"]]
    assert list(ServerAgent.objects.filter(server=server).values()) == agent_before
    assert ServerEvent.objects.count() == events_before
    rental.refresh_from_db()
    assert (rental.ssh_port, rental.service_ports, rental.delivered_at) == (None, {}, None)
    [refused] = ServerHeartbeat.objects.filter(server=server, accepted=False).values_list("problem",
                                                                                           flat=True)
    assert refused == f"invalid_input:{field}"


def test_the_service_refuses_a_host_key_it_is_given_in_french(h100):
    from django.utils import translation

    from exchange.exceptions import HeartbeatInvalid
    from exchange.services import heartbeat_report_check

    server, _secret = enrolled(h100)
    with translation.override("fr"), pytest.raises(HeartbeatInvalid) as refused:
        heartbeat_report_check(report=replace(report_for(server), ssh_host_key="ssh-dss AAAA"))
    [error] = refused.value.field_errors
    assert error["field"] == "ssh_host_key"
    assert error["detail"].startswith(
        f"Envoyez la clé d’hôte sur une ligne de son fichier de clé publique{NBSP}: ssh-ed25519, ")


def test_an_unchanged_heartbeat_with_a_host_key_and_ports_is_two_statements(
    h100, host_key, django_assert_max_num_queries
):
    server, secret = enrolled(h100, host="127.0.0.1")
    waiting, delivered = paid_starting(server), paid_starting(server)
    Rental.objects.filter(pk=delivered.pk).update(delivered_at=timezone.now(), state="running")
    body = body_of(replace(report_for(server), ssh_host_key=host_key, logins=(
        ready(waiting, [0], ssh_port=41000),
        ready(delivered, [1], ssh_port=41001, service_ports={"8888": 41002}))))
    assert post(secret, body).status_code == 200  # the ports recorded, the host key kept

    with django_assert_max_num_queries(2):
        assert post(secret, body).status_code == 200

    ports = Rental.objects.filter(server=server).order_by("id").values_list("ssh_port", "service_ports")
    assert list(ports) == [(41000, {}), (41001, {"8888": 41002})]


# --- delivery once the banner is read ---------------------------------------------------------------


def test_a_login_with_its_own_sshd_is_delivered_once_its_banner_is_read(
    h100, host_key, outbox_sent, django_capture_on_commit_callbacks
):
    server, secret = enrolled(h100, host="127.0.0.1", ssh_port=22)
    rental = paid_starting(server)
    with BannerListener() as sshd:
        with django_capture_on_commit_callbacks() as queued:
            assert heartbeat(secret, server, rental, port=sshd.port, host_key=host_key).status_code == 200
        rental.refresh_from_db()
        # The heartbeat answered without reaching the port: the probe waits for the commit.
        assert (rental.ssh_port, rental.state, rental.delivered_at, sshd.accepted) == (
            sshd.port, "starting", None, 0)
        assert len(queued) == 1

        queued[0]()

    rental.refresh_from_db()
    assert (rental.state, rental.username, sshd.accepted) == ("running", f"evx-{rental.pk}", 1)
    [email] = outbox_sent()
    assert f"ssh -p {sshd.port} evx-{rental.pk}@127.0.0.1" in email.body


@pytest.mark.parametrize("greeting", [
    b"HTTP/1.1 400 Bad Request\r\n", b"+OK redis\r\n", b"SSH-2.0-OpenSSH_9.2", b"\x00\xff\r\n", b"",
    b"SSH-1.5-old\r\n",
])
def test_a_port_that_answers_no_ssh_banner_delivers_nothing(h100, greeting, outbox_sent):
    server, _secret = enrolled(h100, host="127.0.0.1")
    with BannerListener(greeting) as listener:
        rental = paid_starting(server, ssh_port=listener.port)

        assert rental_login_probe(rental_id=rental.pk) is None

    rental.refresh_from_db()
    assert (rental.state, rental.delivered_at, listener.accepted) == ("starting", None, 1)
    assert outbox_sent() == []


def test_a_closed_or_silent_port_delivers_nothing_within_the_timeout(h100, settings):
    server, _secret = enrolled(h100, host="127.0.0.1")
    closed = paid_starting(server, ssh_port=closed_port())
    assert rental_login_probe(rental_id=closed.pk) is None
    with BannerListener(silent=3) as silent:
        waiting = paid_starting(server, ssh_port=silent.port)
        started = timezone.now()
        assert rental_login_probe(rental_id=waiting.pk) is None
        assert timezone.now() - started < timedelta(seconds=2)
    assert list(Rental.objects.filter(server=server).values_list("delivered_at", flat=True)) == [None, None]


def test_the_probe_task_is_safe_to_run_twice_and_skips_rentals_not_waiting(h100, outbox_sent):
    server, _secret = enrolled(h100, host="127.0.0.1")
    with BannerListener() as sshd:
        rental = paid_starting(server, ssh_port=sshd.port)
        no_port = paid_starting(server)

        assert rental_login_probe_task.apply(args=[rental.pk]).get() is True
        assert rental_login_probe_task.apply(args=[rental.pk]).get() is False
        assert rental_login_probe_task.apply(args=[no_port.pk]).get() is False
        assert rental_login_probe_task.apply(args=[10**12]).get() is False

    assert sshd.accepted == 1
    no_port.refresh_from_db()
    assert no_port.delivered_at is None
    assert len(outbox_sent()) == 1


def test_an_older_agent_without_ports_is_delivered_at_once_on_the_servers_port(h100, outbox_sent):
    server, secret = enrolled(h100, host="gpu-7.lisbon.example", ssh_port=2222)
    rental = paid_starting(server)

    assert heartbeat(secret, server, rental, port=None).status_code == 200

    rental.refresh_from_db()
    assert (rental.state, rental.ssh_port) == ("running", None)
    assert f"ssh -p 2222 evx-{rental.pk}@gpu-7.lisbon.example" in outbox_sent()[0].body


def test_the_banner_is_the_first_line_of_at_most_255_characters():
    def read(port):
        return ssh_banner_read(host="127.0.0.1", port=port, timeout=1, public_only=False)

    with BannerListener(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\nrest of the key exchange") as sshd:
        assert read(sshd.port) == "SSH-2.0-OpenSSH_9.2p1 Debian-2"
    with BannerListener(b"SSH-1.99-OpenSSH_3.9\n") as sshd:
        assert read(sshd.port) == "SSH-1.99-OpenSSH_3.9"
    with BannerListener(b"SSH-2.0-" + b"x" * 300 + b"\r\n") as sshd:
        assert read(sshd.port) is None
    assert read(closed_port()) is None


def test_in_production_the_probe_never_reaches_a_loopback_or_private_address(h100, settings):
    settings.RENTAL_SSH_PROBE_PRIVATE_ADDRESSES = False
    server, _secret = enrolled(h100, host="127.0.0.1")
    with BannerListener() as sshd:
        rental = paid_starting(server, ssh_port=sshd.port)

        assert rental_login_probe(rental_id=rental.pk) is None
        assert ssh_banner_read(host="localhost", port=sshd.port, timeout=1) is None
        assert ssh_banner_read(host="10.0.0.1", port=sshd.port, timeout=1) is None

    assert sshd.accepted == 0
    rental.refresh_from_db()
    assert rental.delivered_at is None


# --- what the buyer sees ------------------------------------------------------------------------------


def running_on(server, **fields):
    now = timezone.now()
    return RentalFactory(offer=offer_of(server), gpus=1, state="running", started_at=now,
                         paid_through=now + timedelta(hours=1), delivered_at=now, **fields)


def test_the_rental_page_shows_its_own_port_and_the_known_hosts_line(
    h100, host_key, django_assert_max_num_queries
):
    server, secret = enrolled(h100, host="gpu1.example.com", ssh_port=22)
    post(secret, body_of(replace(report_for(server), ssh_host_key=host_key)))
    rental = running_on(server, ssh_port=41003, username="evx-5")
    client = signed_in(rental.buyer)

    with django_assert_max_num_queries(15):
        html = client.get(f"/fr/account/rentals/{rental.pk}/").content.decode()

    key_type, blob = host_key.split()[:2]
    assert 'data-testid="ssh-command">ssh -p 41003 evx-5@gpu1.example.com</pre>' in html
    assert '<dd data-testid="ssh-port">41003</dd>' in html
    assert f'data-testid="known-hosts">[gpu1.example.com]:41003 {key_type} {blob}</pre>' in html
    assert ("Ajoutez cette ligne à ~/.ssh/known_hosts pour vérifier que vous atteignez votre "
            f"location{NBSP}: ssh refusera alors tout autre serveur à sa place.") in html


def test_a_container_rental_s_page_and_api_give_the_host_ports_of_its_template_s_other_ports(h100):
    server, _secret = enrolled(h100, host="gpu1.example.com", ssh_port=22)
    rental = running_on(server, ssh_port=41003, username="evx-9",
                        service_ports={"8888": 41004, "6006": 41005})

    html = signed_in(rental.buyer).get(f"/fr/account/rentals/{rental.pk}/").content.decode()

    # By the container's port, as written (never grouped like a number).
    assert html.index("Port 6006 du conteneur") < html.index("Port 8888 du conteneur")
    assert '<dd data-testid="service-port-8888">gpu1.example.com:41004</dd>' in html
    assert '<dd data-testid="service-port-6006">gpu1.example.com:41005</dd>' in html
    connection = token_client(rental.buyer, "read").get(f"/api/v1/rentals/{rental.pk}").json()["connection"]
    assert connection["service_ports"] == {"6006": 41005, "8888": 41004}


def test_without_a_host_key_or_an_own_port_the_page_shows_the_servers_port_and_no_line(h100):
    server, _secret = enrolled(h100, host="gpu1.example.com", ssh_port=2222)
    rental = running_on(server, username="evx-6")

    html = signed_in(rental.buyer).get(f"/pt/account/rentals/{rental.pk}/").content.decode()

    assert 'data-testid="ssh-command">ssh -p 2222 evx-6@gpu1.example.com</pre>' in html
    assert '<dd data-testid="ssh-port">2222</dd>' in html
    assert 'data-testid="known-hosts"' not in html


def test_the_api_gives_the_rentals_port_and_known_hosts_line(h100, host_key):
    server, secret = enrolled(h100, host="gpu1.example.com", ssh_port=22)
    post(secret, body_of(replace(report_for(server), ssh_host_key=host_key)))
    rental = running_on(server, ssh_port=41003, username="evx-7")
    old = running_on(enrolled(h100, host="gpu2.example.com", ssh_port=2222)[0], buyer=rental.buyer,
                     username="evx-8")
    api = token_client(rental.buyer, "read")

    connections = {item["id"]: item["connection"] for item in api.get("/api/v1/rentals").json()["items"]}

    key_type, blob = host_key.split()[:2]
    assert connections == {
        rental.pk: {"host": "gpu1.example.com", "port": 41003, "username": "evx-7",
                    "ssh_command": "ssh -p 41003 evx-7@gpu1.example.com",
                    "known_hosts": f"[gpu1.example.com]:41003 {key_type} {blob}", "service_ports": {}},
        old.pk: {"host": "gpu2.example.com", "port": 2222, "username": "evx-8",
                 "ssh_command": "ssh -p 2222 evx-8@gpu2.example.com", "known_hosts": None,
                 "service_ports": {}},
    }
    assert api.get(f"/api/v1/rentals/{rental.pk}").json()["connection"] == connections[rental.pk]
