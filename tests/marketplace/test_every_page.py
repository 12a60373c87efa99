"""Every kind of page the site has, rendered once on a site with the demo data: the public pages
of the sitemap in every language, the account pages of a buyer with a rental, the seller portal of
an owner whose server is rented, every screen of the operators' admin, and the error pages.

Each test asserts only that the page renders; under `make test` the HTML checker then reads every
page the suite rendered (tests/html_capture.py), so a page kind that no test opens is a page kind
nobody checks. These tests make sure there is none.
"""

import re
from urllib.parse import urlsplit

import pytest
from allauth.account.models import EmailAddress, EmailConfirmationHMAC
from allauth.account.utils import user_pk_to_url_str
from django.contrib import admin
from django.contrib.auth.tokens import default_token_generator
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import URLPattern, path, reverse
from django.utils import timezone, translation

from accounts.models import User
from billing.models import Invoice, TopUp
from billing.services import fx_rates_load, fx_rates_read
from demo.seed import (
    DEMO_EMAIL,
    DEMO_PASSWORD,
    DEMO_RATES_PATH,
    demo_buyer_load,
    demo_operators_load,
)
from exchange.models import Market, Rental
from marketplace.urls import urlpatterns as site_urlpatterns
from sellers.services import member_invite
from tests.sellers.support import person

pytestmark = pytest.mark.django_db

LANGUAGES = ("en", "pt", "fr")
OPERATOR = "ops@everxcloud.example"  # the demo superuser
FINE = {200}  # a page, rendered
SENT_ON = {200, 302}  # a page, or a step that sends the visitor to another one (allauth's re-authentication)


def boom(request):
    raise RuntimeError("a bug, as the 500 page sees it")


def forbidden(request):
    raise PermissionDenied


# The site's routes plus two that fail on purpose, for the 500 and 403 pages.
urlpatterns = [path("boom/", boom), path("forbidden/", forbidden), *site_urlpatterns]


@pytest.fixture
def site(demo_book):
    """The demo site of `make run`: the order book, rates, the market open, the demo buyer with a
    running rental, the operators with work waiting, and an owner for the seller of that rental."""
    rates = fx_rates_read(path=DEMO_RATES_PATH)
    fx_rates_load(rates=rates.rates, valid_from=rates.valid_from, source=rates.source)
    Market.objects.update_or_create(pk=1, defaults={"is_open": True})
    buyer = demo_buyer_load()
    demo_operators_load()
    rental = Rental.objects.get(buyer=buyer)
    seller = rental.offer.server.seller
    owner = person(seller)
    member_invite(seller=seller, invited_by=owner, email="newcomer@example.com")
    return {"buyer": buyer, "rental": rental, "owner": owner}


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def reauthenticated(user) -> Client:
    """Signed in, and through the password form that allauth asks for before a security change."""
    client = signed_in(user)
    response = client.post(url("account_reauthenticate"), {"password": DEMO_PASSWORD})
    assert response.status_code == 302
    return client


def url(name: str, language: str = "en", **kwargs) -> str:
    with translation.override(language):
        return reverse(name, kwargs=kwargs or None)


def sitemap_paths(client) -> list[str]:
    xml = client.get("/sitemap.xml").content.decode()
    return sorted({urlsplit(loc).path for loc in re.findall(r"<loc>([^<]+)</loc>", xml)})


# --- the public site --------------------------------------------------------------------------------


def test_every_page_of_the_sitemap_renders(client, site):
    paths = sitemap_paths(client)
    assert {p.split("/")[1] for p in paths} == set(LANGUAGES)
    statuses = {p: client.get(p).status_code for p in paths}
    assert {p: s for p, s in statuses.items() if s not in FINE} == {}


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_pages_of_a_visitor_render(client, site, language):
    names = ["account_login", "account_signup", "account_reset_password", "account_reset_password_done",
             "account_email_verification_sent", "account_inactive", "sellers:apply"]
    statuses = {name: client.get(url(name, language), follow=True).status_code for name in names}
    assert {name: s for name, s in statuses.items() if s not in FINE} == {}


@pytest.mark.parametrize("language", LANGUAGES)
def test_forms_sent_back_with_their_errors_render(client, site, language):
    """A form with errors renders its messages next to the fields (and a list of rules for a
    password), which is where markup goes wrong."""
    sent = {
        "account_signup": {"email": "not-an-address", "password1": "short", "password2": "other"},
        "account_login": {"login": "nobody@example.com", "password": "wrong"},
        "account_reset_password": {"email": "not-an-address"},
    }
    statuses = {name: client.post(url(name, language), data).status_code for name, data in sent.items()}
    assert statuses == dict.fromkeys(sent, 200)


# --- a buyer's pages -------------------------------------------------------------------------------


def buyer_pages(site) -> list[str]:
    buyer, rental = site["buyer"], site["rental"]
    top_up = TopUp.objects.filter(user=buyer).order_by("pk").first()
    invoice = Invoice.objects.filter(top_up__user=buyer).first()
    month = timezone.now().strftime("%Y-%m")
    pages = [
        url("accounts:overview"), url("accounts:profile"), url("billing:top-up"),
        url("billing:top-up-detail", pk=top_up.pk), url("billing:statement", month=month),
        url("exchange:rentals"), url("exchange:rental", pk=rental.pk), url("exchange:orders"),
        url("sellers:apply"),
    ]
    if invoice is not None:
        pages.append(url("billing:invoice", number=invoice.number))
    return pages


def test_every_account_page_of_a_buyer_renders(site):
    client = signed_in(site["buyer"])
    pages = buyer_pages(site)
    statuses = {page: client.get(page).status_code for page in pages}
    assert {p: s for p, s in statuses.items() if s not in FINE} == {}


def test_the_sign_in_and_security_pages_of_a_buyer_render(site):
    """allauth's pages for a signed-in user: addresses, password, two-factor set-up, signing out."""
    client = signed_in(site["buyer"])
    names = ["account_email", "account_change_password", "account_reauthenticate", "account_logout",
             "mfa_index", "mfa_activate_totp"]
    statuses = {name: client.get(url(name)).status_code for name in names}
    assert {name: s for name, s in statuses.items() if s not in SENT_ON} == {}
    response = client.post(url("account_change_password"),
                           {"oldpassword": "wrong", "password1": "short", "password2": "other"})
    assert response.status_code == 200 and response.context["form"].errors


def test_the_two_factor_pages_render(site):
    """Setting up TOTP (its QR code), the second step of signing in, recovery codes, turning it off."""
    buyer = reauthenticated(site["buyer"])
    assert buyer.get(url("mfa_activate_totp")).status_code == 200
    assert buyer.post(url("mfa_activate_totp"), {"code": "000000"}).status_code == 200

    signing_in = Client()
    response = signing_in.post(url("account_login"), {"login": OPERATOR, "password": DEMO_PASSWORD})
    assert response.status_code == 302 and response["Location"] == url("mfa_authenticate")
    assert signing_in.get(url("mfa_authenticate")).status_code == 200
    assert signing_in.post(url("mfa_authenticate"), {"code": "000000"}).status_code == 200

    operator = reauthenticated(User.objects.get(email=OPERATOR))
    assert operator.get(url("mfa_generate_recovery_codes")).status_code == 200
    assert operator.post(url("mfa_generate_recovery_codes")).status_code == 302
    names = ["mfa_index", "mfa_view_recovery_codes", "mfa_deactivate_totp"]
    assert {name: operator.get(url(name)).status_code for name in names} == dict.fromkeys(names, 200)


def test_the_pages_that_a_link_in_an_email_opens_render(client, site):
    """Choosing a new password from the reset link, and confirming an address."""
    buyer = site["buyer"]
    key = default_token_generator.make_token(buyer)
    page = url("account_reset_password_from_key", uidb36=user_pk_to_url_str(buyer), key=key)
    response = client.get(page, follow=True)
    assert response.status_code == 200 and "password1" in response.context["form"].fields
    form_page = response.redirect_chain[-1][0] if response.redirect_chain else page
    assert client.post(form_page, {"password1": "short", "password2": "other"}).status_code == 200

    address = EmailAddress.objects.create(user=buyer, email="second@example.com", verified=False)
    confirmation = EmailConfirmationHMAC(address)
    assert client.get(url("account_confirm_email", key=confirmation.key)).status_code == 200


# --- the seller portal -----------------------------------------------------------------------------


def test_every_page_of_the_seller_portal_renders(site):
    client = signed_in(site["owner"])
    server = site["rental"].offer.server
    names = ["sellers:portal", "sellers:portal-servers", "sellers:portal-server-register",
             "sellers:portal-rentals", "sellers:portal-members", "sellers:portal-payouts",
             "sellers:portal-payout-details", "sellers:portal-earnings"]
    pages = [url(name) for name in names]
    for name in ("sellers:portal-server", "sellers:portal-server-edit", "sellers:portal-server-agent",
                 "sellers:portal-agent-token", "sellers:portal-agent-token-revoke"):
        pages.append(url(name, server_id=server.pk))
    statuses = {page: client.get(page).status_code for page in pages}
    assert {p: s for p, s in statuses.items() if s not in FINE} == {}


# --- the operators' admin --------------------------------------------------------------------------


def admin_pages() -> list[str]:
    """Every screen of every model's admin that takes no argument or an object's id (that of the
    first row), and each app's index."""
    pages = [reverse("admin:index")]
    for model, model_admin in admin.site._registry.items():
        pages.append(reverse("admin:app_list", kwargs={"app_label": model._meta.app_label}))
        first = model._default_manager.order_by("pk").first()
        for pattern in model_admin.get_urls():
            if not isinstance(pattern, URLPattern) or not pattern.name:
                continue
            arguments = set(pattern.pattern.regex.groupindex)
            if not arguments:
                pages.append(reverse(f"admin:{pattern.name}"))
            elif len(arguments) == 1 and arguments <= {"object_id", "id"} and first is not None:
                pages.append(reverse(f"admin:{pattern.name}", kwargs=dict.fromkeys(arguments, first.pk)))
    return list(dict.fromkeys(pages))


def test_every_screen_of_the_admin_renders_for_a_superuser(site):
    """Index, changelists, add and change forms, history, delete confirmations, a user's password
    and our own screens (operations, the market, crediting a transfer, loading rates), with the
    demo data in them."""
    operator = User.objects.get(email=OPERATOR)
    client = signed_in(operator)
    with translation.override("en"):
        pages = admin_pages()
    assert len(pages) > 60
    statuses = {page: client.get(page).status_code for page in pages}
    # 403: a screen that nobody may open (adding a ledger entry, editing the audit log).
    assert {p: s for p, s in statuses.items() if s not in {200, 302, 403}} == {}
    assert all(statuses[page] == 200 for page in pages if page.endswith("/admin/") or "/change/" in page)


def test_the_admin_changes_a_users_password_with_its_rules_shown(site):
    operator = User.objects.get(email=OPERATOR)
    client = signed_in(operator)
    page = url("admin:auth_user_password_change", id=site["buyer"].pk)  # so named for any user model
    assert client.get(page).status_code == 200
    refused = {"password1": "short", "password2": "other", "usable_password": "true"}
    assert client.post(page, refused).status_code == 200


# --- error pages -----------------------------------------------------------------------------------


@pytest.mark.urls(__name__)
def test_the_error_pages_render(site):
    client = Client(raise_request_exception=False)
    assert client.get("/boom/").status_code == 500
    assert client.get("/forbidden/").status_code == 403
    assert client.get("/en/no-such-page/").status_code == 404
    assert client.get("/en/", headers={"host": "evil.example"}).status_code == 400


def test_a_form_sent_without_its_csrf_token_gets_the_403_page(site):
    client = Client(enforce_csrf_checks=True)
    assert client.post(url("account_login"), {"login": DEMO_EMAIL, "password": "x"}).status_code == 403


def test_too_many_attempts_gets_the_429_page(client, settings, site):
    settings.ACCOUNT_RATE_LIMITS = {**settings.ACCOUNT_RATE_LIMITS, "login": "2/m/ip"}
    for _attempt in range(3):
        response = client.post(url("account_login"), {"login": DEMO_EMAIL, "password": "wrong"})
    assert response.status_code == 429

