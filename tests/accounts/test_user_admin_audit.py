"""Granting a role, staff status or a new password in the admin is an operator action: audited."""

import pytest
from django.contrib.auth.models import Group

from accounts.models import AuditAction, AuditEntry
from tests.admin_support import operator_client
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def change_form(user, **changes) -> dict:
    data = {
        "email": user.email, "first_name": user.first_name, "last_name": user.last_name,
        "is_active": "on", "last_login_0": "", "last_login_1": "",
        "date_joined_0": "2026-11-01", "date_joined_1": "10:00:00",
    }
    data.update(changes)
    return data


def test_granting_a_role_and_staff_status_is_audited_with_before_and_after(client):
    operator = operator_client(client)
    user = UserFactory(first_name="Rita")
    finance = Group.objects.get(name="finance")

    response = client.post(
        f"/en/admin/accounts/user/{user.pk}/change/",
        change_form(user, is_staff="on", groups=[finance.pk]),
    )

    assert response.status_code == 302
    entry = AuditEntry.objects.get(action=AuditAction.USER_CHANGE)
    assert (entry.actor, entry.target_id) == (operator, str(user.pk))
    assert entry.before == {"is_staff": False, "groups": []}
    assert entry.after == {"is_staff": True, "groups": ["finance"]}


def test_saving_without_a_change_writes_no_entry(client):
    operator_client(client)
    user = UserFactory(first_name="Rita")
    client.post(f"/en/admin/accounts/user/{user.pk}/change/", change_form(user))
    assert not AuditEntry.objects.exists()


def test_setting_a_password_is_audited_without_the_password(client):
    operator = operator_client(client)
    user = UserFactory()
    response = client.post(
        f"/en/admin/accounts/user/{user.pk}/password/",
        {"password1": "another-gpu-hour-77", "password2": "another-gpu-hour-77", "usable_password": "true"},
    )
    assert response.status_code == 302
    entry = AuditEntry.objects.get(action=AuditAction.USER_CHANGE)
    assert (entry.actor, entry.target_id, entry.after) == (
        operator, str(user.pk), {"password": "set by an operator"}
    )
    assert "another-gpu-hour-77" not in str(entry.before) + str(entry.after)


def test_a_refused_password_form_writes_no_entry(client):
    operator_client(client)
    user = UserFactory()
    response = client.post(
        f"/en/admin/accounts/user/{user.pk}/password/",
        {"password1": "x", "password2": "y", "usable_password": "true"},
    )
    assert response.status_code == 200
    assert not AuditEntry.objects.exists()
