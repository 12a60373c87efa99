"""What the admin calls an audit entry (its `str()`): the action in the reader's language, the
object as it was named when the action was recorded."""

import pytest
from django.contrib.contenttypes.models import ContentType
from django.utils import translation

from accounts.models import AuditAction, AuditEntry
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_an_audit_entry_reads_its_action_in_the_language():
    operator = UserFactory()
    entry = AuditEntry(
        actor=operator, action=AuditAction.SELLER_SUSPEND,
        target_type=ContentType.objects.get_for_model(operator), target_id="1", target_repr="Alpha GPU Lda",
    )
    with translation.override("en"):
        assert str(entry) == "Seller suspended: Alpha GPU Lda"
    with translation.override("pt"):
        assert str(entry) == "Vendedor suspenso: Alpha GPU Lda"
    with translation.override("fr"):
        assert str(entry) == "Vendeur suspendu\u00a0: Alpha GPU Lda"
