"""Operators at work in the admin, in French and Portuguese, signing in with a TOTP code: finance
credits a bank transfer of another sum than asked (found from the operations page) and the buyer
sees the money; support approves a seller."""

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


def test_finance_credits_a_bank_transfer_of_another_sum_and_the_french_buyer_sees_it(live_server, browser):
    """The buyer was asked 144,00 € (120,00 € and 20 % VAT) and sent 150,00 €: finance finds the
    transfer from the operations page, credits what arrived, and sees the VAT worked out again and the
    difference."""
    base = live_server.url
    buyer = ProfileFactory(preferred_language="fr", billing_country="FR", name="Léa Martin").user
    top_up = top_up_create(user=buyer, amount_text="120", currency="EUR", provider="bank",
                           form_token=uuid.uuid4())
    assert top_up.total == Decimal("144.00")
    operator, secret = operator_with_totp("finance", "finance@everxcloud.fr")
    with translation.override("fr"):
        waiting = gettext("Bank transfers to credit")
        link_text = gettext("Credit a bank transfer by its reference")
        credited = gettext(
            "Bank transfer %(reference)s credited as received: %(total)s instead of %(expected)s "
            "(difference %(difference)s), that is %(amount)s to %(email)s and %(vat)s of VAT."
        ) % {
            "reference": top_up.reference, "email": buyer.email,
            "total": formatting.money(Decimal("150.00"), "EUR"),
            "expected": formatting.money(Decimal("144.00"), "EUR"),
            "difference": formatting.money(Decimal("6.00"), "EUR"),
            "amount": formatting.money(Decimal("125.00"), "EUR"),
            "vat": formatting.money(Decimal("25.00"), "EUR"),
        }
    assert waiting != "Bank transfers to credit"  # the admin speaks French

    admin = admin_sign_in(browser, base, operator, secret, "fr")
    admin.goto(f"{base}/fr/admin/operations/")
    row = admin.locator("#waiting-bank-transfers")
    expect(row.locator("td")).to_have_text("1")
    row.get_by_role("link", name=waiting).click()
    admin.wait_for_url(f"{base}/fr/admin/billing/topup/?provider__exact=bank&status__exact=pending")
    expect(admin.locator("#result_list tbody tr")).to_have_count(1)
    link = admin.locator("a[href$='/admin/billing/topup/credit/']")
    expect(link).to_have_text(link_text)
    link.click()
    admin.wait_for_url(f"{base}/fr/admin/billing/topup/credit/")
    admin.locator("input[name=reference]").fill(top_up.reference)
    admin.locator("#content-main form input[type=submit]").click()
    admin.wait_for_url(f"{base}/fr/admin/billing/topup/{top_up.pk}/credit/")
    expect(admin.locator("input[name=received]")).to_have_value("144,00")
    admin.locator("input[name=received]").fill("cent cinquante")
    admin.locator("input[name=bank_reference]").fill("BNP 2026-12-03 n° 41")
    admin.locator("#content-main form input[type=submit]").click()
    expect(admin.locator("ul.errorlist")).to_be_visible()  # text: refused, nothing credited
    assert TopUp.objects.get(pk=top_up.pk).status == TopUpStatus.PENDING
    admin.locator("input[name=received]").fill("150,00")
    admin.locator("textarea[name=reason]").fill("Relevé bancaire du 3 décembre")
    admin.locator("#content-main form input[type=submit]").click()
    admin.wait_for_url(f"{base}/fr/admin/billing/topup/{top_up.pk}/change/")
    expect(admin.locator("ul.messagelist li.success")).to_have_text(credited)
    expect(admin.locator(".field-received_difference .readonly")).to_have_text(
        formatting.money(Decimal("6.00"), "EUR", language="fr")
    )
    expect(admin.locator(".field-bank_reference .readonly")).to_have_text("BNP 2026-12-03 n° 41")
    admin.context.close()

    top_up.refresh_from_db()
    assert (top_up.status, top_up.credited_by) == (TopUpStatus.PAID, operator)
    assert (top_up.amount, top_up.vat_amount, top_up.total, top_up.expected_total) == (
        Decimal("125.00"), Decimal("25.00"), Decimal("150.00"), Decimal("144.00")
    )
    assert Wallet.objects.get(user=buyer).balance == Decimal("125.00")
    entry = AuditEntry.objects.get(action=AuditAction.TOP_UP_CREDIT)
    assert (entry.actor, entry.reason) == (operator, "Relevé bancaire du 3 décembre")

    # The buyer, in another browser, sees the money on the account page, written the French way.
    shop = new_page(browser, "fr")
    shop.goto(f"{base}/fr/account/login/")
    shop.locator("input[name=login]").fill(buyer.email)
    shop.locator("input[name=password]").fill(PASSWORD)
    shop.locator("main form button[type=submit]").last.click()
    shop.wait_for_url(f"{base}/fr/account/")
    balance = formatting.money(Decimal("125.00"), "EUR", language="fr")
    assert balance == "125,00\u00a0€"
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
