"""Changing one's email address on our own page (allauth's view, our template): the new address
waits for its confirmation link, the link can be sent again, and the change can be called off."""

from datetime import timedelta

import pytest
from allauth.account.models import EmailAddress
from django.core import mail
from django.utils import timezone

from tests.factories import ProfileFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def lea(client):
    user = ProfileFactory(preferred_language="fr").user
    EmailAddress.objects.filter(user=user).update(primary=True, verified=True)
    client.force_login(user)
    return user


def test_a_new_address_waits_for_its_link_and_the_change_can_be_called_off(
    client, lea, django_capture_on_commit_callbacks, time_machine
):
    page = client.get("/fr/account/email/").content.decode()
    assert f"Vous vous connectez et recevez nos e-mails à l'adresse {lea.email}." in page

    with django_capture_on_commit_callbacks(execute=True):
        client.post("/fr/account/email/", {"action_add": "", "email": "lea.martin@example.fr"})
    page = client.get("/fr/account/email/").content.decode()
    assert ("Nous avons envoyé un lien de confirmation à lea.martin@example.fr. La nouvelle adresse "
            "sera utilisée dès que vous aurez ouvert ce lien.") in page
    assert [message.to for message in mail.outbox] == [["lea.martin@example.fr"]]

    time_machine.move_to(timezone.now() + timedelta(minutes=10))  # allauth spaces out resent links
    with django_capture_on_commit_callbacks(execute=True):
        client.post("/fr/account/email/", {"action_send": "", "email": "lea.martin@example.fr"})
    assert len(mail.outbox) == 2

    client.post("/fr/account/email/", {"action_remove": "", "email": "lea.martin@example.fr"})
    assert list(EmailAddress.objects.filter(user=lea).values_list("email", flat=True)) == [lea.email]
    lea.refresh_from_db()
    assert lea.email != "lea.martin@example.fr"


def test_a_bad_address_is_refused_in_french_and_changes_nothing(client, lea):
    response = client.post("/fr/account/email/", {"action_add": "", "email": "pas-une-adresse"})
    assert response.status_code == 200
    assert "Saisissez une adresse e-mail valide." in response.content.decode()
    assert EmailAddress.objects.filter(user=lea).count() == 1
