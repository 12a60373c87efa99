"""Every page carries the Content-Security-Policy; every page served to a signed-in user, every PDF
and every CSV says `Cache-Control: private, no-store`; no template has inline code or styles."""

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from csp.exceptions import CSPNonceError
from csp.utils import build_policy
from django.conf import settings
from django.http import HttpResponse
from django.test import Client, RequestFactory, override_settings

from marketplace.middleware import CSPMiddleware, PrivateResponsesMiddleware
from tests.billing.support import paid_invoice
from tests.browser.support import PASSWORD
from tests.factories import ProfileFactory, RentalFactory

pytestmark = pytest.mark.django_db

PUBLIC_PAGES = [
    "/en/", "/pt/gpus/", "/fr/gpus/h100-sxm/", "/fr/trade/h100-sxm/", "/fr/trade/h100-sxm/book/",
    "/pt/workloads/fine-tuning/", "/fr/compare/", "/en/market-rules/", "/fr/sell/", "/fr/no-such-page/",
]
# allauth's forms: some say `never_cache` themselves.
SIGN_IN_PAGES = ["/fr/account/login/", "/pt/account/signup/", "/en/account/password/reset/"]
SIGNED_IN_PAGES = [
    "/fr/account/", "/fr/account/profile/", "/fr/account/rentals/", "/fr/account/orders/",
    "/fr/account/top-up/", "/fr/account/email/", "/fr/account/2fa/", "/fr/seller/", "/fr/sell/apply/",
    # Public pages too: each shows who is signed in.
    "/fr/", "/fr/gpus/h100-sxm/", "/fr/trade/h100-sxm/", "/fr/no-such-page/",
]


def policy(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {name: values for name, *values in (part.split() for part in header.split(";") if part.strip())}


def assert_strict_policy(response) -> None:
    found = policy(response)
    for directive in ("default-src", "script-src", "style-src", "connect-src", "font-src"):
        assert found[directive] == ["'self'"], directive
    assert found["object-src"] == ["'none'"] and found["frame-ancestors"] == ["'none'"]
    assert "unsafe" not in response["Content-Security-Policy"]


def cache_directives(response) -> set[str]:
    return {part.strip().lower() for part in response.get("Cache-Control", "").split(",") if part.strip()}


def assert_private(response) -> None:
    assert {"private", "no-store"} <= cache_directives(response), response.get("Cache-Control")
    assert "public" not in cache_directives(response)


@pytest.fixture
def buyer(demo_book):
    return ProfileFactory(preferred_language="fr").user


@pytest.fixture
def signed_in(buyer) -> Client:
    client = Client()
    client.force_login(buyer)
    return client


@pytest.mark.parametrize("path", PUBLIC_PAGES)
def test_public_pages_carry_the_policy_and_may_be_cached(client, demo_book, path):
    response = client.get(path)
    assert response.status_code in (200, 404)
    assert_strict_policy(response)
    assert not {"private", "no-store"} & cache_directives(response)


@pytest.mark.parametrize("path", SIGN_IN_PAGES)
def test_sign_in_pages_carry_the_policy(client, path):
    response = client.get(path)
    assert response.status_code == 200
    assert_strict_policy(response)


@pytest.mark.parametrize("path", SIGNED_IN_PAGES)
def test_every_page_a_signed_in_user_sees_is_private(signed_in, path):
    response = signed_in.get(path)
    assert response.status_code in (200, 302, 404)
    assert_strict_policy(response)
    assert_private(response)


def test_a_rental_page_with_connection_details_is_private(signed_in, buyer):
    rental = RentalFactory(buyer=buyer, state="running", paid_through=datetime.now(UTC) + timedelta(hours=1))
    response = signed_in.get(f"/fr/account/rentals/{rental.pk}/")
    assert response.status_code == 200 and rental.username in response.content.decode()
    assert_private(response)


def test_invoices_pdfs_and_statement_csvs_are_private(signed_in, buyer):
    invoice = paid_invoice(buyer)
    month = datetime.now(UTC).strftime("%Y-%m")
    for path in (f"/fr/account/invoices/{invoice.number}/", f"/fr/account/invoices/{invoice.number}/pdf/",
                 f"/fr/account/statements/{month}/", f"/fr/account/statements/{month}.csv"):
        response = signed_in.get(path)
        assert response.status_code == 200, path
        assert_private(response)
        assert_strict_policy(response)


@pytest.mark.parametrize("content_type", ["application/pdf", "text/csv; charset=utf-8"])
def test_a_pdf_or_csv_is_private_whoever_asked(content_type):
    """Also when nobody is signed in (a document a link or a token fetches)."""
    middleware = PrivateResponsesMiddleware(lambda request: HttpResponse(b"x", content_type=content_type))
    response = middleware(RequestFactory().get("/document"))
    assert_private(response)


def test_a_response_its_view_declares_public_stays_public(signed_in, demo_book):
    """Market data is the same for everyone, whoever asks."""
    response = signed_in.get("/api/v1/markets/h100-sxm")
    assert "public" in cache_directives(response)
    assert signed_in.get("/favicon.ico")["Cache-Control"] == "public, max-age=86400"


def test_the_response_that_signs_a_user_in_is_private(client, buyer):
    response = client.post("/fr/account/login/", {"login": buyer.email, "password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == "/fr/account/"
    assert_private(response)


def test_the_admin_carries_the_policy_and_is_private(demo_book):
    from allauth.mfa.models import Authenticator

    from tests.factories import operator_make

    operator = operator_make(None)
    Authenticator.objects.create(user=operator, type=Authenticator.Type.TOTP, data={"secret": "x"})
    client = Client()
    client.force_login(operator)
    for path in ("/fr/admin/", "/fr/admin/exchange/rental/", "/fr/admin/billing/exchangerate/add/"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert_strict_policy(response)
        assert_private(response)


# --- the templates: nothing inline that the policy would refuse -----------------------------------

TEMPLATE_DIRS = [Path(settings.BASE_DIR) / "templates"] + [
    path for app in ("marketplace", "accounts", "catalog", "sellers", "exchange", "billing", "demo")
    if (path := Path(settings.BASE_DIR) / app / "templates").exists()
]
# A <script> is either a file of ours (src=) or a data block the browser never runs (JSON-LD).
INLINE = [
    re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/(?:ld\+)?json\")[^>]*>", re.I),
    re.compile(r"<style\b", re.I),
    re.compile(r"\sstyle=", re.I),
    re.compile(r"\son[a-z]+=", re.I),
    re.compile(r"javascript:", re.I),
]


def test_no_template_has_inline_scripts_styles_or_handlers():
    found = [
        f"{path.relative_to(settings.BASE_DIR)}: {match.group(0)}"
        for folder in TEMPLATE_DIRS for path in sorted(folder.rglob("*.html"))
        for pattern in INLINE for match in pattern.finditer(path.read_text())
    ]
    assert found == []


def test_the_email_page_with_a_change_pending_has_no_inline_style(signed_in, buyer):
    """allauth's own template hides a form with an inline style: ours says `hidden`."""
    response = signed_in.post("/fr/account/email/", {"action_add": "", "email": "new-address@example.com"})
    assert response.status_code in (200, 302)
    html = signed_in.get("/fr/account/email/").content.decode()
    assert 'id="pending-email"' in html
    assert not re.search(r"\sstyle=", html)


def test_the_policy_built_once_is_the_one_django_csp_builds():
    response = CSPMiddleware(lambda request: HttpResponse()).process_response(
        RequestFactory().get("/en/"), HttpResponse()
    )
    assert response["Content-Security-Policy"] == build_policy()


def test_a_changed_policy_setting_is_seen_at_once(client, demo_book):
    directives = {**settings.CONTENT_SECURITY_POLICY["DIRECTIVES"], "img-src": ["'self'", "https://images.example"]}
    changed = {**settings.CONTENT_SECURITY_POLICY, "DIRECTIVES": directives}
    with override_settings(CONTENT_SECURITY_POLICY=changed):
        assert policy(client.get("/en/market-rules/"))["img-src"] == ["'self'", "https://images.example"]
    assert "https://images.example" not in policy(client.get("/en/market-rules/"))["img-src"]


def test_a_view_that_changes_its_policy_keeps_its_change():
    response = HttpResponse()
    response._csp_update = {"img-src": ["https://images.example"]}
    middleware = CSPMiddleware(lambda request: response)
    answered = middleware.process_response(RequestFactory().get("/en/"), response)
    assert "https://images.example" in policy(answered)["img-src"]


def test_a_nonce_asked_for_after_the_header_is_written_is_refused():
    request = RequestFactory().get("/en/")
    middleware = CSPMiddleware(lambda request: HttpResponse())
    middleware.process_request(request)
    middleware.process_response(request, HttpResponse())
    with pytest.raises(CSPNonceError):
        str(request.csp_nonce)
