"""POST /api/v1/agent/heartbeat (docs/agent.md): the agent token's own authentication, problem
details for every refusal (recorded on the server when it names one), the desired state, and a
rate limit per agent token rather than per address."""

import json
from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from accounts.services import api_token_create
from sellers.models import ServerAgent, ServerHeartbeat
from sellers.services import agent_token_revoke
from tests.factories import OfferFactory, RentalFactory, UserFactory

from .agents_support import AgentClient, body_of, enrolled, gpus_of, isolation_of, report_for

pytestmark = pytest.mark.django_db

URL = "/api/v1/agent/heartbeat"


def post(secret, body, **headers):
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    if secret is not None:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {secret}"
    headers.setdefault("REMOTE_ADDR", "198.51.100.4")
    return AgentClient().post(URL, data=data, content_type="application/json", **headers)


def within_one_window():
    """Now, moved to the middle of its minute: a rate-limit test's requests share one window."""
    return timezone.now().replace(second=20, microsecond=0)


@pytest.fixture
def h100(gpu_catalog):
    return gpu_catalog["h100-sxm"]


def refusals(server) -> list[str]:
    refused = ServerHeartbeat.objects.filter(server=server, accepted=False)
    return list(refused.values_list("problem", flat=True))


def test_a_heartbeat_is_answered_with_the_desired_state(h100, ed25519_public_key):
    server, secret = enrolled(h100)
    now = timezone.now()
    rental = RentalFactory(offer=OfferFactory(server=server), gpus=2, state="starting", started_at=now,
                           paid_through=now + timedelta(hours=1), delivered_at=None, username="",
                           ssh_public_key=ed25519_public_key)

    response = post(secret, body_of(report_for(server, logins=[(rental, [0, 1])])))

    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json; charset=utf-8"
    answer = response.json()
    assert answer.pop("server_time").endswith("Z")
    assert answer == {
        "server_id": server.pk, "heartbeat_seconds": 30, "remove_home": False,
        "logins": [{"rental_id": rental.pk, "username": f"evx-{rental.pk}",
                    "ssh_public_key": ed25519_public_key, "gpu_indices": [0, 1],
                    "gpu_uuids": [f"GPU-{server.pk}-0", f"GPU-{server.pk}-1"], "isolation": "whole",
                    "limits": None, "template": None, "service_token": ""}],
        "templates": [],
    }
    rental.refresh_from_db()
    assert rental.state == "running"
    heartbeat = ServerHeartbeat.objects.get(server=server)
    assert (heartbeat.accepted, heartbeat.address, heartbeat.logins_ready) == (True, "198.51.100.4", 1)


def test_a_login_s_gpus_are_named_by_index_alone_when_the_report_lacks_a_uuid(h100, ed25519_public_key):
    server, secret = enrolled(h100)
    now = timezone.now()
    RentalFactory(offer=OfferFactory(server=server), gpus=2, state="starting", started_at=now,
                  paid_through=now + timedelta(hours=1), delivered_at=None, username="",
                  ssh_public_key=ed25519_public_key)
    gpus = [replace(gpu, uuid="") if gpu.index == 1 else gpu for gpu in gpus_of(server)]

    [login] = post(secret, body_of(report_for(server, gpus=tuple(gpus)))).json()["logins"]

    assert (login["gpu_indices"], login["gpu_uuids"]) == ([0, 1], [])


def test_the_settings_reach_the_answer(h100, settings):
    settings.AGENT_HEARTBEAT_SECONDS, settings.AGENT_REMOVE_HOME = 15, True
    server, secret = enrolled(h100)

    answer = post(secret, body_of(report_for(server))).json()

    assert (answer["heartbeat_seconds"], answer["remove_home"]) == (15, True)


def assert_problem(response, status, code):
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json; charset=utf-8"
    problem = response.json()
    assert (problem["status"], problem["code"]) == (status, code)
    assert problem["detail"]
    return problem


def test_no_token_or_a_users_api_token_is_401(h100):
    server, _secret = enrolled(h100)
    _token, user_secret = api_token_create(user=UserFactory(), name="cli", scopes=["read", "trade"])
    body = body_of(report_for(server))

    for secret in (None, user_secret, "evxa_" + "z" * 40):
        response = post(secret, body)
        assert_problem(response, 401, "token_invalid")
        assert response["WWW-Authenticate"] == "Bearer"
    assert ServerHeartbeat.objects.count() == 0
    assert not ServerAgent.objects.exists()


def test_a_revoked_token_is_401_and_recorded(h100):
    server, secret = enrolled(h100)
    agent_token_revoke(seller=server.seller, server_id=server.pk)

    assert_problem(post(secret, body_of(report_for(server))), 401, "token_invalid")
    assert_problem(post(secret, "{not json"), 400, "body_not_json")  # refused before any router

    assert refusals(server) == ["token_revoked"]


def test_a_retired_server_is_403_even_with_a_body_it_cannot_read(h100):
    server, secret = enrolled(h100)
    type(server).objects.filter(pk=server.pk).update(status="retired")

    assert_problem(post(secret, body_of(report_for(server))), 403, "server_retired")
    assert_problem(post(secret, {"agent_version": 1}), 403, "server_retired")

    assert refusals(server) == ["server_retired", "server_retired"]
    assert not ServerAgent.objects.exists()


@pytest.mark.parametrize(("change", "field"), [
    ({"gpus": [{"index": "0", "name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559}]}, "gpus.0.index"),
    ({"gpus": [{"index": True, "name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559}]}, "gpus.0.index"),
    ({"gpus": [{"index": 0, "name": "x", "memory_total_mib": 81559, "power_w": 300}]}, "gpus.0.power_w"),
    ({"gpus": [{"index": 0, "name": "x", "memory_total_mib": 99_000_000}]}, "gpus.0.memory_total_mib"),
    ({"gpus": "eight"}, "gpus"),
    ({"logins": [{"rental_id": 1, "username": "../x", "state": "ready"}]}, "logins.0.username"),
    ({"disk_free_gb": "812.5"}, "disk_free_gb"),
    ({"sent_at": 1764637200}, "sent_at"),
    ({"agent_version": None}, "agent_version"),
    ({"uptime_seconds": 2**70}, "uptime_seconds"),
    ({"surprise": 1}, "surprise"),
    ({"hostname": "gpu\u0000"}, "hostname"),
    ({"\u0000": 1}, "\u0000"),
])
def test_malformed_or_absurd_bodies_are_422_with_the_field_and_recorded(h100, change, field):
    server, secret = enrolled(h100)
    post(secret, body_of(report_for(server)))
    agent_before = list(ServerAgent.objects.filter(server=server).values())

    problem = assert_problem(post(secret, {**body_of(report_for(server)), **change}), 422, "invalid_input")

    assert field in [error["field"] for error in problem["errors"]]
    assert list(ServerAgent.objects.filter(server=server).values()) == agent_before
    [refused] = refusals(server)
    assert refused.startswith("invalid_input:")


def test_an_empty_or_non_object_body_is_422(h100):
    server, secret = enrolled(h100)

    assert_problem(post(secret, ""), 422, "invalid_input")
    assert_problem(post(secret, []), 422, "invalid_input")

    assert refusals(server) == ["invalid_input", "invalid_input"]


def test_the_problem_speaks_the_agents_language(h100):
    server, secret = enrolled(h100)
    type(server).objects.filter(pk=server.pk).update(status="retired")

    problem = post(secret, body_of(report_for(server)), HTTP_ACCEPT_LANGUAGE="fr").json()

    assert problem["detail"].startswith("Ce serveur a été mis hors service\u00a0:")


def test_each_agent_token_has_its_own_rate_limit_bucket(h100, settings, time_machine):
    """Thousands of servers behind one NAT share an address: each token is limited on its own."""
    time_machine.move_to(within_one_window(), tick=False)
    settings.AGENT_RATE_LIMIT_PER_MINUTE = 3
    settings.API_RATE_LIMIT_PER_MINUTE = settings.API_WRITE_RATE_LIMIT_PER_MINUTE = 2
    servers = [enrolled(h100) for _ in range(3)]

    for server, secret in servers:
        for _ in range(3):
            assert post(secret, body_of(report_for(server))).status_code == 200
    server, secret = servers[0]
    refused = post(secret, body_of(report_for(server)))

    assert_problem(refused, 429, "rate_limited")
    assert int(refused["Retry-After"]) >= 1


def test_an_unchanged_heartbeat_through_the_api_is_two_statements(h100, django_assert_max_num_queries):
    """The rate limit needs no query (agents are counted by their secret's hash); then one read
    (the token with its server, agent row and desired logins) and one write (the agent's row and
    the token's last use), whatever the number of rentals on the server."""
    server, secret = enrolled(h100)
    now = timezone.now()
    offer = OfferFactory(server=server)
    rentals = [RentalFactory(offer=offer, gpus=2, state="starting", started_at=now,
                             paid_through=now + timedelta(hours=1), delivered_at=None, username="")
               for _ in range(2)]
    body = body_of(report_for(server, logins=[(rentals[0], [0, 1]), (rentals[1], [2, 3])]))
    assert len(post(secret, body).json()["logins"]) == 2

    with django_assert_max_num_queries(2):
        assert post(secret, body).status_code == 200


def test_refused_secrets_are_limited_by_address_and_live_tokens_behind_it_are_not(
    h100, settings, time_machine
):
    """Trying secrets is limited like any anonymous write: past API_WRITE_RATE_LIMIT_PER_MINUTE
    refusals from one address, its unknown tokens get 429, while the live tokens of servers
    behind the same address (a NAT) still get their answers."""
    time_machine.move_to(within_one_window(), tick=False)
    settings.API_WRITE_RATE_LIMIT_PER_MINUTE = 3
    server, secret = enrolled(h100)

    answers = [post(f"evxa_{'x' * 38}{n:02d}", body_of(report_for(server))).status_code for n in range(4)]
    refused = post(f"evxa_{'y' * 40}", body_of(report_for(server)))

    assert answers == [401, 401, 401, 401]
    assert_problem(refused, 429, "rate_limited")
    assert post(secret, body_of(report_for(server))).status_code == 200
    elsewhere = post(f"evxa_{'x' * 38}00", body_of(report_for(server)), REMOTE_ADDR="203.0.113.9")
    assert elsewhere.status_code == 401


def test_a_heartbeat_rewrites_its_agents_row_in_place(h100):
    """PostgreSQL updates the agent's row without touching an index (HOT): no index holds a column
    a heartbeat changes, and the table's pages keep room for the new version (sellers 0010).
    Counted over the steady heartbeat only: the enrolment's first writes may land on a page that
    earlier tests' rolled-back rows still fill, which says nothing of the heartbeat."""
    server, secret = enrolled(h100)
    body = body_of(report_for(server))
    post(secret, body)
    before = _agent_row_updates()

    post(secret, body)

    updated, in_place = (after - start for after, start in zip(_agent_row_updates(), before, strict=True))
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE oid = 'sellers_serveragent'::regclass")
        assert cursor.fetchone()[0] == ["fillfactor=50"]
    assert updated == 1
    assert in_place == updated


def _agent_row_updates() -> tuple[int, int]:
    """This transaction's updates of the agents' table so far, and how many of them were HOT."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_get_xact_tuples_updated(oid), "
                       "pg_stat_get_xact_tuples_hot_updated(oid) FROM pg_class "
                       "WHERE oid = 'sellers_serveragent'::regclass")
        return cursor.fetchone()


def test_the_heartbeats_statements_are_prepared_once_per_connection(h100):
    """PostgreSQL plans the heartbeat's read and write once per connection (marketplace.sql's
    prepared cursor), not on every heartbeat."""
    server, secret = enrolled(h100)
    body = body_of(report_for(server))
    for _ in range(3):
        assert post(secret, body).status_code == 200

    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [statement for (statement,) in cursor.fetchall()]
    assert any(statement.startswith('SELECT t."id"') for statement in prepared)
    assert any(statement.startswith("WITH used AS (UPDATE sellers_agenttoken") for statement in prepared)


# --- the isolation report and device drifts -----------------------------------------------------------


def test_a_sound_isolation_report_is_taken_and_the_answer_carries_each_login_s_limits(h100):
    server, secret = enrolled(h100)
    now = timezone.now()
    rental = RentalFactory(offer=OfferFactory(server=server), gpus=2, state="starting", started_at=now,
                           paid_through=now + timedelta(hours=1), delivered_at=None, username="",
                           isolation_level="shared")
    body = body_of(report_for(server, logins=[(rental, [0, 1])], isolation=isolation_of(server)))

    response = post(secret, body)

    assert response.status_code == 200, response.content
    [login] = response.json()["logins"]
    # 64 - 2 cores, 512 - 8 GiB, 3500 - 50 GB shared by 8 GPUs: a quarter of each for 2 of them.
    assert (login["isolation"], login["limits"]) == (
        "shared", {"cpu_cores": 15, "memory_mib": 129024, "disk_gb": 862, "processes": 8192})
    server.refresh_from_db()
    assert server.isolation_level == "shared"


def isolation_with(server, **changes) -> dict:
    report = isolation_of(server)
    report.update(changes)
    return report


HOSTILE_ISOLATION = [
    ("not a report", "isolation"),
    (7, "isolation"),
    ([{"version": 1}], "isolation"),
    ({"version": 1}, "isolation.backend"),
    ({"\u0000": 1}, "isolation.\u0000"),
]


@pytest.mark.parametrize(("isolation", "field"), HOSTILE_ISOLATION)
def test_an_isolation_report_that_is_no_report_is_refused_by_its_field(h100, isolation, field):
    server, secret = enrolled(h100)

    problem = assert_problem(post(secret, {**body_of(report_for(server)), "isolation": isolation}), 422,
                             "isolation_invalid")

    assert [error["field"] for error in problem["errors"]] == [field]
    assert refusals(server) == [f"isolation_invalid:{field}".replace("\u0000", "")]


@pytest.mark.parametrize(("changes", "field"), [
    ({"version": "1"}, "isolation.version"),
    ({"server_id": 10**9}, "isolation.server_id"),
    ({"hardware": {"cpu_cores": -1, "memory_mib": 1, "disk_gb": 1}}, "isolation.hardware.cpu_cores"),
    ({"hardware": {"cpu_cores": 2**80, "memory_mib": 1, "disk_gb": 1}}, "isolation.hardware.cpu_cores"),
    ({"hardware": {"cpu_cores": 1.5, "memory_mib": 1, "disk_gb": 1}}, "isolation.hardware.cpu_cores"),
    ({"backend": ["v1"]}, "isolation.backend"),
    ({"backend": "none"}, "isolation.backend"),
    ({"facts": "all true"}, "isolation.facts"),
    ({"facts": {"devices_locked": True}}, "isolation.facts.cpu_limited"),
    ({"container": {"runtime": "docker"}}, "isolation.container.disk_limited"),
    ({"container": {"runtime": "lxc", "runtime_version": "1", "toolkit_version": "",
                    "gpus_by_uuid": True, "self_test": True, "disk_limited": True, "templates": []}},
     "isolation.container.runtime"),
    ({"container": {"runtime": "docker", "runtime_version": "2\u0000", "toolkit_version": "",
                    "gpus_by_uuid": True, "self_test": True, "disk_limited": True, "templates": []}},
     "isolation.container.runtime_version"),
    ({"container": {"runtime": "docker", "runtime_version": "27.1", "toolkit_version": "",
                    "gpus_by_uuid": True, "self_test": True, "disk_limited": True,
                    "templates": ["sha256:" + "a" * 64] * 33}},
     "isolation.container.templates"),
    ({"container": {"runtime": "docker", "runtime_version": "27.1", "toolkit_version": "",
                    "gpus_by_uuid": True, "self_test": True, "disk_limited": True,
                    "templates": [{"nested": [[[[]]]]}]}},
     "isolation.container.templates.0"),
    ({"surprise": "x" * 50_000}, "isolation.surprise"),
])
def test_a_hostile_isolation_report_is_422_recorded_and_sells_the_server_whole(h100, changes, field):
    server, secret = enrolled(h100)
    OfferFactory(server=server, gpus_offered=2)
    assert post(secret, body_of(report_for(server, isolation=isolation_of(server)))).status_code == 200
    server.refresh_from_db()
    assert server.isolation_level == "shared"

    response = post(secret, body_of(report_for(server, isolation=isolation_with(server, **changes))))

    problem = assert_problem(response, 422, "isolation_invalid")
    assert [error["field"] for error in problem["errors"]] == [field]
    assert refusals(server) == [f"isolation_invalid:{field}"[:60]]
    server.refresh_from_db()
    assert (server.isolation_level, server.sellable_cpu_cores) == ("whole", None)
    assert list(server.events.order_by("id").values_list("kind", flat=True)) == [
        "token_created", "enrolled", "isolation_changed", "isolation_refused", "isolation_changed"]
    assert ServerAgent.objects.get(server=server).isolation_digest == ""
    assert list(server.offers.values_list("state", flat=True)) == ["withdrawn"]


def test_the_isolation_problem_speaks_the_agents_language(h100):
    server, secret = enrolled(h100)

    response = post(secret, {**body_of(report_for(server)), "isolation": "x"}, HTTP_ACCEPT_LANGUAGE="pt")

    assert assert_problem(response, 422, "isolation_invalid")["detail"].startswith(
        "Este relatório de isolamento não segue o protocolo do agente")


@pytest.mark.parametrize(("drifts", "field"), [
    ([{"at": "yesterday", "node": "nvidia0", "found": "mode 0666"}], "device_drifts.0.at"),
    ([{"at": "2026-12-04T21:00:00Z", "node": "n" * 65, "found": "mode 0666"}], "device_drifts.0.node"),
    ([{"at": "2026-12-04T21:00:00Z", "node": "nvidia0", "found": "mode\u00000666"}], "device_drifts.0.found"),
    ([{"at": "2026-12-04T21:00:00Z", "node": "nvidia0"}], "device_drifts.0.found"),
    ([{"at": "2026-12-04T21:00:00Z", "node": ["nvidia0"], "found": ""}], "device_drifts.0.node"),
    ([{"at": "2026-12-04T21:00:00Z", "node": "nvidia0", "found": "x"}] * 65, "device_drifts"),
    ({"at": "2026-12-04T21:00:00Z"}, "device_drifts"),
])
def test_hostile_device_drifts_are_422_and_recorded(h100, drifts, field):
    server, secret = enrolled(h100)

    problem = assert_problem(post(secret, {**body_of(report_for(server)), "device_drifts": drifts}), 422,
                             "invalid_input")

    assert field in [error["field"] for error in problem["errors"]]
    assert refusals(server) == [f"invalid_input:{field}"]
    assert not server.events.filter(kind="device_drift").exists()


def test_a_deeply_nested_body_is_refused_not_a_server_error(h100):
    server, secret = enrolled(h100)
    nested = "[" * 30_000 + "]" * 30_000

    response = post(secret, '{"agent_version": "1.0.0", "isolation": ' + nested + "}")
    too_large = post(secret, {**body_of(report_for(server)), "isolation": {"x": "y" * 70_000}})

    assert_problem(response, 400, "body_not_json")
    assert_problem(too_large, 413, "body_too_large")


def test_an_unchanged_heartbeat_with_an_isolation_report_is_two_statements(
    h100, django_assert_max_num_queries
):
    server, secret = enrolled(h100)
    now = timezone.now()
    rental = RentalFactory(offer=OfferFactory(server=server), gpus=2, state="starting", started_at=now,
                           paid_through=now + timedelta(hours=1), delivered_at=None, username="")
    body = body_of(report_for(server, logins=[(rental, [0, 1])], isolation=isolation_of(server)))
    assert post(secret, body).status_code == 200

    with django_assert_max_num_queries(2):
        assert post(secret, body).json()["logins"][0]["limits"]["cpu_cores"] == 15
