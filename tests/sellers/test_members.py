from datetime import timedelta

import pytest
from allauth.account.models import EmailAddress
from allauth.mfa.models import Authenticator
from django.core import mail
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.html import escape
from django.utils.translation import gettext

from exchange.models import EndReason, RentalState
from sellers.exceptions import MemberInvalid
from sellers.models import MemberRole, SellerInvitation, SellerMembership
from sellers.selectors import seller_utilisation
from sellers.services import invitation_accept, member_invite
from tests.factories import ProfileFactory, RentalFactory, SellerFactory, ServerFactory, UserFactory

pytestmark = pytest.mark.django_db


def url(name, language="en"):
    with translation.override(language):
        return reverse(name)


def person(seller=None, *, role=MemberRole.OWNER, mfa=True, email=None):
    user = UserFactory(**({"email": email} if email else {}))
    if seller is not None:
        SellerMembership.objects.create(seller=seller, user=user, role=role)
    if mfa:
        Authenticator.objects.create(user=user, type=Authenticator.Type.TOTP, data={"secret": "x"})
    return user


def test_owner_invites_and_the_invitee_joins_on_visiting_the_portal(
    client, django_capture_on_commit_callbacks
):
    seller = SellerFactory()
    owner = person(seller)
    invitee = ProfileFactory(user=UserFactory(email="ana@example.pt"), preferred_language="pt").user
    client.force_login(owner)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(url("sellers:portal-members"), {"email": "Ana@Example.pt"})
    assert response.status_code == 302
    invitation = SellerInvitation.objects.get()
    assert invitation.invited_by == owner and invitation.accepted_at is None
    with translation.override("pt"):
        subject = gettext("You are invited to join %(name)s on EverXCloud") % {"name": seller.name}
    assert [message.subject for message in mail.outbox] == [subject]
    assert mail.outbox[0].to == ["Ana@Example.pt"]
    assert "ana@example.pt".lower() in client.get(url("sellers:portal-members")).content.decode().lower()

    Authenticator.objects.create(user=invitee, type=Authenticator.Type.TOTP, data={"secret": "x"})
    client.force_login(invitee)
    assert client.get(url("sellers:portal")).status_code == 200
    membership = SellerMembership.objects.get(user=invitee)
    assert membership.seller == seller and membership.role == MemberRole.MEMBER
    invitation.refresh_from_db()
    assert invitation.accepted_at is not None


def test_unverified_email_does_not_join():
    seller = SellerFactory()
    member_invite(seller=seller, invited_by=person(seller), email="bo@example.com")
    user = UserFactory(email="bo@example.com")
    EmailAddress.objects.filter(user=user).update(verified=False)
    assert invitation_accept(user=user) == []
    assert not SellerMembership.objects.filter(user=user).exists()


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
    with translation.override("fr"):
        message = gettext("This person is already a member of the seller.")
    assert escape(message) in response.content.decode()
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


def test_utilisation_is_the_share_of_gpus_rented_per_hour(django_assert_num_queries):
    seller = SellerFactory()
    server = ServerFactory(seller=seller, gpu_count=4)
    now = timezone.now().replace(minute=30, second=0, microsecond=0)
    hour = now.replace(minute=0)
    # 2 of 4 GPUs for the whole previous hour; another seller's rental does not count.
    RentalFactory(offer__server=server, gpus=2, started_at=hour - timedelta(hours=1), ended_at=hour,
                  state=RentalState.ENDED, end_reason=EndReason.STOPPED_BY_BUYER)
    RentalFactory(offer__server=ServerFactory(gpu_count=4), gpus=4, started_at=hour - timedelta(hours=1),
                  ended_at=hour, state=RentalState.ENDED, end_reason=EndReason.STOPPED_BY_BUYER)
    with django_assert_num_queries(1):
        utilisation = seller_utilisation(seller=seller, now=now, gpus=4)
    assert len(utilisation.shares) == 7 * 24
    assert utilisation.shares[-2] == pytest.approx(0.5)
    assert utilisation.peak == pytest.approx(0.5)
    assert sum(utilisation.shares) == pytest.approx(0.5)


def test_dashboard_draws_the_utilisation_chart(client):
    seller = SellerFactory()
    ServerFactory(seller=seller, gpu_count=2)
    client.force_login(person(seller))
    html = client.get(url("sellers:portal")).content.decode()
    assert '<svg class="chart"' in html and 'role="img"' in html and "aria-label=" in html
