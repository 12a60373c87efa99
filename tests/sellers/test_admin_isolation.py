"""The operators' action on the Server admin that trusts a server's GPU device locks again after
repeated drifts (exchange.services.server_devices_trust), in the operator's language."""

import pytest
from django.contrib import messages as message_levels
from django.contrib.messages import get_messages
from django.utils import timezone

from sellers.models import Server, ServerEvent
from tests.admin_support import action_post, operator_client
from tests.factories import ServerFactory
from tests.sellers.support import url

pytestmark = pytest.mark.django_db


def messages_of(response, level) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request) if message.level == level]


def test_support_trusts_the_device_locks_of_a_held_server_in_french(client):
    operator = operator_client(client, "support")
    held = ServerFactory(devices_held_at=timezone.now())
    free = ServerFactory()

    response = action_post(client, url("admin:sellers_server_changelist", "fr"), "devices_trust",
                           [held.pk, free.pk])

    assert Server.objects.get(pk=held.pk).devices_held_at is None
    [event] = ServerEvent.objects.filter(server=held, kind="devices_cleared")
    assert event.detail == {"operator_id": operator.pk}
    assert messages_of(response, message_levels.SUCCESS) == [
        "Les verrous des périphériques de 1 serveur sont de nouveau fiables\u00a0; son niveau d'isolation a "
        "été recalculé à partir de son dernier rapport."]
    assert messages_of(response, message_levels.ERROR) == [
        f"{free}: Les verrous des périphériques de ce serveur ne sont pas mis en doute."]


def test_the_action_is_offered_with_its_french_label(client):
    operator_client(client, "support")
    ServerFactory()

    html = client.get(url("admin:sellers_server_changelist", "fr")).content.decode()

    assert "Faire de nouveau confiance aux verrous des périphériques GPU des serveurs sélectionnés" in html
