"""API tokens at work (docs/api.md): 401 for no, unknown, revoked or expired tokens; 403 for a
missing scope; a sell token acts only while its user is a member of its seller with two-factor
authentication; only the hash is stored; the last use is recorded at most once a minute; GET /me
says who a token acts for."""

import hashlib
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from allauth.mfa.models import Authenticator

from accounts.models import ApiToken
from accounts.services import api_token_revoke
from marketplace.models import OutboxEmail
from sellers.models import SellerMembership
from tests.factories import ProfileFactory, SellerFactory, UserFactory
from tests.marketplace.support import assert_problem, bearer, post_json, token_for
from tests.sellers.support import member

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.marketplace.api_test_urls")]

NOW = datetime(2026, 12, 1, 21, 0, tzinfo=UTC)


def me(client, secret=None, address="127.0.0.1", **headers):
    sent = bearer(secret, **headers) if secret else headers
    return client.get("/api/v1/me", headers=sent, REMOTE_ADDR=address)


def assert_unauthenticated(response):
    assert_problem(response, 401, "token_invalid")
    assert response["WWW-Authenticate"] == "Bearer"


def test_no_token_is_401(client):
    assert_unauthenticated(me(client))


@pytest.mark.parametrize("authorization", [
    "Bearer evx_" + "A" * 40, "Bearer not-a-token", "Bearer ", "Basic dXNlcjpwYXNz", "evx_abc",
    "Bearer evx_" + "A" * 5000,
])
def test_an_unknown_or_malformed_token_is_401(client, authorization):
    token_for()
    assert_unauthenticated(client.get("/api/v1/me", headers={"Authorization": authorization}))


def test_a_revoked_token_is_401(client):
    user, token, secret = token_for()
    assert me(client, secret).status_code == 200
    api_token_revoke(user=user, token_id=token.pk)
    assert_unauthenticated(me(client, secret))


def test_an_expired_token_is_401(client):
    with time_machine.travel(NOW, tick=False) as traveller:
        _user, _token, secret = token_for(expires_at=NOW + timedelta(hours=1))
        assert me(client, secret).status_code == 200
        traveller.shift(timedelta(hours=1))
        assert_unauthenticated(me(client, secret))


def test_the_token_of_a_deactivated_user_is_401(client):
    user, _token, secret = token_for()
    user.is_active = False
    user.save()
    assert_unauthenticated(me(client, secret))


def test_a_missing_scope_is_403_and_does_nothing(client):
    _user, _token, secret = token_for(scopes=["read"])
    response = post_json(client, "/api/v1/test/notes", {"text": "a"}, secret=secret,
                         **{"Accept-Language": "fr"})
    body = assert_problem(response, 403, "scope_missing")
    assert body["detail"] == "Ce jeton n'a pas la portée «\u00a0trade\u00a0»."
    assert OutboxEmail.objects.count() == 0


def test_scopes_do_not_imply_each_other(client):
    _user, _token, secret = token_for(scopes=["trade"])
    assert_problem(client.get("/api/v1/test/things/1", headers=bearer(secret)), 403, "scope_missing")


@pytest.fixture
def seller_token():
    seller = SellerFactory(slug="lisbon-gpu")
    user = member(seller)
    _user, token, secret = token_for(user, scopes=["read", "sell"])
    return seller, user, token, secret


def test_a_sell_token_acts_for_its_seller(client, seller_token):
    seller, _user, token, secret = seller_token
    assert token.seller == seller
    response = client.get("/api/v1/test/seller", headers=bearer(secret))
    assert response.status_code == 200 and response.json() == {"seller": "lisbon-gpu"}


def test_a_sell_token_stops_when_its_user_leaves_the_seller(client, seller_token):
    seller, user, _token, secret = seller_token
    SellerMembership.objects.filter(seller=seller, user=user).delete()
    assert_problem(client.get("/api/v1/test/seller", headers=bearer(secret)), 403, "seller_access_lost")
    # Its other scopes go on working: only the seller's operations are refused.
    assert me(client, secret).status_code == 200


def test_a_sell_token_stops_when_its_user_turns_two_factor_authentication_off(client, seller_token):
    _seller, user, _token, secret = seller_token
    Authenticator.objects.filter(user=user).delete()
    assert_problem(client.get("/api/v1/test/seller", headers=bearer(secret)), 403, "seller_access_lost")


def test_a_token_without_sell_is_refused_on_seller_operations(client, seller_token):
    _seller, user, _token, _secret = seller_token
    _user, _token, secret = token_for(user, scopes=["read"], name="reader")
    assert_problem(client.get("/api/v1/test/seller", headers=bearer(secret)), 403, "scope_missing")


def test_only_the_hash_of_the_secret_is_stored_and_its_prefix_shown():
    _user, token, secret = token_for()
    assert secret.startswith("evx_") and len(secret) == 44
    stored = ApiToken.objects.filter(pk=token.pk).values().get()
    assert stored["secret_hash"] == hashlib.sha256(secret.encode()).hexdigest()
    assert stored["prefix"] == secret[:12]
    assert not any(secret in str(value) for value in stored.values())


def test_the_last_use_is_recorded_at_most_once_a_minute(client):
    _user, token, secret = token_for()
    with time_machine.travel(NOW, tick=False) as traveller:
        me(client, secret, address="198.51.100.7")
        token.refresh_from_db()
        assert (token.last_used_at, token.last_used_address) == (NOW, "198.51.100.7")
        traveller.shift(30)
        me(client, secret, address="198.51.100.7")
        token.refresh_from_db()
        assert token.last_used_at == NOW
        traveller.shift(31)
        me(client, secret, address="198.51.100.7")
        token.refresh_from_db()
        assert token.last_used_at == NOW + timedelta(seconds=61)


def test_a_use_from_another_address_is_recorded_at_once(client):
    _user, token, secret = token_for()
    me(client, secret, address="198.51.100.7")
    me(client, secret, address="203.0.113.9")
    token.refresh_from_db()
    assert token.last_used_address == "203.0.113.9"


def test_me_says_who_the_token_acts_for(client, seller_token):
    _seller, user, token, secret = seller_token
    ProfileFactory(user=user, preferred_language="fr")
    ApiToken.objects.filter(pk=token.pk).update(expires_at=datetime(2027, 1, 1, tzinfo=UTC))
    response = me(client, secret)
    assert response.status_code == 200 and response["Content-Type"] == "application/json; charset=utf-8"
    assert response.json() == {
        "email": user.email, "language": "fr", "token_name": "laptop", "token_prefix": token.prefix,
        "scopes": ["read", "sell"], "seller": "lisbon-gpu", "expires_at": "2027-01-01T00:00:00Z",
    }


def test_me_of_a_buyer_token(client):
    user = UserFactory()
    _user, _token, secret = token_for(user, scopes=["trade"], name="bot")
    body = me(client, secret).json()
    assert (body["scopes"], body["seller"], body["expires_at"]) == (["trade"], None, None)
    assert body["language"] == "en"
    assert "sessionid" not in client.cookies  # the API keeps no session
