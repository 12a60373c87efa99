"""Owners invite members by email. The invitee joins by accepting on the invitation page the email
links to (a POST), signed in with a verified address the invitation was sent to: opening a page
never makes anyone a member."""

import pytest
from allauth.account.models import EmailAddress
from django.core import mail
from django.test import Client
from django.utils import translation
from django.utils.html import escape

from sellers.exceptions import InvitationNotFound, MemberInvalid
from sellers.models import MemberRole, SellerInvitation, SellerMembership
from sellers.selectors import invitation_open_for_user
from sellers.services import invitation_accept, member_invite
from tests.factories import ProfileFactory, SellerFactory, ServerFactory, UserFactory
from tests.sellers.support import person, url

pytestmark = pytest.mark.django_db


def joined() -> tuple:
    """Memberships and invitations, as they stand."""
    return (
        list(SellerMembership.objects.order_by("pk").values_list("seller_id", "user_id", "role")),
        list(SellerInvitation.objects.order_by("pk").values_list("pk", "email", "accepted_at")),
    )


@pytest.fixture
def invited():
    """An open invitation of "Alpha GPU Lda" to bo@example.com, and the user with that verified
    address (two-factor authentication on)."""
    seller = SellerFactory(name="Alpha GPU Lda")
    invitation = member_invite(seller=seller, invited_by=person(seller), email="Bo@Example.com")
    return invitation, person(email="bo@example.com")


# --- inviting ------------------------------------------------------------------------------------


def test_owner_invites_and_the_email_links_to_the_invitation_in_the_invitees_language(
    client, django_capture_on_commit_callbacks
):
    seller = SellerFactory(name="Dupont & Fils")
    owner = person(seller)
    ProfileFactory(user=UserFactory(email="ana@example.pt"), preferred_language="pt")
    client.force_login(owner)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(url("sellers:portal-members"), {"email": "Ana@Example.pt"})
    assert response.status_code == 302
    invitation = SellerInvitation.objects.get()
    assert (invitation.invited_by, invitation.accepted_at) == (owner, None)
    [message] = mail.outbox
    assert message.to == ["Ana@Example.pt"]
    assert message.subject == "Foi convidado para aderir a Dupont & Fils na EverXCloud"
    assert message.body == (
        "Olá,\n\n"
        "Foi convidado para trabalhar para Dupont & Fils no portal do vendedor da EverXCloud.\n\n"
        "Registe-se ou inicie sessão com Ana@Example.pt, confirme este endereço de e-mail e abra o "
        "portal do vendedor para aderir:\n"
        f"http://testserver/pt/seller/invitations/{invitation.pk}/\n"
    )
    assert "ana@example.pt" in client.get(url("sellers:portal-members")).content.decode().lower()


def test_an_address_without_an_account_is_invited_in_the_sites_language(django_capture_on_commit_callbacks):
    seller = SellerFactory(name="L'Atelier GPU")
    with django_capture_on_commit_callbacks(execute=True):
        member_invite(seller=seller, invited_by=person(seller), email="new@example.com")
    [message] = mail.outbox
    assert message.subject == "You are invited to join L'Atelier GPU on EverXCloud"
    assert message.body.startswith("Hello,\n\nYou are invited to work for L'Atelier GPU in the EverXCloud")


def test_inviting_a_member_is_refused_and_writes_nothing(django_capture_on_commit_callbacks):
    seller = SellerFactory()
    owner = person(seller)
    colleague = person(seller, role=MemberRole.MEMBER, email="cy@example.com")
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(MemberInvalid) as error:
        member_invite(seller=seller, invited_by=owner, email="CY@example.com")
    assert error.value.code == "already_member"
    with pytest.raises(MemberInvalid) as error:
        member_invite(seller=seller, invited_by=colleague, email="new@example.com")
    assert error.value.code == "not_owner"
    assert not SellerInvitation.objects.exists() and mail.outbox == []


def test_the_view_shows_the_translated_error_and_writes_nothing(client):
    seller = SellerFactory()
    owner = person(seller)
    client.force_login(owner)
    response = client.post(url("sellers:portal-members", "fr"), {"email": owner.email})
    assert response.status_code == 400
    assert escape("Cette personne est déjà membre du vendeur.") in response.content.decode()
    assert not SellerInvitation.objects.exists()


def test_one_open_invitation_per_email(client):
    seller = SellerFactory()
    owner = person(seller)
    member_invite(seller=seller, invited_by=owner, email="dee@example.com")
    with pytest.raises(MemberInvalid) as error:
        member_invite(seller=seller, invited_by=owner, email="DEE@example.com")
    assert error.value.code == "already_invited"
    assert SellerInvitation.objects.count() == 1


def test_only_owners_see_the_invite_form(client):
    seller = SellerFactory()
    client.force_login(person(seller, role=MemberRole.MEMBER))
    page = client.get(url("sellers:portal-members"))
    assert page.status_code == 200 and 'name="email"' not in page.content.decode()
    assert client.post(url("sellers:portal-members"), {"email": "x@example.com"}).status_code == 403
    assert not SellerInvitation.objects.exists()
    client.force_login(person(seller))
    assert 'name="email"' in client.get(url("sellers:portal-members")).content.decode()


# --- accepting -----------------------------------------------------------------------------------


def test_the_invitee_is_sent_to_the_invitation_and_joins_by_accepting_it(client, invited):
    invitation, invitee = invited
    client.force_login(invitee)
    page_url = url("sellers:invitation", invitation_id=invitation.pk)
    before = joined()

    response = client.get(url("sellers:portal"))
    assert (response.status_code, response["Location"]) == (302, page_url)
    page = client.get(page_url)
    assert page.status_code == 200
    html = page.content.decode()
    assert "You are invited to join Alpha GPU Lda on EverXCloud" in html
    assert 'data-testid="invitation-accept"' in html and "Accept the invitation" in html
    assert joined() == before  # looking changes nothing

    response = client.post(page_url)
    assert (response.status_code, response["Location"]) == (302, url("sellers:portal"))
    membership = SellerMembership.objects.get(user=invitee)
    assert (membership.seller, membership.role) == (invitation.seller, MemberRole.MEMBER)
    assert SellerInvitation.objects.get().accepted_at is not None
    portal = client.get(url("sellers:portal"))
    assert portal.status_code == 200
    assert "You have joined Alpha GPU Lda as a member." in portal.content.decode()


def test_the_invitation_page_speaks_french(client, invited):
    invitation, invitee = invited
    client.force_login(invitee)
    html = client.get(url("sellers:invitation", "fr", invitation_id=invitation.pk)).content.decode()
    assert "Vous êtes invité à rejoindre Alpha GPU Lda sur EverXCloud" in html
    assert "<button type=\"submit\">Accepter l'invitation</button>" in html


def test_accepting_needs_the_csrf_token(invited):
    invitation, invitee = invited
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(invitee)
    before = joined()
    assert browser.post(url("sellers:invitation", invitation_id=invitation.pk)).status_code == 403
    assert joined() == before


def test_someone_else_finds_nothing_and_changes_nothing(client, invited):
    invitation, _invitee = invited
    client.force_login(person(email="eve@example.com"))
    page_url = url("sellers:invitation", invitation_id=invitation.pk)
    before = joined()
    for response in (client.get(page_url), client.post(page_url)):
        html = response.content.decode()
        assert response.status_code == 404
        assert "We could not find this invitation for your account." in html
        assert "Alpha GPU Lda" not in html and "bo@example.com" not in html.lower()
    assert joined() == before
    assert client.get(url("sellers:portal"))["Location"] == url("sellers:sell")


def test_an_unconfirmed_address_does_not_join(invited):
    invitation, invitee = invited
    EmailAddress.objects.filter(user=invitee).update(verified=False)
    before = joined()
    assert invitation_open_for_user(user=invitee) is None
    with pytest.raises(InvitationNotFound) as refused:
        invitation_accept(user=invitee, invitation_id=invitation.pk)
    assert refused.value.code == "invitation_not_found"
    assert joined() == before


def test_accepting_again_returns_the_same_membership(invited):
    invitation, invitee = invited
    first = invitation_accept(user=invitee, invitation_id=invitation.pk)
    after_first = joined()
    assert invitation_accept(user=invitee, invitation_id=invitation.pk) == first
    assert joined() == after_first
    assert invitation_open_for_user(user=invitee) is None


def test_an_invitation_is_accepted_by_its_own_invitee_only(invited):
    invitation, invitee = invited
    other = member_invite(
        seller=invitation.seller, invited_by=invitation.invited_by, email="cy@example.com"
    )
    before = joined()
    with pytest.raises(InvitationNotFound):
        invitation_accept(user=invitee, invitation_id=other.pk)
    assert joined() == before
    assert invitation_open_for_user(user=invitee) == invitation


def test_accepting_is_translated(invited):
    invitation, invitee = invited
    with translation.override("pt"), pytest.raises(InvitationNotFound) as refused:
        invitation_accept(user=person(email="eve@example.com"), invitation_id=invitation.pk)
    with translation.override("pt"):
        assert str(refused.value.message) == "Não encontrámos este convite para a sua conta."


# --- the dashboard -------------------------------------------------------------------------------


def test_dashboard_draws_the_utilisation_chart(client):
    seller = SellerFactory()
    ServerFactory(seller=seller, gpu_count=2)
    client.force_login(person(seller))
    html = client.get(url("sellers:portal")).content.decode()
    assert '<svg class="chart"' in html and 'role="img"' in html and "aria-label=" in html


@pytest.mark.parametrize("others", [0, 30])
def test_the_invitation_page_runs_a_fixed_number_of_queries(
    client, invited, others, django_assert_max_num_queries
):
    invitation, invitee = invited
    for number in range(others):  # other sellers' invitations
        seller = SellerFactory()
        member_invite(seller=seller, invited_by=person(seller), email=f"x{number}@example.com")
    client.force_login(invitee)
    with django_assert_max_num_queries(12):
        assert client.get(url("sellers:invitation", "fr", invitation_id=invitation.pk)).status_code == 200
