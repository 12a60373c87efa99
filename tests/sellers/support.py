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


def submitted(user=None):
    user = user or with_mfa(ProfileFactory(preferred_language="pt").user)
    application_save(applicant=user, fields=complete() | {"accept_terms": True})
    return application_submit(applicant=user)


def member(seller, *, mfa=True):
    user = UserFactory()
    SellerMembership.objects.create(seller=seller, user=user, role=MemberRole.OWNER)
    if mfa:
        Authenticator.objects.create(user=user, type=Authenticator.Type.TOTP, data={"secret": "x"})
    return user
