"""Helpers the seller tests share: URLs in a language, members with two-factor authentication,
a complete application, and `sell` tokens with a client of the API."""

import json

from allauth.mfa.models import Authenticator
from django.urls import reverse
from django.utils import translation

from sellers.models import MemberRole, SellerMembership
from sellers.services import application_save, application_submit, seller_api_token_create
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


def sell_token(seller, *, user=None) -> str:
    """The secret of a `sell` token for `seller`, of `user` (else a new owner with two-factor
    authentication)."""
    _token, secret = seller_api_token_create(user=user or member(seller), name="ci", scopes=["sell"])
    return secret


class Api:
    """The API at /api/v1 as a program calls it: JSON bodies and the token as a bearer."""

    def __init__(self, client, secret: str | None):
        self.client = client
        self.headers = {"Authorization": f"Bearer {secret}"} if secret else {}

    def get(self, path: str, **query):
        return self.client.get(f"/api/v1{path}", query, headers=self.headers)

    def send(self, method: str, path: str, body=None, *, raw: str | None = None):
        data = raw if raw is not None else json.dumps(body if body is not None else {})
        return getattr(self.client, method)(
            f"/api/v1{path}", data=data, content_type="application/json", headers=self.headers
        )

    def post(self, path: str, body=None, **kwargs):
        return self.send("post", path, body, **kwargs)

    def patch(self, path: str, body=None, **kwargs):
        return self.send("patch", path, body, **kwargs)
