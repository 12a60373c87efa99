"""Sign-in rate limits count each client, also behind the load balancer, and only trust a forwarded
address from the proxies that settings name (TRUSTED_PROXY_COUNT, TRUSTED_CLIENT_IP_HEADER)."""

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

BALANCER = "10.0.0.1"  # every request through the load balancer comes from its address
ALICE, BOB = "198.51.100.7", "203.0.113.9"
LIMITED = "Too many failed login attempts"
# settings.ACCOUNT_RATE_LIMITS: 10 failed logins a minute per address, 30 logins a minute per address.
FAILED_PER_MINUTE, LOGINS_PER_MINUTE = 10, 30


def failed_login(client: Client, number: int, **headers):
    """A wrong password for an address of its own, so that only the limits per client count."""
    return client.post(
        "/en/account/login/", {"login": f"someone-{number}@example.com", "password": "wrong"},
        REMOTE_ADDR=BALANCER, **headers,
    )


def limited(response) -> bool:
    return response.status_code == 429 or LIMITED in response.content.decode()


def test_behind_the_balancer_two_clients_are_limited_separately(settings, client):
    settings.ALLAUTH_TRUSTED_PROXY_COUNT = 1
    for number in range(LOGINS_PER_MINUTE):
        response = failed_login(client, number, HTTP_X_FORWARDED_FOR=ALICE)
        assert limited(response) == (number >= FAILED_PER_MINUTE), number
    assert failed_login(client, 99, HTTP_X_FORWARDED_FOR=ALICE).status_code == 429

    response = failed_login(client, 100, HTTP_X_FORWARDED_FOR=BOB)
    assert response.status_code == 200 and not limited(response)


def test_a_client_address_header_of_the_proxy_in_front(settings, client):
    settings.ALLAUTH_TRUSTED_CLIENT_IP_HEADER = "X-Real-IP"
    for number in range(FAILED_PER_MINUTE):
        failed_login(client, number, HTTP_X_REAL_IP=ALICE)
    assert limited(failed_login(client, 10, HTTP_X_REAL_IP=ALICE))
    assert not limited(failed_login(client, 11, HTTP_X_REAL_IP=BOB))


def test_without_a_proxy_a_forged_forwarded_address_is_ignored(client):
    for number in range(FAILED_PER_MINUTE):
        forged = f"192.0.2.{number}"
        failed_login(client, number, HTTP_X_FORWARDED_FOR=forged, HTTP_X_REAL_IP=forged)
    assert limited(failed_login(client, 10, HTTP_X_FORWARDED_FOR="192.0.2.200"))


def test_behind_one_proxy_what_the_client_wrote_before_the_balancers_entry_is_ignored(settings, client):
    settings.ALLAUTH_TRUSTED_PROXY_COUNT = 1
    for number in range(FAILED_PER_MINUTE):
        failed_login(client, number, HTTP_X_FORWARDED_FOR=f"192.0.2.{number}, {ALICE}")
    assert limited(failed_login(client, 10, HTTP_X_FORWARDED_FOR=f"192.0.2.200, {ALICE}"))


@pytest.mark.parametrize(
    ("setting", "value", "headers"),
    [
        # Fewer forwarded entries than proxies: the request came round the outer proxy.
        ("ALLAUTH_TRUSTED_PROXY_COUNT", 2, [{"HTTP_X_FORWARDED_FOR": ALICE}, {"HTTP_X_FORWARDED_FOR": BOB}]),
        ("ALLAUTH_TRUSTED_CLIENT_IP_HEADER", "X-Real-IP", [{}, {"HTTP_X_REAL_IP": "not-an-address"}]),
    ],
)
def test_a_request_that_came_round_the_proxies_counts_as_its_connection(
    settings, client, setting, value, headers
):
    setattr(settings, setting, value)
    for number in range(FAILED_PER_MINUTE):
        response = failed_login(client, number, **headers[number % 2])
        assert response.status_code == 200  # neither a server error nor a refusal
    assert limited(failed_login(client, 10, **headers[0]))
    assert limited(failed_login(client, 11, **headers[1]))
