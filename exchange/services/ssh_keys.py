"""Buyers' saved SSH public keys: adding one (checked as strictly as a key on an order) and deleting it."""

from django.db import IntegrityError, transaction
from django.utils.translation import gettext_lazy as _

from accounts.models import User

from ..exceptions import SshKeyInvalid, SshKeyNotFound, SshKeyRejected
from ..models import SshKey
from ..ssh_keys import ssh_key_fingerprint, ssh_public_key_validate

MAX_SSH_KEYS = 20
MAX_NAME_LENGTH = 100


def _duplicate() -> SshKeyRejected:
    return SshKeyRejected(_("You have saved this key already."), code="ssh_key_duplicate")


def ssh_key_name_clean(name) -> str:
    """The name a key is saved under, spaces folded; raises `SshKeyRejected` for one refused."""
    name = " ".join(str(name or "").split())
    if not name:
        raise SshKeyRejected(
            _("Give the key a name, for example the computer it is on."), code="name_required"
        )
    if len(name) > MAX_NAME_LENGTH:
        raise SshKeyRejected(
            _("The name can have at most %(max)d characters.") % {"max": MAX_NAME_LENGTH},
            code="name_too_long",
        )
    if not name.isprintable():
        raise SshKeyRejected(_("The name cannot contain control characters."), code="name_invalid")
    return name


def ssh_key_add(*, buyer, name: str, public_key: str) -> SshKey:
    """Save a public key for the buyer. Raises `SshKeyRejected` (with the codes of `SshKeyInvalid`
    for a text that is no acceptable key); nothing is written then."""
    name = ssh_key_name_clean(name)
    try:
        key = ssh_public_key_validate(public_key)
    except SshKeyInvalid as invalid:
        raise SshKeyRejected(invalid.message, code=invalid.code) from None
    fingerprint = ssh_key_fingerprint(key)
    with transaction.atomic():
        # The buyer's row serialises two additions at once, so the limit holds.
        list(User.objects.select_for_update().filter(pk=buyer.pk).values_list("pk"))
        if SshKey.objects.filter(buyer=buyer, fingerprint=fingerprint).exists():
            raise _duplicate()
        if SshKey.objects.filter(buyer=buyer).count() >= MAX_SSH_KEYS:
            raise SshKeyRejected(
                _("You can save at most %(max)d keys: delete one first.") % {"max": MAX_SSH_KEYS},
                code="ssh_keys_too_many",
            )
        try:
            with transaction.atomic():
                return SshKey.objects.create(buyer=buyer, name=name, public_key=key, fingerprint=fingerprint)
        except IntegrityError:
            raise _duplicate() from None


def ssh_key_delete(*, buyer, key_id: int) -> None:
    """Delete one of the buyer's saved keys. Rentals keep the key they were given. Raises `SshKeyNotFound`."""
    deleted, _rows = SshKey.objects.filter(buyer=buyer, pk=key_id).delete()
    if not deleted:
        raise SshKeyNotFound(_("We could not find this SSH key."))
