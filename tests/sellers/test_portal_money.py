"""The seller portal's money pages: payout details (owners change them), the earnings ledger and
the pending payouts on the dashboard."""

from decimal import Decimal

import pytest
from allauth.mfa.models import Authenticator
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import translation
from django.utils.html import escape
from django.utils.translation import gettext

from billing.ledger import ledger_account_for_seller, ledger_account_system, ledger_post
from billing.models import LedgerAccount, LedgerTransaction
from billing.selectors import seller_earnings_entries
from billing.services import payout_request
from marketplace import formatting
from sellers.exceptions import PayoutDetailsInvalid
from sellers.models import MemberRole, SellerMembership
from sellers.services import seller_payout_details_update
from tests.factories import SellerFactory, UserFactory, operator_make

pytestmark = pytest.mark.django_db

VALID_IBAN = "PT50000201231234567890154"
LANGUAGES = ("en", "pt", "fr")


def url(name, language="en"):
    with translation.override(language):
        return reverse(name)


def member(seller, *, role=MemberRole.OWNER):
    user = UserFactory()
    SellerMembership.objects.create(seller=seller, user=user, role=role)
    Authenticator.objects.create(user=user, type=Authenticator.Type.TOTP, data={"secret": "x"})
    return user


def charge(seller, n: int, net: str = "9.00", fee: str = "1.00"):
    """A rental charge: the seller's earnings and the platform fee, against the adjustments account."""
    net, fee = Decimal(net), Decimal(fee)
    ledger_post(
        idempotency_key=f"test-charge:{seller.pk}:{n}",
        kind=LedgerTransaction.Kind.CHARGE,
        description="test charge",
        lines=[
            (ledger_account_for_seller(seller=seller, currency="USD"), net),
            (ledger_account_system(kind=LedgerAccount.Kind.PLATFORM_REVENUE, currency="USD"), fee),
            (ledger_account_system(kind=LedgerAccount.Kind.ADJUSTMENTS, currency="USD"), -(net + fee)),
        ],
    )


def text(response) -> str:
    return response.content.decode()


@pytest.fixture
def seller():
    return SellerFactory(
        name="Alpha GPU Lda", payout_iban="PT50000201231234567890154", payout_account_holder="Alpha GPU Lda"
    )


def details(seller):
    seller.refresh_from_db()
    return seller.payout_iban, seller.payout_account_holder


# --- payout details ------------------------------------------------------------------------------


def test_owner_changes_payout_details(client, seller):
    client.force_login(member(seller))
    response = client.post(url("sellers:portal-payout-details"), {
        "iban": "fr76 3000 6000 0112 3456 7890 189", "account_holder": "Alpha GPU SAS",
    })
    assert response.status_code == 302
    assert details(seller) == ("FR7630006000011234567890189", "Alpha GPU SAS")
    page = text(client.get(url("sellers:portal-payout-details")))
    assert "0189" in page and "FR7630006000011234567890189" not in page


@pytest.mark.parametrize("language", LANGUAGES)
def test_malformed_iban_names_the_format_and_changes_nothing(client, seller, language):
    client.force_login(member(seller))
    before = details(seller)
    response = client.post(url("sellers:portal-payout-details", language), {
        "iban": "PT50 1234", "account_holder": "Someone else",
    })
    assert response.status_code == 400
    with translation.override(language):
        message = gettext("This is not a valid IBAN. Expected format, for example: %(example)s.") % {
            "example": "PT50 0000 0000 0000 0000 0000 0"
        }
    assert escape(message) in text(response)
    assert details(seller) == before


def test_member_cannot_change_payout_details(client, seller):
    user = member(seller, role=MemberRole.MEMBER)
    client.force_login(user)
    before = details(seller)
    page = client.get(url("sellers:portal-payout-details"))
    assert page.status_code == 200
    assert "0154" in text(page) and VALID_IBAN not in text(page)
    assert 'name="iban"' not in text(page)
    response = client.post(url("sellers:portal-payout-details"), {
        "iban": "FR7630006000011234567890189", "account_holder": "Mallory",
    })
    assert response.status_code == 403
    assert details(seller) == before
    with pytest.raises(PayoutDetailsInvalid) as refused:
        seller_payout_details_update(
            seller=seller, user=user, iban="FR7630006000011234567890189", account_holder="Mallory"
        )
    assert refused.value.code == "not_owner"
    assert details(seller) == before


def test_another_sellers_member_cannot_see_them(client, seller):
    other = SellerFactory(payout_iban="DE89370400440532013000", payout_account_holder="Other GmbH")
    client.force_login(member(other))
    for name in ("sellers:portal-payout-details", "sellers:portal-payouts"):
        page = text(client.get(url(name)))
        assert "Alpha GPU Lda" not in page and "0154" not in page
        assert "3000" in page  # its own account, masked
    response = client.post(url("sellers:portal-payout-details"), {
        "iban": "FR7630006000011234567890189", "account_holder": "Mallory",
    })
    assert response.status_code == 302
    assert details(seller) == (VALID_IBAN, "Alpha GPU Lda")


def test_payouts_page_shows_masked_details(client, seller):
    client.force_login(member(seller, role=MemberRole.MEMBER))
    page = text(client.get(url("sellers:portal-payouts")))
    assert "Alpha GPU Lda" in page and "0154" in page and VALID_IBAN not in page


# --- earnings ------------------------------------------------------------------------------------


def test_earnings_entries_newest_first_with_their_kind(seller):
    charge(seller, 1)
    charge(seller, 2, net="18.00", fee="2.00")
    entries = seller_earnings_entries(seller_id=seller.pk)
    assert [entry.amount for entry in entries] == [Decimal("18.00"), Decimal("9.00")]
    assert {entry.label for entry in entries} == {"Rental charge"}


@pytest.mark.parametrize("language", LANGUAGES)
def test_earnings_page_lists_entries_and_months(client, seller, language):
    for n in range(3):
        charge(seller, n)
    client.force_login(member(seller, role=MemberRole.MEMBER))
    response = client.get(url("sellers:portal-earnings", language))
    assert response.status_code == 200
    page = text(response)
    with translation.override(language):
        assert escape(gettext("Rental charge")) in page
        assert escape(gettext("Earnings per month")) in page
        assert escape(formatting.usd(Decimal("27.00"))) in page  # net
        assert escape(formatting.usd(Decimal("30.00"))) in page  # gross
        assert escape(formatting.usd(Decimal("3.00"))) in page  # fee


def test_earnings_page_runs_a_constant_number_of_queries(client, seller):
    client.force_login(member(seller))
    for n in range(2):
        charge(seller, n)
    with CaptureQueriesContext(connection) as few:
        assert client.get(url("sellers:portal-earnings")).status_code == 200
    for n in range(2, 10):
        charge(seller, n)
    with CaptureQueriesContext(connection) as many:
        assert client.get(url("sellers:portal-earnings")).status_code == 200
    assert len(many) == len(few)


def test_earnings_page_names_payout_reserves(client, seller):
    charge(seller, 1, net="900.00", fee="100.00")
    owner = member(seller)
    payout_request(seller_id=seller.pk, requested_by=owner, amount_text="500")
    client.force_login(owner)
    page = text(client.get(url("sellers:portal-earnings")))
    assert "Reserved for a payout" in page
    assert escape(formatting.usd(Decimal("-500.00"))) in page


# --- dashboard -----------------------------------------------------------------------------------


@pytest.mark.parametrize("language", LANGUAGES)
def test_dashboard_shows_pending_payouts(client, seller, language):
    charge(seller, 1, net="900.00", fee="100.00")
    owner = member(seller)
    payout_request(seller_id=seller.pk, requested_by=owner, amount_text="200")
    payout_request(seller_id=seller.pk, requested_by=owner, amount_text="150")
    client.force_login(owner)
    page = text(client.get(url("sellers:portal", language)))
    with translation.override(language):
        assert escape(formatting.usd(Decimal("350.00"))) in page
        assert reverse("sellers:portal-earnings") in page
    assert 'data-testid="payouts-pending"' in page


def test_approval_copies_the_payout_details_of_the_application():
    from sellers.services import application_approve
    from tests.sellers.support import submitted

    application = submitted()
    seller = application_approve(application_id=application.pk, operator=operator_make())
    seller.refresh_from_db()
    assert (seller.payout_iban, seller.payout_account_holder) == (
        application.iban, application.account_holder
    )
    assert seller.payout_iban
