"""Driving the operators' admin from tests: a signed-in operator with two-factor authentication,
and an action sent with its form (reason, amount) already filled in."""

from uuid import uuid4

from allauth.mfa.models import Authenticator

from tests.factories import operator_make


def operator_client(client, role: str | None = None, **fields):
    """Sign `client` in as an operator with TOTP on; a superuser unless `role` is given."""
    operator = operator_make(role, **fields)
    Authenticator.objects.create(user=operator, type=Authenticator.Type.TOTP, data={"secret": "x"})
    client.force_login(operator)
    return operator


def action_post(client, changelist: str, action: str, ids, **fields):
    """Run an admin action with its form confirmed, as an operator clicking "Confirm" does."""
    data = {"action": action, "_selected_action": list(ids), "confirm": "yes", "request_key": uuid4().hex}
    data.update(fields)
    return client.post(changelist, data)
