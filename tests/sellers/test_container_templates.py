"""Container templates as operators curate them: the database's named constraints (an image by
digest, one default, and only a published one), the admin form's messages in French, and the
operators' groups, who read templates but do not edit them."""

import pytest
from django.db import IntegrityError, transaction

from exchange.services import agent_heartbeat_receive
from sellers.models import ContainerTemplate, ServerTemplate
from tests.admin_support import operator_client
from tests.exchange.agents_support import enrolled, isolation_of, report_for
from tests.factories import ContainerTemplateFactory
from tests.sellers.support import url

pytestmark = pytest.mark.django_db

DIGEST = "sha256:" + "5e" * 32
PORTS_MESSAGE = "Indiquez jusqu’à 8 numéros de port distincts, dont le 22, par exemple [22, 8888]."


@pytest.mark.parametrize(("fields", "constraint"), [
    ({"image": "registry.example.test/everx/pytorch:latest"}, "sellers_template_image_by_digest"),
    ({"image": "registry.example.test/everx/pytorch:2.5@" + DIGEST}, "sellers_template_image_by_digest"),
    ({"image": "pytorch@sha256:" + "5E" * 32}, "sellers_template_image_by_digest"),
    ({"min_driver": "latest"}, "sellers_template_min_driver_version"),
    ({"key_path": "relative/keys"}, "sellers_template_key_path"),
    ({"disk_gb": 0}, "sellers_template_disk_positive"),
    ({"is_default": True, "published": False}, "sellers_template_default_published"),
])
def test_the_database_refuses_a_template_that_breaks_a_rule(fields, constraint):
    with pytest.raises(IntegrityError, match=constraint), transaction.atomic():
        ContainerTemplateFactory(**fields)
    assert not ContainerTemplate.objects.exists()


def test_one_template_only_is_the_default():
    ContainerTemplateFactory(is_default=True)
    with pytest.raises(IntegrityError, match="sellers_template_one_default"), transaction.atomic():
        ContainerTemplateFactory(is_default=True)


def test_images_by_digest_with_a_registry_port_are_kept():
    template = ContainerTemplateFactory(image="registry.example.test:5000/everx/pytorch@" + DIGEST)
    assert template.digest == DIGEST


def form(**changes) -> dict:
    data = {
        "slug": "pytorch", "published": "on", "position": "0",
        "name_en": "PyTorch", "name_pt": "PyTorch", "name_fr": "PyTorch",
        "description_en": "PyTorch and CUDA.", "description_pt": "PyTorch e CUDA.",
        "description_fr": "PyTorch et CUDA.",
        "image": "registry.example.test/everx/pytorch@" + DIGEST, "min_driver": "550.54",
        "ports": "[22, 8888]", "key_path": "/etc/ssh/everx_authorized_keys", "command": "[]", "disk_gb": "40",
    }
    data.update(changes)
    return data


def test_a_superuser_adds_a_template_in_the_admin(client):
    operator_client(client)
    response = client.post(url("admin:sellers_containertemplate_add", "fr"), form())
    assert response.status_code == 302, response.content.decode()[:2000]
    template = ContainerTemplate.objects.get()
    assert (template.ports, template.min_driver, template.disk_gb) == ([22, 8888], "550.54", 40)


@pytest.mark.parametrize(("changes", "message"), [
    ({"image": "registry.example.test/everx/pytorch:latest"},
     "Désignez l’image par son empreinte (nom@sha256:&lt;64 chiffres hexadécimaux&gt;), sans étiquette."),
    ({"ports": "[8888]"}, PORTS_MESSAGE),
    ({"ports": "[22, 22]"}, PORTS_MESSAGE),
    ({"ports": '["22"]'}, PORTS_MESSAGE),
    ({"min_driver": "550-54"},
     "Écrivez la version du pilote en nombres séparés par des points, par exemple 550.54."),
    ({"key_path": "/etc/../var/keys"},
     "Écrivez un chemin absolu dans le conteneur, par exemple /etc/ssh/keys."),
    ({"command": '"sshd -D"'}, "Écrivez la commande sous forme de liste de textes"),
    ({"is_default": "on", "published": ""}, "Seul un modèle publié peut être le modèle par défaut."),
])
def test_the_admin_form_says_in_french_what_is_wrong_and_saves_nothing(client, changes, message):
    operator_client(client)
    response = client.post(url("admin:sellers_containertemplate_add", "fr"), form(**changes))
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not ContainerTemplate.objects.exists()


def test_publishing_in_the_admin_makes_servers_whose_agent_holds_the_image_hold_it(
        client, gpu_catalog, django_capture_on_commit_callbacks):
    server, secret = enrolled(gpu_catalog["h100-sxm"])
    container = {"runtime": "podman", "runtime_version": "4.3.1", "toolkit_version": "1.17.8",
                 "gpus_by_uuid": True, "self_test": True, "disk_limited": True, "templates": [DIGEST]}
    agent_heartbeat_receive(secret=secret, report=report_for(server, isolation=isolation_of(
        server, container=container)), address="192.0.2.7")
    operator_client(client)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(url("admin:sellers_containertemplate_add", "fr"), form())
    assert response.status_code == 302
    assert list(ServerTemplate.objects.values_list("server_id", "template__slug")) == [(server.pk, "pytorch")]


def test_support_reads_templates_but_cannot_add_one(client):
    operator_client(client, "support")
    ContainerTemplateFactory(slug="pytorch")
    assert client.get(url("admin:sellers_containertemplate_changelist", "fr")).status_code == 200
    added = client.post(url("admin:sellers_containertemplate_add", "fr"), form(slug="other"))
    assert added.status_code == 403
    assert list(ContainerTemplate.objects.values_list("slug", flat=True)) == ["pytorch"]
