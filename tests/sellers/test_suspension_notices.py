"""A suspended seller's owners hear it by email in their language, with the reason, and the portal
says so on every page; reinstating tells them too and the notice goes."""

import pytest
from django.core import mail

from accounts.models import Profile
from exchange.services import seller_reinstate, seller_suspend
from sellers.models import MemberRole, SellerMembership
from tests.factories import SellerFactory, UserFactory, operator_make
from tests.sellers.support import member, url

pytestmark = pytest.mark.django_db


def test_owners_are_told_in_their_language_and_members_are_not(django_capture_on_commit_callbacks):
    seller = SellerFactory(name="Alpha GPU Lda")
    french_owner = member(seller)
    Profile.objects.create(user=french_owner, preferred_language="fr")
    plain_member = UserFactory()
    SellerMembership.objects.create(seller=seller, user=plain_member, role=MemberRole.MEMBER)
    support = operator_make("support")

    with django_capture_on_commit_callbacks(execute=True):
        seller_suspend(seller_id=seller.pk, operator=support, reason="Servers unreachable since Monday")

    [message] = mail.outbox
    assert message.to == [french_owner.email]
    assert message.subject == "Votre compte vendeur EverXCloud Alpha GPU Lda est suspendu"
    assert "Le motif\u00a0: Servers unreachable since Monday" in message.body

    with django_capture_on_commit_callbacks(execute=True):
        seller_reinstate(seller_id=seller.pk, operator=support, reason="Servers back")
    assert mail.outbox[-1].subject == "Votre compte vendeur EverXCloud Alpha GPU Lda est rétabli"
    seller.refresh_from_db()
    assert (seller.suspended_at, seller.suspension_reason) == (None, "")


def test_the_portal_shows_the_suspension_and_its_reason_in_portuguese(client):
    seller = SellerFactory()
    client.force_login(member(seller))
    seller_suspend(seller_id=seller.pk, operator=operator_make("support"), reason="Faturas em atraso")

    html = client.get(url("sellers:portal", "pt")).content.decode()
    assert 'data-testid="seller-suspended"' in html and "O motivo: Faturas em atraso" in html

    seller_reinstate(seller_id=seller.pk, operator=operator_make("support"), reason="Pago")
    html = client.get(url("sellers:portal", "pt")).content.decode()
    assert 'data-testid="seller-suspended"' not in html
