import re

import pytest
from allauth.account.models import EmailAddress
from django.core import mail

from accounts.models import Profile, User
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "gpu-hours-2026!"


def confirmation_link(message) -> str:
    return re.search(r"https?://[^/\s]+(/\S+/confirm-email/\S+/)", message.body).group(1)


def test_sign_up_needs_the_email_confirmed(client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            "/fr/account/signup/",
            {"email": "lea@example.com", "password1": PASSWORD, "password2": PASSWORD},
        )
    assert response.status_code == 302
    user = User.objects.get(email="lea@example.com")
    assert Profile.objects.get(user=user).preferred_language == "fr"
    assert len(mail.outbox) == 1
    assert not EmailAddress.objects.get(user=user).verified
    # Without the confirmation, signing in only resends the link.
    client.logout()
    client.post("/fr/account/login/", {"login": "lea@example.com", "password": PASSWORD})
    assert client.get("/fr/account/").status_code == 302

    link = confirmation_link(mail.outbox[0])
    assert client.post(link).status_code == 302
    assert EmailAddress.objects.get(user=user).verified
    assert client.get("/fr/account/").status_code == 200


def test_emails_are_unique_whatever_the_case(client):
    UserFactory(email="sam@example.com")
    response = client.post(
        "/en/account/signup/",
        {"email": "SAM@example.com", "password1": PASSWORD, "password2": PASSWORD},
    )
    assert User.objects.filter(email__iexact="sam@example.com").count() == 1
    assert response.status_code in (200, 302)


def test_password_reset_sends_a_link(client, django_capture_on_commit_callbacks):
    UserFactory(email="reset@example.com")
    with django_capture_on_commit_callbacks(execute=True):
        client.post("/pt/account/password/reset/", {"email": "reset@example.com"})
    assert len(mail.outbox) == 1
    assert "/pt/account/password/reset/key/" in mail.outbox[0].body


def test_failed_logins_are_rate_limited_with_a_translated_error(client):
    UserFactory(email="target@example.com")
    for _attempt in range(5):
        client.post("/fr/account/login/", {"login": "target@example.com", "password": "wrong"})
    response = client.post("/fr/account/login/", {"login": "target@example.com", "password": "wrong"})
    html = response.content.decode()
    assert "Too many failed login attempts" not in html
    assert "Trop de tentatives" in html


def test_staff_without_two_factor_are_sent_to_set_it_up(client):
    staff = UserFactory(is_staff=True, is_superuser=True)
    client.force_login(staff)
    response = client.get("/en/admin/")
    assert response.status_code == 302
    assert "/account/2fa/totp/activate/" in response["Location"]


def test_staff_with_two_factor_reach_the_admin(client):
    from allauth.mfa.models import Authenticator

    staff = UserFactory(is_staff=True, is_superuser=True)
    Authenticator.objects.create(user=staff, type=Authenticator.Type.TOTP, data={"secret": "x"})
    client.force_login(staff)
    assert client.get("/en/admin/").status_code == 200


def test_the_admin_login_form_is_replaced_by_the_sites_login(client):
    response = client.get("/en/admin/login/?next=/en/admin/")
    assert response.status_code == 302
    assert response["Location"].startswith("/en/account/login/")


@pytest.mark.parametrize("path", ["/fr/account/2fa/", "/fr/account/reauthenticate/", "/fr/account/email/"])
def test_two_factor_pages_render_in_our_layout(client, path):
    client.force_login(UserFactory())
    response = client.get(path)
    assert response.status_code == 200
    html = response.content.decode()
    assert '<html lang="fr">' in html and 'class="site-header"' in html
