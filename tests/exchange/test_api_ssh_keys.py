"""Saved SSH keys through the API: the same rules as the account page, each buyer's own keys only."""

import json

import pytest

from accounts.services import api_token_create
from exchange.models import SshKey
from exchange.services import ssh_key_add
from tests.factories import UserFactory

from .support import VECTOR_FINGERPRINT, VECTOR_KEY

pytestmark = pytest.mark.django_db


def _token(user, *scopes) -> str:
    return api_token_create(user=user, name="script", scopes=set(scopes))[1]


def _call(client, method: str, path: str, secret: str, body=None, **headers):
    data = json.dumps(body) if body is not None else ""
    return getattr(client, method)(
        f"/api/v1{path}", data=data, content_type="application/json",
        headers={"Authorization": f"Bearer {secret}", **headers},
    )


def test_add_list_and_delete_a_key(client):
    buyer = UserFactory()
    secret = _token(buyer, "read", "trade")
    added = _call(client, "post", "/ssh-keys", secret, {"name": "laptop", "public_key": VECTOR_KEY})
    assert added.status_code == 201
    assert added.json()["fingerprint"] == VECTOR_FINGERPRINT
    assert added.json()["created_at"].endswith("Z")
    listed = _call(client, "get", "/ssh-keys", secret).json()["items"]
    assert [key["name"] for key in listed] == ["laptop"]
    assert _call(client, "delete", f"/ssh-keys/{listed[0]['id']}", secret).status_code == 204
    assert not SshKey.objects.exists()


def test_the_page_and_the_api_refuse_the_same_key_with_the_same_code(client):
    secret = _token(UserFactory(), "trade")
    response = _call(client, "post", "/ssh-keys", secret, {"name": "x", "public_key": "ssh-dss AAAA"},
                     **{"Accept-Language": "fr"})
    assert response.status_code == 422
    assert response["Content-Type"].startswith("application/problem+json")
    assert response.json()["code"] == "ssh_key_type"
    assert not SshKey.objects.exists()


@pytest.mark.parametrize("body", [
    {"name": "x"}, {"public_key": VECTOR_KEY}, {"name": 5, "public_key": VECTOR_KEY},
    {"name": "x", "public_key": VECTOR_KEY, "admin": True}, [], "text",
])
def test_bad_bodies_are_refused_and_nothing_is_saved(client, body):
    response = _call(client, "post", "/ssh-keys", _token(UserFactory(), "trade"), body)
    assert 400 <= response.status_code < 500
    assert not SshKey.objects.exists()


def test_scopes_read_lists_but_does_not_add(client):
    secret = _token(UserFactory(), "read")
    assert _call(client, "get", "/ssh-keys", secret).status_code == 200
    refused = _call(client, "post", "/ssh-keys", secret, {"name": "x", "public_key": VECTOR_KEY})
    assert (refused.status_code, refused.json()["code"]) == (403, "scope_missing")
    assert not SshKey.objects.exists()


def test_another_buyers_key_is_404_and_never_listed(client):
    owner, intruder = UserFactory(), UserFactory()
    key = ssh_key_add(buyer=owner, name="theirs", public_key=VECTOR_KEY)
    secret = _token(intruder, "read", "trade")
    assert _call(client, "get", "/ssh-keys", secret).json()["items"] == []
    assert _call(client, "delete", f"/ssh-keys/{key.pk}", secret).status_code == 404
    assert SshKey.objects.filter(pk=key.pk).exists()


def test_no_token_is_401(client):
    response = client.get("/api/v1/ssh-keys")
    assert response.status_code == 401 and response["WWW-Authenticate"] == "Bearer"
