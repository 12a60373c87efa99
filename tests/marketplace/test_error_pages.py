"""The 403 pages are the site's own, in the visitor's language: an access refused, and a form sent
without its CSRF token (Django's default pages are English, and the CSRF one has an inline style
that the Content-Security-Policy refuses)."""

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client, RequestFactory
from django.utils import translation
from django.views.defaults import permission_denied

pytestmark = pytest.mark.django_db


def test_a_form_without_its_csrf_token_gets_our_page_in_french():
    client = Client(enforce_csrf_checks=True)
    response = client.post("/fr/account/login/", {"login": "lea@example.fr", "password": "x"})
    assert response.status_code == 403
    page = response.content.decode()
    assert "<h1>Ce formulaire a expiré</h1>" in page
    assert "Rien n'a été modifié\u00a0: rechargez la page et renvoyez le formulaire." in page
    assert "<style" not in page


def test_access_refused_is_our_page_in_portuguese():
    request = RequestFactory().get("/pt/seller/")
    request.user = None
    with translation.override("pt"):
        response = permission_denied(request, PermissionDenied())
    assert response.status_code == 403
    assert "<h1>Acesso recusado</h1>" in response.content.decode()
