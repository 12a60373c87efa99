"""API clients of the tests: a user's token with some scopes, and a test client that sends it."""

import json

from django.test import Client

from accounts.services import api_token_create


def token_client(user, *scopes: str, name: str = "tests") -> Client:
    """A client that sends a new token of `user` with `scopes` (the token is `client.api_token`)."""
    token, secret = api_token_create(user=user, name=name, scopes=list(scopes))
    client = Client(headers={"Authorization": f"Bearer {secret}"})
    client.api_token = token
    return client


def post_json(client: Client, path: str, body, **headers):
    """POST a JSON body (a dict, or text sent as it is)."""
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(path, data=data, content_type="application/json", headers=headers)
