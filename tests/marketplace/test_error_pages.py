"""The error pages are the site's own, in the visitor's language: an access refused, a form sent
without its CSRF token (Django's default pages are English, and the CSRF one has an inline style
that the Content-Security-Policy refuses), and a crash (Django renders 500.html with no language)."""

import pytest
from django.conf.urls.i18n import i18n_patterns
from django.core.exceptions import PermissionDenied
from django.test import Client, RequestFactory
from django.urls import path
from django.utils import translation
from django.views.defaults import permission_denied

from marketplace import urls as site_urls

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


def boom(request):
    raise RuntimeError("a bug, as the 500 page sees it")


# This module is the URLconf of the crash tests: a failing page in every language, and the site's
# own handler500 (the one marketplace.urls registers).
urlpatterns = i18n_patterns(path("boom/", boom))
handler500 = site_urls.handler500


@pytest.mark.urls(__name__)
@pytest.mark.parametrize(("language", "title", "text"), [
    ("pt", "Algo correu mal", "Já fomos avisados e estamos a tratar do assunto."),
    ("fr", "Une erreur est survenue", "Nous avons été prévenus et nous nous en occupons."),
    ("en", "Something went wrong", "We have been told and are looking into it."),
])
def test_a_crash_gets_the_500_page_in_the_language_of_its_address(language, title, text):
    response = Client(raise_request_exception=False).get(f"/{language}/boom/")
    assert response.status_code == 500
    page = response.content.decode()
    assert f'<html lang="{language}">' in page
    assert f"<h1>{title}</h1>" in page and text in page
    if language != "en":
        assert "Something went wrong" not in page


def test_the_500_page_needs_no_database(django_assert_num_queries):
    """It is what people see when the database is the thing that broke."""
    request = RequestFactory().get("/fr/account/")
    with django_assert_num_queries(0):
        response = site_urls.handler500(request)
    assert "Une erreur est survenue" in response.content.decode()
