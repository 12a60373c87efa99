"""Saved SSH keys: the rules of adding one, deleting, the account page, and two additions at once."""

import pytest
from django.utils import translation
from django.utils.translation import gettext

from exchange.exceptions import SshKeyNotFound, SshKeyRejected
from exchange.models import SshKey
from exchange.selectors import ssh_key_get_for_buyer, ssh_keys_for_buyer
from exchange.services import MAX_SSH_KEYS, ssh_key_add, ssh_key_delete
from exchange.ssh_keys import ssh_key_fingerprint
from tests.factories import UserFactory
from tests.threads import run_together

from .support import VECTOR_FINGERPRINT, VECTOR_KEY


def french(message: str) -> str:
    with translation.override("fr"):
        return gettext(message)


def test_the_fingerprint_is_the_one_ssh_keygen_prints():
    assert ssh_key_fingerprint(VECTOR_KEY) == VECTOR_FINGERPRINT


@pytest.mark.django_db
def test_a_key_is_saved_normalised_with_its_fingerprint():
    buyer = UserFactory()
    key = ssh_key_add(buyer=buyer, name="  my   laptop ", public_key=f"  {VECTOR_KEY}  \n")
    assert (key.name, key.public_key, key.fingerprint) == ("my laptop", VECTOR_KEY, VECTOR_FINGERPRINT)
    assert list(ssh_keys_for_buyer(buyer=buyer)) == [key]


@pytest.mark.django_db
def test_the_same_key_with_another_comment_is_refused():
    buyer = UserFactory()
    ssh_key_add(buyer=buyer, name="laptop", public_key=VECTOR_KEY)
    with pytest.raises(SshKeyRejected) as refused:
        ssh_key_add(buyer=buyer, name="again", public_key=VECTOR_KEY.replace("test@vector", "other"))
    assert refused.value.code == "ssh_key_duplicate"
    assert SshKey.objects.count() == 1
    # Another buyer may save the same key.
    ssh_key_add(buyer=UserFactory(), name="laptop", public_key=VECTOR_KEY)


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "public_key", "code"), [
    ("", VECTOR_KEY, "name_required"),
    ("   ", VECTOR_KEY, "name_required"),
    ("x" * 101, VECTOR_KEY, "name_too_long"),
    ("tab\x07", VECTOR_KEY, "name_invalid"),
    ("laptop", "not a key", "ssh_key_invalid"),
    ("laptop", "-----BEGIN OPENSSH PRIVATE KEY-----", "ssh_key_invalid"),
    ("laptop", VECTOR_KEY + "\n" + VECTOR_KEY, "ssh_key_several"),
    ("laptop", "ssh-dss AAAAB3NzaC1kc3MAAACBAP", "ssh_key_type"),
    ("laptop", "ssh-ed25519 " + "A" * 20000, "ssh_key_too_long"),
])
def test_bad_keys_and_names_are_refused_and_nothing_is_saved(name, public_key, code):
    with pytest.raises(SshKeyRejected) as refused:
        ssh_key_add(buyer=UserFactory(), name=name, public_key=public_key)
    assert refused.value.code == code
    assert not SshKey.objects.exists()


@pytest.mark.django_db
def test_a_buyer_saves_at_most_the_limit(ssh_keys, ssh_key):
    buyer = UserFactory()
    for index in range(MAX_SSH_KEYS):
        SshKey.objects.create(buyer=buyer, name=f"k{index}", public_key="x", fingerprint=f"SHA256:{index}")
    with pytest.raises(SshKeyRejected) as refused:
        ssh_key_add(buyer=buyer, name="one more", public_key=ssh_key)
    assert refused.value.code == "ssh_keys_too_many"


@pytest.mark.django_db
def test_only_the_owner_deletes_or_reads_a_key():
    owner, other = UserFactory(), UserFactory()
    key = ssh_key_add(buyer=owner, name="laptop", public_key=VECTOR_KEY)
    assert ssh_key_get_for_buyer(buyer=other, key_id=key.pk) is None
    with pytest.raises(SshKeyNotFound):
        ssh_key_delete(buyer=other, key_id=key.pk)
    assert SshKey.objects.filter(pk=key.pk).exists()
    ssh_key_delete(buyer=owner, key_id=key.pk)
    assert not SshKey.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_same_key_added_twice_at_once_is_saved_once():
    buyer = UserFactory()
    results, errors = run_together(
        4, lambda _index: ssh_key_add(buyer=buyer, name="laptop", public_key=VECTOR_KEY)
    )
    assert len(results) == 1
    assert [error.code for error in errors] == ["ssh_key_duplicate"] * 3
    assert SshKey.objects.count() == 1


# The account page.


@pytest.fixture
def signed_in(client, db):
    buyer = UserFactory()
    client.force_login(buyer)
    client.buyer = buyer
    return client


def test_the_page_adds_a_key_and_shows_its_fingerprint(signed_in):
    response = signed_in.post(
        "/fr/account/ssh-keys/", {"name": "portable", "public_key": VECTOR_KEY}, follow=True
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert VECTOR_FINGERPRINT in html and "portable" in html
    assert SshKey.objects.get().buyer == signed_in.buyer


def test_the_page_shows_a_refusal_in_french_and_saves_nothing(signed_in):
    both = f"{VECTOR_KEY}\n{VECTOR_KEY}"
    response = signed_in.post("/fr/account/ssh-keys/", {"name": "portable", "public_key": both})
    assert response.status_code == 400
    assert french("Paste one SSH public key only, on one line.") in response.content.decode()
    response = signed_in.post("/fr/account/ssh-keys/", {"name": "portable", "public_key": "ssh-dss AAAA"})
    assert response.status_code == 400 and "ssh-ed25519" in response.content.decode()
    assert not SshKey.objects.exists()


def test_the_page_refuses_an_empty_form(signed_in):
    assert signed_in.post("/pt/account/ssh-keys/", {}).status_code == 400
    assert not SshKey.objects.exists()


def test_deleting_another_buyers_key_is_404_and_keeps_it(signed_in):
    key = ssh_key_add(buyer=UserFactory(), name="theirs", public_key=VECTOR_KEY)
    assert signed_in.post(f"/fr/account/ssh-keys/{key.pk}/delete/").status_code == 404
    assert SshKey.objects.filter(pk=key.pk).exists()
    assert signed_in.get(f"/fr/account/ssh-keys/{key.pk}/delete/").status_code == 405


def test_deleting_ones_own_key(signed_in):
    key = ssh_key_add(buyer=signed_in.buyer, name="mine", public_key=VECTOR_KEY)
    response = signed_in.post(f"/fr/account/ssh-keys/{key.pk}/delete/")
    assert response.status_code == 302 and not SshKey.objects.exists()


def test_the_page_needs_a_sign_in(client, db):
    response = client.get("/fr/account/ssh-keys/")
    assert response.status_code == 302 and "/login/" in response["Location"]


@pytest.mark.parametrize("count", [1, 15])
def test_the_page_runs_a_fixed_number_of_queries(signed_in, count, django_assert_max_num_queries):
    for index in range(count):
        SshKey.objects.create(
            buyer=signed_in.buyer, name=f"k{index}", public_key="x", fingerprint=f"SHA256:{index}"
        )
    with django_assert_max_num_queries(8):
        assert signed_in.get("/fr/account/ssh-keys/").status_code == 200
