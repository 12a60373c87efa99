"""Rate limits of the API (docs/api.md): per token, or per client address without one; writes have a
lower limit of their own; over a limit: 429 `rate_limited` with Retry-After, until the window
ends."""

from datetime import UTC, datetime

import pytest
import time_machine

from tests.marketplace.support import assert_problem, bearer, post_json, token_for

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.marketplace.api_test_urls")]

# A moment 10 seconds into a minute: the window ends 50 seconds later.
START = datetime(2026, 12, 1, 21, 0, 10, tzinfo=UTC)


@pytest.fixture
def limits(settings):
    settings.API_RATE_LIMIT_PER_MINUTE = 5
    settings.API_WRITE_RATE_LIMIT_PER_MINUTE = 2
    return settings


def test_a_token_over_its_limit_waits_for_the_window_to_end(client, limits):
    secret = token_for()[2]
    with time_machine.travel(START, tick=False) as traveller:
        for _number in range(5):
            assert client.get("/api/v1/me", headers=bearer(secret)).status_code == 200
        response = client.get("/api/v1/me", headers=bearer(secret, **{"Accept-Language": "pt"}))
        body = assert_problem(response, 429, "rate_limited")
        assert response["Retry-After"] == "50"
        assert body["title"] == "Demasiados pedidos"
        assert "50" in body["detail"]
        traveller.shift(49)
        assert client.get("/api/v1/me", headers=bearer(secret)).status_code == 429
        traveller.shift(1)
        assert client.get("/api/v1/me", headers=bearer(secret)).status_code == 200


def test_each_token_has_its_own_limit(client, limits):
    first, second = token_for()[2], token_for()[2]
    with time_machine.travel(START, tick=False):
        for _number in range(5):
            client.get("/api/v1/me", headers=bearer(first))
        assert client.get("/api/v1/me", headers=bearer(first)).status_code == 429
        assert client.get("/api/v1/me", headers=bearer(second)).status_code == 200


def test_writes_have_a_lower_limit(client, limits):
    secret = token_for()[2]
    with time_machine.travel(START, tick=False):
        for _number in range(2):
            assert post_json(client, "/api/v1/test/notes", {"text": "a"}, secret=secret).status_code == 201
        response = post_json(client, "/api/v1/test/notes", {"text": "a"}, secret=secret)
        assert_problem(response, 429, "rate_limited")
        assert client.get("/api/v1/me", headers=bearer(secret)).status_code == 200


def test_without_a_token_each_client_address_is_limited(client, limits):
    with time_machine.travel(START, tick=False):
        for _number in range(5):
            assert client.get("/api/v1/test/public", REMOTE_ADDR="198.51.100.7").status_code == 200
        assert client.get("/api/v1/test/public", REMOTE_ADDR="198.51.100.7").status_code == 429
        assert client.get("/api/v1/test/public", REMOTE_ADDR="203.0.113.9").status_code == 200
        # A made-up token is no way around the address's limit.
        fake = bearer("evx_" + "x" * 40)
        assert client.get("/api/v1/test/public", REMOTE_ADDR="198.51.100.7", headers=fake).status_code == 429


def test_behind_the_load_balancer_clients_are_told_apart(client, limits):
    limits.ALLAUTH_TRUSTED_PROXY_COUNT = 1
    with time_machine.travel(START, tick=False):
        def public_from(address):
            return client.get("/api/v1/test/public", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR=address)

        for _number in range(5):
            public_from("198.51.100.7")
        assert public_from("198.51.100.7").status_code == 429
        assert public_from("203.0.113.9").status_code == 200


def test_the_defaults_are_those_of_the_contract():
    from django.conf import settings

    assert (settings.API_RATE_LIMIT_PER_MINUTE, settings.API_WRITE_RATE_LIMIT_PER_MINUTE) == (120, 30)
