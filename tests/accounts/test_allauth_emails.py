"""allauth's emails go through marketplace.emails: in the recipient's language, from EverXCloud
at the site's address (SITE_URL), never from the host the request happened to use."""

import pytest
from django.core import mail
from django.test import override_settings
from django.utils import translation
from django.utils.translation import gettext

from tests.factories import ProfileFactory

pytestmark = pytest.mark.django_db

PASSWORD = "gpu-hours-2026!"
SITE = {"site_name": "EverXCloud", "site_domain": "everxcloud.example"}


@override_settings(SITE_URL="https://everxcloud.example")
@pytest.mark.parametrize("language", ["pt", "fr"])
def test_the_sign_up_confirmation_names_everxcloud_in_the_users_language(
    client, django_capture_on_commit_callbacks, language
):
    with django_capture_on_commit_callbacks(execute=True):
        client.post(
            f"/{language}/account/signup/",
            {"email": "o'neil@example.com", "password1": PASSWORD, "password2": PASSWORD},
            HTTP_HOST="127.0.0.1:8000",
        )
    [message] = mail.outbox
    with translation.override(language):
        subject = "EverXCloud · " + gettext("Please Confirm Your Email Address")
        hello = gettext("Hello from %(site_name)s!") % SITE
        thanks = gettext("Thank you for using %(site_name)s!\n%(site_domain)s") % SITE
    assert subject != "EverXCloud · Please Confirm Your Email Address"  # translated
    assert message.subject == subject  # one line, no host in brackets, nothing escaped
    assert message.to == ["o'neil@example.com"]
    lines = message.body.strip().splitlines()
    assert lines[0] == hello
    assert lines[-2:] == thanks.splitlines()
    assert "o'neil@example.com" in message.body and "&#x27;" not in message.body
    # The request's host shows only in the link it must follow; every sentence names the site.
    assert [line for line in lines if "127.0.0.1" in line] == [
        line for line in lines if "/confirm-email/" in line
    ]
    assert "everxcloud.example." in message.body


def test_a_password_reset_is_in_the_profile_language_whatever_the_page(
    client, django_capture_on_commit_callbacks
):
    user = ProfileFactory(preferred_language="fr").user
    with django_capture_on_commit_callbacks(execute=True):
        client.post("/en/account/password/reset/", {"email": user.email})
    [message] = mail.outbox
    with translation.override("fr"):
        subject = "EverXCloud · " + gettext("Password Reset Email")
    assert subject != "EverXCloud · Password Reset Email"
    assert message.subject == subject and message.to == [user.email]


def test_an_unknown_address_is_answered_in_the_page_language(client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        client.post("/pt/account/password/reset/", {"email": "nobody@example.com"})
    [message] = mail.outbox
    with translation.override("pt"):
        subject = "EverXCloud · " + gettext("Unknown Account")
        hello = gettext("Hello from %(site_name)s!") % {"site_name": "EverXCloud"}
    assert subject != "EverXCloud · Unknown Account"
    assert (message.subject, message.body.splitlines()[0]) == (subject, hello)


@override_settings(SITE_URL="https://everxcloud.example")
@pytest.mark.parametrize("language", ["pt", "fr"])
def test_a_password_reset_greets_from_everxcloud_not_from_the_requests_host(
    client, django_capture_on_commit_callbacks, language
):
    """The greeting and the subject's prefix name the site, whatever host the request used."""
    user = ProfileFactory(preferred_language=language).user
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"/{language}/account/password/reset/", {"email": user.email}, HTTP_HOST="127.0.0.1:8000")
    [message] = mail.outbox
    with translation.override(language):
        hello = gettext("Hello from %(site_name)s!") % SITE
    first_line = message.body.splitlines()[0]
    assert first_line == hello and "EverXCloud" in first_line
    assert message.subject.startswith("EverXCloud · ")
    for host in ("127.0.0.1", "testserver"):
        assert host not in first_line and host not in message.subject
