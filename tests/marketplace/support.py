"""Helpers the API tests share: a user with a token, and requests that send it."""

import json

from django.test import Client

from sellers.services import seller_api_token_create
from tests.factories import UserFactory

JSON = "application/json"
PROBLEM = "application/problem+json"


def token_for(user=None, *, scopes=("read", "trade"), name="laptop", **options):
    """A user (new unless given), one of their tokens and its secret."""
    user = user or UserFactory()
    token, secret = seller_api_token_create(user=user, name=name, scopes=list(scopes), **options)
    return user, token, secret


def bearer(secret: str, **headers) -> dict:
    return {"Authorization": f"Bearer {secret}", **headers}


def post_json(client: Client, path: str, data, *, secret: str | None = None, **headers):
    body = data if isinstance(data, (str, bytes)) else json.dumps(data)
    sent = bearer(secret, **headers) if secret else headers
    return client.post(path, body, content_type=JSON, headers=sent)


def assert_problem(response, status: int, code: str) -> dict:
    """The answer is problem details (RFC 9457) of this status and code; returns its body."""
    assert response.status_code == status, response.content
    assert response["Content-Type"].split(";")[0] == PROBLEM
    body = response.json()
    assert body["status"] == status and body["code"] == code, body
    assert body["type"].endswith(f"/api/problems/{code}")
    assert body["title"] and body["detail"]
    return body
