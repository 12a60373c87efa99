"""marketplace.wsgi: the host agents' paths run under the short middleware stack, every other
path under settings.MIDDLEWARE, through the real WSGI application gunicorn serves."""

import io
import json
import sys

import pytest
from django.conf import settings
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.utils.module_loading import import_string

from marketplace.wsgi import AGENT_MIDDLEWARE, application
from sellers.models import ServerHeartbeat
from tests.exchange.agents_support import body_of, enrolled, report_for

pytestmark = pytest.mark.django_db


def call(path, *, method="GET", body=b"", host="127.0.0.1", **headers):
    """One request through `application`, as a WSGI server makes it; (status, headers, body)."""
    environ = {
        "REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "80", "SERVER_PROTOCOL": "HTTP/1.1", "HTTP_HOST": host, "REMOTE_ADDR": "198.51.100.7",
        "wsgi.input": io.BytesIO(body), "wsgi.url_scheme": "http", "wsgi.errors": sys.stderr,
        "CONTENT_LENGTH": str(len(body)), "CONTENT_TYPE": "application/json", **headers,
    }
    answered = {}

    def start_response(status, response_headers, exc_info=None):
        answered["status"], answered["headers"] = int(status.split()[0]), dict(response_headers)

    # As Django's test client does: the test's transaction keeps its connection through the request.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        response = application(environ, start_response)
        content = b"".join(response)
        response.close()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
    return answered["status"], answered["headers"], content


@pytest.fixture
def agent(gpu_catalog):
    return enrolled(gpu_catalog["h100-sxm"])


def test_a_heartbeat_through_the_short_stack_gets_its_desired_state(agent):
    server, secret = agent
    body = json.dumps(body_of(report_for(server))).encode()

    status, headers, content = call("/api/v1/agent/heartbeat", method="POST", body=body,
                                    HTTP_AUTHORIZATION=f"Bearer {secret}", HTTP_ACCEPT_LANGUAGE="pt")

    assert status == 200, content
    assert json.loads(content)["server_id"] == server.pk
    assert headers["Content-Language"] == "pt"
    assert headers["X-Content-Type-Options"] == "nosniff"  # the security middleware ran
    assert "no-store" in headers["Cache-Control"]
    # Neither sessions nor CSP ran: an agent gets no cookie and no page policy.
    assert "Set-Cookie" not in headers
    assert "Content-Security-Policy" not in headers


def test_the_short_stack_answers_refusals_as_problem_details(agent):
    server, _secret = agent
    body = json.dumps(body_of(report_for(server))).encode()

    status, headers, content = call("/api/v1/agent/heartbeat", method="POST", body=body,
                                    HTTP_AUTHORIZATION="Bearer evxa_unknown", HTTP_ACCEPT_LANGUAGE="fr")

    assert status == 401
    assert headers["Content-Type"].startswith("application/problem+json")
    problem = json.loads(content)
    assert (problem["code"], problem["detail"][:10]) == ("token_invalid", "Ce jeton d")


def test_the_short_stack_still_checks_the_host(agent):
    server, secret = agent
    body = json.dumps(body_of(report_for(server))).encode()

    status, _headers, _content = call("/api/v1/agent/heartbeat", method="POST", body=body,
                                      host="attacker.example", HTTP_AUTHORIZATION=f"Bearer {secret}")

    assert status == 400
    assert not ServerHeartbeat.objects.filter(server=server).exists()


def test_every_other_path_runs_the_whole_stack():
    status, headers, _content = call("/api/v1/markets")

    assert status == 200
    assert "Content-Security-Policy" in headers  # only the site's whole stack sets it


def test_the_short_stack_is_a_part_of_the_whole_in_the_same_order():
    positions = [settings.MIDDLEWARE.index(path) for path in AGENT_MIDDLEWARE]

    assert positions == sorted(positions)


@pytest.mark.parametrize("path", AGENT_MIDDLEWARE)
def test_the_short_stack_needs_no_view_template_or_exception_hooks(path):
    """ShortStackHandler chains the middleware by `__call__` alone."""
    middleware = import_string(path)

    for hook in ("process_view", "process_template_response", "process_exception"):
        assert not hasattr(middleware, hook)
