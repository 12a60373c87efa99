import re
from decimal import Decimal

import pytest
from allauth.mfa.models import Authenticator
from django.core import mail
from django.utils import translation
from django.utils.translation import gettext

from catalog.models import GpuModel
from exchange.models import Market, Rental
from exchange.selectors import buyer_alias
from exchange.services import server_activate
from sellers.models import MemberRole, Seller, SellerApplication, SellerMembership, Server, ServerStatus
from tests.browser.support import PASSWORD, admin_sign_in, french_buyer_with_balance, operator_with_totp
from tests.exchange.agents_support import isolation_of
from tests.exchange.support import agent_heartbeat
from tests.factories import ProfileFactory, UserFactory, operator_make

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NBSP = "\u00a0"
APPLICATION = {
    "legal_name": "Lyon GPU SAS", "registration_number": "514000000", "vat_id": "PT501964843",
    "address": "Rua Augusta 10, Lisboa", "contact_name": "Camille Durand",
    "contact_phone": "+351 210 000 000",
    "datacentre_locations": "Lisbonne (Equinix LS1)", "planned_inventory": "8 × H100 SXM",
    "iban": "PT50 0002 0123 1234 5678 9015 4", "account_holder": "Lyon GPU SAS",
}


def buy_in_a_browser(browser, base: str, buyer, ssh_key: str) -> None:
    context = browser.new_context(locale="fr-FR")
    shop = context.new_page()
    shop.goto(f"{base}/fr/account/login/")
    shop.locator("input[name=login]").fill(buyer.email)
    shop.locator("input[name=password]").fill(PASSWORD)
    shop.locator("main form button[type=submit]").last.click()
    shop.wait_for_url(f"{base}/fr/account/")
    shop.goto(f"{base}/fr/trade/h100-sxm/")
    buy = shop.locator("form[action$='/buy/']")
    buy.locator("select[name=gpus]").select_option("1")
    buy.locator("textarea[name=ssh_public_key]").fill(ssh_key)
    buy.locator("button[type=submit]").click()
    shop.get_by_test_id("confirm-order").click()  # buy now asks once
    shop.wait_for_url(re.compile(r".*/fr/account/rentals/\d+/$"))
    context.close()


def approve_in_the_admin(browser, base: str, application) -> None:
    operator, secret = operator_with_totp(None, "operateur@example.fr")
    admin = admin_sign_in(browser, base, operator, secret, "fr")
    admin.goto(f"{base}/fr/admin/sellers/sellerapplication/")
    admin.locator(f"input[name=_selected_action][value='{application.pk}']").check()
    admin.locator("select[name=action]").select_option("approve")
    admin.locator("button[name=index]").click()
    admin.wait_for_load_state()
    admin.context.close()


def sign_in(page, base: str, user) -> None:
    page.goto(f"{base}/fr/account/login/")
    page.locator("input[name=login]").fill(user.email)
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("main form button[type=submit]").last.click()
    page.wait_for_url(f"{base}/fr/account/")
    # Two-factor authentication on after signing in, so the login does not ask for a code.
    Authenticator.objects.create(user=user, type=Authenticator.Type.TOTP, data={"secret": "x"})


def invite_a_colleague(page, base: str, seller) -> None:
    """The owner invites a colleague; the colleague opens the link of the email in their own
    browser, looks (which changes nothing), then accepts and lands in the seller portal."""
    colleague = UserFactory(email="hugo@example.fr")
    ProfileFactory(user=colleague, preferred_language="fr")
    page.goto(f"{base}/fr/seller/members/")
    page.locator("main form input[name=email]").fill(colleague.email)
    page.locator("main form button[type=submit]").click()
    page.wait_for_load_state()
    assert page.get_by_test_id("pending-invitations").inner_text().startswith(colleague.email)
    [message] = [message for message in mail.outbox if message.to == [colleague.email]]
    assert message.subject == "Vous êtes invité à rejoindre Lyon GPU SAS sur EverXCloud"
    link = re.search(r"https?://[^/\s]+(/fr/seller/invitations/\d+/)", message.body).group(1)

    context = page.context.browser.new_context(locale="fr-FR")
    own = context.new_page()
    sign_in(own, base, colleague)
    own.goto(f"{base}{link}")
    assert own.locator("h1").inner_text() == "Vous êtes invité à rejoindre Lyon GPU SAS sur EverXCloud"
    assert not SellerMembership.objects.filter(user=colleague).exists()
    own.get_by_role("button", name="Accepter l'invitation").click()
    own.wait_for_url(f"{base}/fr/seller/")
    assert "Vous avez rejoint Lyon GPU SAS en tant que membre." in own.locator("main").inner_text()
    assert SellerMembership.objects.get(user=colleague).role == MemberRole.MEMBER
    context.close()


def test_a_french_seller_applies_lists_a_server_and_sells_an_hour(
    live_server, demo_book, page, ed25519_public_key
):
    Market.objects.update_or_create(pk=1, defaults={"is_open": True})
    base = live_server.url
    applicant = UserFactory(email="camille@example.fr")
    ProfileFactory(user=applicant, preferred_language="fr")
    sign_in(page, base, applicant)

    # The application.
    page.goto(f"{base}/fr/sell/apply/")
    form = page.locator("main form")
    form.locator("select[name=country]").select_option("PT")
    for name, value in APPLICATION.items():
        form.locator(f"[name={name}]").fill(value)
    form.locator("input[name=accept_terms]").check()
    form.locator("button[name=submit]").click()
    page.wait_for_load_state()
    application = SellerApplication.objects.get(applicant=applicant)
    assert application.status == "submitted"

    # An operator approves in the admin, signing in with a TOTP code.
    approve_in_the_admin(page.context.browser, base, application)
    application.refresh_from_db()
    assert application.status == "approved"
    seller = Seller.objects.get(memberships__user=applicant)

    # The owner invites a colleague, who joins by accepting the invitation.
    invite_a_colleague(page, base, seller)

    # The seller registers a server.
    h100 = GpuModel.objects.get(slug="h100-sxm")
    page.goto(f"{base}/fr/seller/servers/new/")
    form = page.locator("main form")
    form.locator("select[name=gpu_model]").select_option(str(h100.pk))
    form.locator("[name=gpu_count]").fill("8")
    form.locator("select[name=region]").select_option("europe")
    form.locator("[name=name]").fill("lis-h100-01")
    form.locator("[name=host]").fill("lis-h100-01.example.fr")
    form.locator("[name=city]").fill("Lisbonne")
    form.locator("[name=ram_gb]").fill("1024")
    form.locator("button[type=submit]").click()
    page.wait_for_url(re.compile(r".*/fr/seller/servers/\d+/$"))
    server = Server.objects.get(seller=seller)
    assert server.status == ServerStatus.PENDING and server.city == "Lisbonne" and server.ram_gb == 1024
    with translation.override("fr"):
        pending, active = str(ServerStatus.PENDING.label), str(ServerStatus.ACTIVE.label)
        post = gettext("Post the offer")
    assert page.get_by_test_id("server-status").inner_text() == pending

    # An operator activates it; the seller posts an offer below the demo book's best ask.
    server_activate(server_id=server.pk, operator=operator_make())
    # Its agent, installed, reports the GPUs as registered (verified) and a host that keeps its
    # renters apart: a shared server, which may offer part of its GPUs.
    agent_heartbeat(server, isolation=isolation_of(server))
    page.reload()
    assert page.get_by_test_id("server-status").inner_text() == active
    offer_form = page.locator(f"form[action$='/servers/{server.pk}/offer/']")
    offer_form.locator("[name=gpus]").fill("2")
    offer_form.locator("[name=price_usd]").fill("2.50")
    page.get_by_role("button", name=post).click()
    page.wait_for_load_state()
    page.goto(f"{base}/fr/trade/h100-sxm/")
    assert page.get_by_test_id("best-ask").inner_text() == f"2,50{NBSP}$US"

    # A buyer buys it at the best offer, in another browser.
    buyer = french_buyer_with_balance()
    buy_in_a_browser(page.context.browser, base, buyer, ed25519_public_key)
    rental = Rental.objects.get(buyer=buyer)
    agent_heartbeat(server, isolation=isolation_of(server))  # the agent makes the buyer's login
    rental.refresh_from_db()
    assert (rental.server_id, rental.state) == (server.pk, "running")

    # The seller sees the rental, with the buyer anonymous, and the earnings.
    page.goto(f"{base}/fr/seller/rentals/")
    rentals = page.locator("main").inner_text()
    assert buyer_alias(buyer_id=buyer.pk, seller_id=seller.pk) in rentals
    assert buyer.email not in rentals
    page.goto(f"{base}/fr/seller/")
    assert page.get_by_test_id("utilisation").locator("svg[role=img]").count() == 1
    # One hour of 1 GPU at 2.50 $US, less the platform's 10 % fee.
    assert rental.price_usd == Decimal("2.50")
    assert page.get_by_test_id("earnings-total-net").inner_text() == f"2,25{NBSP}$US"
