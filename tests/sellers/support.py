"""Helpers the seller tests share: URLs in a language, members with two-factor authentication,
and a complete application."""

from allauth.mfa.models import Authenticator
from django.urls import reverse
from django.utils import translation

from sellers.models import MemberRole, SellerMembership
from sellers.services import application_save, application_submit
from tests.factories import ProfileFactory, UserFactory


def url(name, language="en", **kwargs):
    with translation.override(language):
        return reverse(name, kwargs=kwargs or None)


def complete(**overrides):
    data = {
        "legal_name": "Lisbon GPU Lda", "country": "PT", "registration_number": "514000000",
        "vat_id": "PT501964843", "address": "Rua Augusta 10, Lisboa", "contact_name": "Joana Ferreira",
        "contact_phone": "+351 210 000 000", "website": "https://gpu.example.pt",
        "datacentre_locations": "Lisbon (Equinix LS1)", "planned_inventory": "8 × H100 SXM",
        "iban": "PT50 0002 0123 1234 5678 9015 4", "account_holder": "Lisbon GPU Lda",
    }
    data.update(overrides)
    return data


def with_mfa(user):
    Authenticator.objects.create(user=user, type=Authenticator.Type.TOTP, data={"secret": "x"})
    return user


def submitted(user=None, **overrides):
    """A complete application, submitted (by a Portuguese-speaking applicant unless `user`)."""
    user = user or with_mfa(ProfileFactory(preferred_language="pt").user)
    application_save(applicant=user, fields=complete(**overrides) | {"accept_terms": True})
    return application_submit(applicant=user)


def person(seller=None, *, role=MemberRole.OWNER, mfa=True, email=None):
    """A user (with a verified email address), a member of `seller` in `role` when given."""
    user = UserFactory(**({"email": email} if email else {}))
    if seller is not None:
        SellerMembership.objects.create(seller=seller, user=user, role=role)
    if mfa:
        with_mfa(user)
    return user


def member(seller, *, mfa=True):
    """An owner of the seller."""
    return person(seller, mfa=mfa)
