"""Operators at work in the admin, in French and Portuguese, signing in with a TOTP code: finance
credits a bank transfer by its reference and the buyer sees the money; support approves a seller."""

import uuid
from decimal import Decimal

import pytest
from allauth.mfa.models import Authenticator
from django.utils import translation
from django.utils.translation import gettext, ngettext
from playwright.sync_api import expect

from accounts.models import AuditAction, AuditEntry, Wallet
from billing.models import TopUp, TopUpStatus
from billing.services import top_up_create
from marketplace import formatting
from sellers.models import ApplicationStatus, MemberRole, Seller, SellerApplication, SellerMembership
from sellers.services import application_save, application_submit
from tests.browser.support import PASSWORD, admin_sign_in, new_page, operator_with_totp
from tests.factories import ProfileFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_finance_credits_a_bank_transfer_and_the_french_buyer_sees_it(live_server, browser):
    base = live_server.url
    buyer = ProfileFactory(preferred_language="fr", billing_country="FR", name="Léa Martin").user
    top_up = top_up_create(user=buyer, amount_text="120", currency="EUR", provider="bank",
                           form_token=uuid.uuid4())
    operator, secret = operator_with_totp("finance", "finance@everxcloud.fr")
    with translation.override("fr"):
        link_text = gettext("Credit a bank transfer by its reference")
        credited = gettext("Bank transfer %(reference)s credited: %(amount)s to %(email)s.") % {
            "reference": top_up.reference, "amount": formatting.money(Decimal("120.00"), "EUR"),
            "email": buyer.email,
        }
    assert link_text != "Credit a bank transfer by its reference"  # the admin speaks French

    admin = admin_sign_in(browser, base, operator, secret, "fr")
    admin.locator("#content-main a[href$='/admin/billing/topup/']").first.click()
    admin.wait_for_url(f"{base}/fr/admin/billing/topup/")
    link = admin.locator("a[href$='/admin/billing/topup/credit/']")
    expect(link).to_have_text(link_text)
    link.click()
    admin.wait_for_url(f"{base}/fr/admin/billing/topup/credit/")
    admin.locator("input[name=reference]").fill(top_up.reference)
    admin.locator("textarea[name=reason]").fill("Relevé bancaire du 2 décembre")
    admin.locator("#content-main form input[type=submit]").click()
    admin.wait_for_url(f"{base}/fr/admin/billing/topup/")
    expect(admin.locator("ul.messagelist li.success")).to_have_text(credited)
    admin.context.close()

    top_up.refresh_from_db()
    assert (top_up.status, top_up.credited_by) == (TopUpStatus.PAID, operator)
    assert Wallet.objects.get(user=buyer).balance == Decimal("120.00")
    entry = AuditEntry.objects.get(action=AuditAction.TOP_UP_CREDIT)
    assert (entry.actor, entry.reason) == (operator, "Relevé bancaire du 2 décembre")

    # The buyer, in another browser, sees the money on the account page, written the French way.
    shop = new_page(browser, "fr")
    shop.goto(f"{base}/fr/account/login/")
    shop.locator("input[name=login]").fill(buyer.email)
    shop.locator("input[name=password]").fill(PASSWORD)
    shop.locator("main form button[type=submit]").last.click()
    shop.wait_for_url(f"{base}/fr/account/")
    balance = formatting.money(Decimal("120.00"), "EUR", language="fr")
    assert balance == "120,00\u00a0€"
    expect(shop.get_by_test_id("balance")).to_have_text(balance)
    shop.context.close()
    assert TopUp.objects.filter(status=TopUpStatus.PAID).count() == 1


APPLICATION = {
    "legal_name": "Porto GPU Lda", "country": "PT", "registration_number": "514000000",
    "vat_id": "PT501964843", "address": "Avenida dos Aliados 1, Porto", "contact_name": "Rui Costa",
    "contact_phone": "+351 220 000 000", "datacentre_locations": "Porto (Equinix PO1)",
    "planned_inventory": "8 × H100 SXM", "iban": "PT50 0002 0123 1234 5678 9015 4",
    "account_holder": "Porto GPU Lda", "accept_terms": True,
}


def test_portuguese_support_approves_a_seller_application(live_server, browser):
    base = live_server.url
    applicant = ProfileFactory(preferred_language="pt", name="Rui Costa").user
    Authenticator.objects.create(user=applicant, type=Authenticator.Type.TOTP, data={"secret": "x"})
    application_save(applicant=applicant, fields=APPLICATION)
    application = application_submit(applicant=applicant)
    assert application.status == ApplicationStatus.SUBMITTED
    operator, secret = operator_with_totp("support", "apoio@everxcloud.pt")
    with translation.override("pt"):
        approve = gettext("Approve the selected applications")
        approved = ngettext(
            "%(count)d application approved.", "%(count)d applications approved.", 1
        ) % {"count": 1}
    assert approve != "Approve the selected applications"  # the admin speaks Portuguese

    page = admin_sign_in(browser, base, operator, secret, "pt")
    page.locator("#content-main a[href$='/admin/sellers/sellerapplication/']").first.click()
    page.wait_for_url(f"{base}/pt/admin/sellers/sellerapplication/")
    page.locator(f"input[name=_selected_action][value='{application.pk}']").check()
    page.locator("select[name=action]").select_option(label=approve)
    page.locator("button[name=index]").click()
    expect(page.locator("ul.messagelist li.success")).to_have_text(approved)
    page.context.close()

    application.refresh_from_db()
    assert (application.status, application.decided_by) == (ApplicationStatus.APPROVED, operator)
    seller = Seller.objects.get(name="Porto GPU Lda")
    assert SellerMembership.objects.filter(seller=seller, user=applicant, role=MemberRole.OWNER).exists()
    entry = AuditEntry.objects.get(action=AuditAction.APPLICATION_APPROVE)
    assert (entry.actor, entry.target_id) == (operator, str(application.pk))
    assert SellerApplication.objects.filter(status=ApplicationStatus.SUBMITTED).count() == 0
