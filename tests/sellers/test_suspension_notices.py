"""A suspended seller's owners hear it by email in their language, with the reason, and the portal
says so on every page; reinstating tells them too and the notice goes."""

from datetime import UTC, datetime

import pytest
from django.core import mail

from accounts.models import Profile
from exchange.services import seller_reinstate, seller_suspend
from sellers.models import MemberRole, SellerMembership
from tests.factories import SellerFactory, UserFactory, operator_make
from tests.sellers.support import member, url

pytestmark = pytest.mark.django_db


def test_owners_are_told_in_their_language_and_members_are_not(
    django_capture_on_commit_callbacks, time_machine
):
    time_machine.move_to(datetime(2026, 12, 1, 10, 30, tzinfo=UTC), tick=False)
    seller = SellerFactory(name="Dupont & Fils")
    french_owner = member(seller)
    Profile.objects.create(user=french_owner, preferred_language="fr")
    plain_member = UserFactory()
    SellerMembership.objects.create(seller=seller, user=plain_member, role=MemberRole.MEMBER)
    support = operator_make("support")

    with django_capture_on_commit_callbacks(execute=True):
        seller_suspend(seller_id=seller.pk, operator=support, reason="Servers unreachable since Monday")

    [message] = mail.outbox
    assert message.to == [french_owner.email]
    assert message.subject == "Votre compte vendeur EverXCloud Dupont & Fils est suspendu"
    assert message.body == (
        "Bonjour,\n\n"
        "EverXCloud a suspendu le compte vendeur Dupont & Fils le 1er décembre 2026 10:30 (UTC). Ses "
        "offres ont été retirées et aucune nouvelle offre ne peut être publiée tant que le compte "
        "n'est pas rétabli. Les locations déjà en cours continuent et sont payées comme d'habitude.\n\n"
        "Le motif\u00a0: Servers unreachable since Monday\n\n"
        "Répondez à cet e-mail si vous avez la moindre question.\n\n"
        "Merci d'utiliser EverXCloud.\n"
    )

    with django_capture_on_commit_callbacks(execute=True):
        seller_reinstate(seller_id=seller.pk, operator=support, reason="Servers back")
    assert mail.outbox[-1].subject == "Votre compte vendeur EverXCloud Dupont & Fils est rétabli"
    assert mail.outbox[-1].body == (
        "Bonjour,\n\n"
        "EverXCloud a rétabli le compte vendeur Dupont & Fils\u00a0: vous pouvez de nouveau publier des "
        "offres depuis l'espace vendeur.\n\n"
        "Merci d'utiliser EverXCloud.\n"
    )
    seller.refresh_from_db()
    assert (seller.suspended_at, seller.suspension_reason) == (None, "")


def test_an_owner_without_a_profile_reads_english(django_capture_on_commit_callbacks):
    seller = SellerFactory(name="L'Atelier GPU")
    member(seller)
    with django_capture_on_commit_callbacks(execute=True):
        seller_suspend(seller_id=seller.pk, operator=operator_make("support"), reason="Unpaid <fees>")
    [message] = mail.outbox
    assert message.subject == "Your EverXCloud seller account L'Atelier GPU is suspended"
    assert "\n\nThe reason: Unpaid <fees>\n\n" in message.body


def test_the_portal_shows_the_suspension_and_its_reason_in_portuguese(client):
    seller = SellerFactory()
    client.force_login(member(seller))
    seller_suspend(seller_id=seller.pk, operator=operator_make("support"), reason="Faturas em atraso")

    html = client.get(url("sellers:portal", "pt")).content.decode()
    assert 'data-testid="seller-suspended"' in html and "O motivo: Faturas em atraso" in html

    seller_reinstate(seller_id=seller.pk, operator=operator_make("support"), reason="Pago")
    html = client.get(url("sellers:portal", "pt")).content.decode()
    assert 'data-testid="seller-suspended"' not in html
