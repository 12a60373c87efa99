"""The seller portal's host agent pages: the agent's state, its GPUs and how they compare with the
registration, the token (created, rotated, revoked; its secret shown once), the install commands and
the agent's package, events and reliability."""

import io
import subprocess
import sys
import zipfile
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone, translation
from django.utils.html import escape
from django.utils.translation import gettext

from accounts.tokens import token_secret_hash
from sellers.agent_texts import mismatch_describe
from sellers.models import AgentToken, ServerAgent, ServerAvailabilityDay, ServerEvent, ServerEventKind
from sellers.selectors import AgentState, agent_state_of, server_availability_days
from sellers.services import agent_token_create
from tests.factories import SellerFactory, ServerFactory, UserFactory
from tests.sellers.support import member, url

pytestmark = pytest.mark.django_db

H100 = {"index": 0, "uuid": "GPU-0", "name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559,
        "temperature_c": 34, "utilization_percent": 7, "ecc_uncorrected": 0}


@pytest.fixture
def seller():
    return SellerFactory(name="Alpha GPU Lda")


@pytest.fixture
def owner(seller):
    return member(seller)


@pytest.fixture
def client_a(client, owner):
    client.force_login(owner)
    return client


@pytest.fixture
def server(seller):
    return ServerFactory(seller=seller, name="lis-h100-01", gpu_count=2)


@pytest.fixture
def agent_source(tmp_path, monkeypatch):
    """An agent package as agent/ holds it (pyproject.toml and src/everx_agent/), in place of the
    repository's."""
    package = tmp_path / "src" / "everx_agent"
    package.mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "everx-agent"\ndynamic = ["version"]\nrequires-python = ">=3.9"\n'
        'description = "The EverXCloud host agent"\n'
        '[project.scripts]\neverx-agent = "everx_agent.main:main"\n'
    )
    (package / "__init__.py").write_text('__version__ = "1.0.0"\n')
    (package / "main.py").write_text("def main():\n    print('everx-agent here')\n    return 0\n")
    monkeypatch.setattr("sellers.agent_package.AGENT_SOURCE", tmp_path)
    return tmp_path


def report(server, *, now=None, **fields):
    """The row a heartbeat writes, as the heartbeat service would (its part of the exchange)."""
    now = now or timezone.now()
    values = {
        "enrolled_at": now - timedelta(days=2), "last_heartbeat_at": now, "agent_version": "1.0.0",
        "hostname": "gpu-01", "uptime_seconds": 3 * 86400 + 3600, "disk_free_gb": Decimal("812.5"),
        "gpus": [H100, {**H100, "index": 1, "uuid": "GPU-1", "temperature_c": None}],
    }
    values.update(fields)
    return ServerAgent.objects.create(server=server, **values)


def page(client, server, language="en"):
    response = client.get(url("sellers:portal-server-agent", language, server_id=server.pk))
    assert response.status_code == 200
    return response.content.decode()


def create_token(client, server, replaces=""):
    return client.post(url("sellers:portal-agent-token", server_id=server.pk), {"replaces": replaces})


# --- the state -------------------------------------------------------------------------------------

def test_the_state_follows_the_last_heartbeat(server, settings):
    settings.AGENT_UNREACHABLE_SECONDS = 180
    now = timezone.now()
    assert agent_state_of(agent=None, now=now) == AgentState.NEVER
    agent = report(server, now=now - timedelta(seconds=180))
    assert agent_state_of(agent=agent, now=now) == AgentState.ONLINE
    assert agent_state_of(agent=agent, now=now + timedelta(seconds=1)) == AgentState.SILENT
    agent.unreachable_since = now
    assert agent_state_of(agent=agent, now=now) == AgentState.UNREACHABLE


def test_a_server_never_enrolled_says_so(client_a, server):
    html = page(client_a, server)
    assert 'data-testid="agent-never"' in html
    assert escape(gettext("No agent yet")) in html
    assert 'data-testid="agent-token-create"' in html


def test_an_online_agent_shows_what_it_sees(client_a, server):
    report(server)
    html = page(client_a, server)
    assert escape(gettext("Online")) in html
    assert "NVIDIA H100 80GB HBM3" in html and "81,559" in html and "gpu-01" in html
    assert "3 days" in html  # the uptime, in words
    assert 'data-testid="agent-verified-since"' in html
    assert 'data-testid="agent-clock-skew"' not in html


def test_an_unreachable_agent_says_since_when(client_a, server):
    report(server, unreachable_since=timezone.now() - timedelta(minutes=5),
           last_heartbeat_at=timezone.now() - timedelta(minutes=8))
    html = page(client_a, server)
    assert escape(gettext("Unreachable")) in html and escape(gettext("Unreachable since")) in html


def test_a_clock_far_off_is_a_warning(client_a, server, settings):
    settings.AGENT_CLOCK_SKEW_SECONDS = 60
    report(server, clock_skew_seconds=-95)
    html = page(client_a, server)
    assert 'data-testid="agent-clock-skew"' in html
    assert "The server's clock is 95 seconds behind EverXCloud's." in html
    ServerAgent.objects.filter(server=server).update(clock_skew_seconds=60)
    assert 'data-testid="agent-clock-skew"' not in page(client_a, server)


def test_a_mismatch_is_listed_in_words(client_a, server):
    server.agent_verified_at = None
    server.save(update_fields=["agent_verified_at"])
    report(server, gpus=[H100], mismatch=[
        {"code": "count", "expected": 2, "seen": 1},
        {"code": "model", "index": 0, "expected": "H100 SXM", "seen": "NVIDIA A100-SXM4-40GB"},
        {"code": "memory", "index": 0, "expected": 80, "seen": 40960},
        {"code": "ecc", "index": 3, "seen": 2},
        {"code": "missing", "index": 1},
    ])
    html = page(client_a, server)
    assert 'data-testid="agent-mismatch"' in html
    for sentence in (
        "Registered 2 GPUs, the agent sees 1.",
        "GPU 0 is a NVIDIA A100-SXM4-40GB, the registration says H100 SXM.",
        "GPU 0 has 40 GB of memory, the registered model has 80 GB.",
        "GPU 3 reports 2 uncorrected memory (ECC) errors.",
        "GPU 1 is missing from what the agent sees.",
    ):
        assert escape(sentence) in html, sentence
    assert 'data-testid="agent-verified-since"' not in html


@pytest.mark.parametrize("language", ["pt", "fr"])
def test_mismatches_read_in_the_language(language):
    with translation.override(language):
        count = mismatch_describe(item={"code": "count", "expected": 8, "seen": 7})
        unknown = mismatch_describe(item={"code": "something new"})
        gpu_error = mismatch_describe(item={"code": "gpu_error", "seen": "nvidia-smi not found"})
    expected = {
        "pt": ("Registados 8 GPUs, o agente vê 7.", "O que o agente vê não corresponde ao registo."),
        "fr": (
            "8 GPU déclarés, l'agent en voit 7.", "Ce que voit l'agent ne correspond pas à la déclaration."
        ),
    }[language]
    assert (count, unknown) == expected
    assert gpu_error.endswith("nvidia-smi not found")


@pytest.mark.parametrize("language", ["en", "pt", "fr"])
def test_agent_pages_render_in_each_language(client_a, server, agent_source, language):
    report(server, clock_skew_seconds=120, mismatch=[{"code": "count", "expected": 2, "seen": 1}])
    agent_token_create(seller=server.seller, server_id=server.pk, user=UserFactory())
    ServerEvent.objects.create(server=server, at=timezone.now(), kind=ServerEventKind.MISMATCH)
    with translation.override(language):
        html = page(client_a, server, language)
        for text in ("Verification", "GPUs the agent sees", "Install the agent", "Events", "Rotate the token",
                     "GPUs do not match the registration"):
            assert gettext(text) in html, text  # a template's literal: not escaped
        for name in ("sellers:portal-agent-token", "sellers:portal-agent-token-revoke",
                     "sellers:portal-server"):
            assert client_a.get(url(name, language, server_id=server.pk)).status_code == 200, name
        assert client_a.get(url("sellers:portal-servers", language)).status_code == 200


# --- the token -----------------------------------------------------------------------------------

def test_the_token_is_shown_once_with_the_enroll_command(client_a, server, agent_source):
    response = create_token(client_a, server)
    assert response.status_code == 200
    secret = response.context["secret"]
    token = AgentToken.objects.get(server=server, revoked_at__isnull=True)
    assert secret.startswith("evxa_") and token.key_hash == token_secret_hash(secret)
    html = response.content.decode()
    assert f"sudo everx-agent enroll --url http://testserver --token {secret}" in html
    assert "http://testserver/agent/everx_agent-1.0.0-py3-none-any.whl" in html
    assert response["Cache-Control"] == "private, no-store"
    again = page(client_a, server)
    assert secret not in again and token.prefix in again
    assert "--token evxa_…" in again


def test_a_second_submission_does_not_rotate_the_token_just_shown(client_a, server):
    first = create_token(client_a, server).context["secret"]
    again = create_token(client_a, server)
    assert again.status_code == 200 and "secret" not in again.context
    assert 'data-testid="agent-token-changed"' in again.content.decode()
    live = AgentToken.objects.get(server=server, revoked_at__isnull=True)
    assert live.key_hash == token_secret_hash(first)


def test_rotation_revokes_the_old_token(client_a, server):
    create_token(client_a, server)
    old = AgentToken.objects.get(server=server)
    confirm = client_a.get(url("sellers:portal-agent-token", server_id=server.pk)).content.decode()
    assert f'name="replaces" value="{old.pk}"' in confirm and old.prefix in confirm
    response = create_token(client_a, server, replaces=str(old.pk))
    assert response.status_code == 200 and response.context["rotated"]
    old.refresh_from_db()
    assert old.revoked_at is not None
    new = AgentToken.objects.get(server=server, revoked_at__isnull=True)
    assert new.key_hash == token_secret_hash(response.context["secret"])
    kinds = list(ServerEvent.objects.filter(server=server).values_list("kind", flat=True))
    assert kinds.count(ServerEventKind.TOKEN_CREATED) == 2 and kinds.count(ServerEventKind.TOKEN_REVOKED) == 1


def test_revoke_asks_then_revokes(client_a, server):
    create_token(client_a, server)
    confirm = client_a.get(url("sellers:portal-agent-token-revoke", server_id=server.pk))
    assert confirm.status_code == 200 and AgentToken.objects.get().revoked_at is None
    response = client_a.post(url("sellers:portal-agent-token-revoke", server_id=server.pk))
    assert response.status_code == 302
    assert response["Location"] == url("sellers:portal-server-agent", server_id=server.pk)
    assert AgentToken.objects.get().revoked_at is not None
    again = client_a.post(url("sellers:portal-agent-token-revoke", server_id=server.pk), follow=True)
    assert escape(gettext("This server has no agent token to revoke.")) in again.content.decode()


def test_a_retired_server_gets_no_token(client_a, server):
    server.status = "retired"
    server.save(update_fields=["status"])
    response = create_token(client_a, server)
    assert response.status_code == 302
    assert not AgentToken.objects.exists()
    assert escape(gettext("This server is retired.")) in client_a.get(response["Location"]).content.decode()


def test_token_forms_need_the_csrf_token(owner, server):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    assert create_token(client, server).status_code == 403
    agent_token_create(seller=server.seller, server_id=server.pk, user=owner)
    assert client.post(url("sellers:portal-agent-token-revoke", server_id=server.pk)).status_code == 403
    assert AgentToken.objects.get().revoked_at is None


# --- authorisation -------------------------------------------------------------------------------

def agent_urls(server):
    return [
        ("get", url("sellers:portal-server-agent", server_id=server.pk)),
        ("get", url("sellers:portal-agent-token", server_id=server.pk)),
        ("post", url("sellers:portal-agent-token", server_id=server.pk)),
        ("get", url("sellers:portal-agent-token-revoke", server_id=server.pk)),
        ("post", url("sellers:portal-agent-token-revoke", server_id=server.pk)),
    ]


def test_another_sellers_server_is_a_404(client_a):
    other = ServerFactory()
    agent_token_create(seller=other.seller, server_id=other.pk, user=UserFactory())
    for method, address in agent_urls(other):
        assert getattr(client_a, method)(address, {"replaces": ""}).status_code == 404, address
    assert AgentToken.objects.get(server=other).revoked_at is None
    assert AgentToken.objects.filter(server=other).count() == 1


def test_non_members_are_sent_away(client, server):
    for method, address in agent_urls(server):
        assert getattr(client, method)(address).status_code == 302, address  # anonymous: sign in
    client.force_login(UserFactory())
    for method, address in agent_urls(server):
        response = getattr(client, method)(address)
        assert response.status_code == 302 and response["Location"] == url("sellers:sell"), address
    assert not AgentToken.objects.exists()


# --- events, reliability, queries ------------------------------------------------------------------

def test_events_newest_first_twenty_shown(client_a, server):
    start = timezone.now() - timedelta(hours=1)
    for minute in range(25):
        ServerEvent.objects.create(
            server=server, at=start + timedelta(minutes=minute), kind=ServerEventKind.BACK
        )
    ServerEvent.objects.create(server=server, at=timezone.now(), kind=ServerEventKind.VERIFIED)
    response = client_a.get(url("sellers:portal-server-agent", server_id=server.pk))
    events = response.context["view"].events
    assert len(events) == 20 and events[0].kind == ServerEventKind.VERIFIED
    assert [event.at for event in events] == sorted((event.at for event in events), reverse=True)


def test_a_refused_rental_event_says_which_rental_and_why_in_french(client_a, server):
    detail = "the home image could not be mounted: losetup: cannot find an unused loop device"
    ServerEvent.objects.create(server=server, at=timezone.now(), kind=ServerEventKind.DELIVERY_REFUSED,
                               detail={"rental_id": 812, "detail": detail})
    html = page(client_a, server, "fr")
    assert "Location refusée par l'agent" in html.replace("&#x27;", "'")
    assert f"Location 812\u00a0: {detail}" in html


def test_reliability_new_and_scored(client_a, server):
    assert escape(gettext("New: the score appears after seven days of history.")) in page(client_a, server)
    server.reliability, server.reliability_uptime, server.reliability_delivery = (
        Decimal("0.987"), Decimal("0.990"), Decimal("0.950")
    )
    server.save(update_fields=["reliability", "reliability_uptime", "reliability_delivery"])
    html = page(client_a, server)
    assert "98.7%" in html and "99%" in html and "95%" in html


def test_availability_days_fill_the_month(server):
    today = date(2026, 12, 2)
    ServerAvailabilityDay.objects.create(server=server, day=today, listed_minutes=600, heard_minutes=597)
    ServerAvailabilityDay.objects.create(
        server=server, day=today - timedelta(days=30), listed_minutes=1440, heard_minutes=1440
    )
    days = server_availability_days(server_id=server.pk, today=today, days=30)
    assert len(days) == 30 and days[0].day == today and days[-1].day == today - timedelta(days=29)
    assert (days[0].listed_minutes, days[0].heard_minutes, days[0].share) == (600, 597, Decimal("0.995"))
    assert days[1].share is None


def test_the_agent_page_runs_a_constant_number_of_queries(client_a, server, django_assert_max_num_queries):
    report(server)
    with django_assert_max_num_queries(14) as small:
        page(client_a, server)
    many = [{**H100, "index": index, "uuid": f"GPU-{index}"} for index in range(16)]
    ServerAgent.objects.filter(server=server).update(gpus=many, mismatch=[{"code": "count", "expected": 2,
                                                                           "seen": 16}])
    for _ in range(40):
        ServerEvent.objects.create(server=server, at=timezone.now(), kind=ServerEventKind.BACK)
    for day in range(30):
        ServerAvailabilityDay.objects.create(
            server=server, day=timezone.localdate() - timedelta(days=day), listed_minutes=60, heard_minutes=59
        )
    agent_token_create(seller=server.seller, server_id=server.pk, user=UserFactory())
    with django_assert_max_num_queries(len(small.captured_queries)):
        page(client_a, server)


def test_the_servers_list_shows_each_agent_state(client_a, seller, server, django_assert_max_num_queries):
    silent = ServerFactory(seller=seller, name="lis-silent")
    report(server)
    report(silent, last_heartbeat_at=datetime(2026, 1, 1, tzinfo=UTC))
    with django_assert_max_num_queries(14) as small:
        html = client_a.get(url("sellers:portal-servers")).content.decode()
    assert escape(gettext("Online")) in html and escape(gettext("Not heard from lately")) in html
    for n in range(10):
        report(ServerFactory(seller=seller, name=f"many-{n}"), mismatch=[{"code": "count"}])
    with django_assert_max_num_queries(len(small.captured_queries)):
        html = client_a.get(url("sellers:portal-servers")).content.decode()
    assert html.count('data-testid="agent-mismatch"') == 10


# --- the agent's package -------------------------------------------------------------------------

def test_the_agent_wheel_installs_with_pip_offline(client, agent_source, tmp_path):
    response = client.get("/agent/everx_agent-1.0.0-py3-none-any.whl")
    assert response.status_code == 200
    wheel = tmp_path / "everx_agent-1.0.0-py3-none-any.whl"
    wheel.write_bytes(response.content)
    names = zipfile.ZipFile(io.BytesIO(response.content)).namelist()
    assert "everx_agent/main.py" in names and "everx_agent-1.0.0.dist-info/RECORD" in names
    assert client.get("/agent/everx_agent-1.0.0-py3-none-any.whl").content == response.content  # same bytes
    target = tmp_path / "installed"
    subprocess.run(  # noqa: S603 (our own interpreter, our own file)
        [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet",
         "--target", str(target), str(wheel)], check=True, timeout=120,
    )
    assert (target / "everx_agent" / "main.py").exists()
    assert (target / "bin" / "everx-agent").exists()


def test_only_the_current_wheel_answers(client, agent_source, monkeypatch, tmp_path):
    assert client.get("/agent/everx_agent-0.9.0-py3-none-any.whl").status_code == 404
    assert client.get("/agent/pyproject.toml").status_code == 404
    monkeypatch.setattr("sellers.agent_package.AGENT_SOURCE", tmp_path / "nowhere")
    assert client.get("/agent/everx_agent-1.0.0-py3-none-any.whl").status_code == 404
