from decimal import Decimal
from urllib.parse import quote

import pytest
from django.test import override_settings
from django.urls import reverse
from django.utils import translation
from django.utils.html import escape
from django.utils.translation import gettext

from billing.exceptions import PayoutRefused
from billing.models import LedgerAccount, LedgerEntry, LedgerTransaction, Payout, PayoutStatus
from billing.selectors import payout_available
from billing.services import payout_mark_paid, payout_reject, payout_request
from sellers.models import MemberRole
from tests.admin_support import action_post, operator_client
from tests.billing.support import balance, earn, member
from tests.factories import SellerFactory, UserFactory, operator_make
from tests.threads import run_together

Kind = LedgerAccount.Kind


def ledger_state():
    return (LedgerTransaction.objects.count(), LedgerEntry.objects.count(), Payout.objects.count())


def url(name, language="en"):
    with translation.override(language):
        return reverse(name)


@pytest.fixture
def seller():
    seller = SellerFactory(name="Alpha GPU Lda")
    earn(seller, "300.00")
    return seller


@pytest.fixture
def owner(seller):
    return member(seller)


@pytest.fixture
def operator():
    return operator_make()


# --- services ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_request_reserves_the_amount_at_once(seller, owner):
    payout = payout_request(seller_id=seller.pk, requested_by=owner, amount_text="120.50")
    assert (payout.status, payout.amount, payout.currency) == (
        PayoutStatus.REQUESTED, Decimal("120.50"), "USD"
    )
    assert payout.reservation.idempotency_key == f"payout:{payout.pk}:reserve"
    assert sum(entry.amount.amount for entry in payout.reservation.entries.all()) == 0
    assert payout_available(seller=seller) == Decimal("179.50")
    assert balance(f"seller_earnings:{seller.pk}:USD") == Decimal("179.50")
    assert balance("payouts_pending:USD") == Decimal("120.50")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("amount", "code"),
    [
        ("49.99", "payout_below_minimum"),
        ("300.01", "payout_above_available"),
        ("lots", "amount_not_a_number"),
        ("", "amount_not_a_number"),
        ("10.001", "amount_too_many_decimals"),
        ("-60", "payout_below_minimum"),
    ],
)
def test_bad_requests_are_refused_and_move_nothing(seller, owner, amount, code):
    before = ledger_state()
    with pytest.raises(PayoutRefused) as refused:
        payout_request(seller_id=seller.pk, requested_by=owner, amount_text=amount)
    assert refused.value.code == code
    assert ledger_state() == before
    assert payout_available(seller=seller) == Decimal("300.00")


@pytest.mark.django_db
@override_settings(PAYOUT_MINIMUM_USD=Decimal("100"))
def test_minimum_is_a_setting(seller, owner):
    with pytest.raises(PayoutRefused) as refused:
        payout_request(seller_id=seller.pk, requested_by=owner, amount_text="99.99")
    assert refused.value.code == "payout_below_minimum"
    payout_request(seller_id=seller.pk, requested_by=owner, amount_text="100")


@pytest.mark.django_db
def test_only_owners_request(seller):
    before = ledger_state()
    for user in (member(seller, role=MemberRole.MEMBER), UserFactory(), member(SellerFactory())):
        with pytest.raises(PayoutRefused) as refused:
            payout_request(seller_id=seller.pk, requested_by=user, amount_text="60")
        assert refused.value.code == "payout_not_owner"
    assert ledger_state() == before


@pytest.mark.django_db
def test_mark_paid_once(seller, owner, operator):
    payout = payout_request(seller_id=seller.pk, requested_by=owner, amount_text="100")
    paid = payout_mark_paid(payout_id=payout.pk, operator=operator, reason="SEPA 2026-11-29 #1")
    state = ledger_state()
    with pytest.raises(PayoutRefused) as twice:
        payout_mark_paid(payout_id=payout.pk, operator=operator_make(), reason="again")
    assert twice.value.code == "payout_already_paid"
    assert ledger_state() == state
    paid.refresh_from_db()
    assert (paid.status, paid.decided_by) == (PayoutStatus.PAID, operator)
    assert paid.settlement.idempotency_key == f"payout:{payout.pk}:paid"
    assert balance("payouts_pending:USD") == 0
    assert balance("clearing:bank:USD") == Decimal("100.00")
    assert payout_available(seller=seller) == Decimal("200.00")
    with pytest.raises(PayoutRefused) as refused:
        payout_reject(payout_id=payout.pk, operator=operator, reason="late")
    assert refused.value.code == "payout_already_paid"
    assert ledger_state() == state


@pytest.mark.django_db
def test_reject_releases_the_reservation(seller, owner, operator):
    payout = payout_request(seller_id=seller.pk, requested_by=owner, amount_text="100")
    with pytest.raises(PayoutRefused) as refused:
        payout_reject(payout_id=payout.pk, operator=operator, reason="  ")
    assert refused.value.code == "payout_reason_missing"
    rejected = payout_reject(payout_id=payout.pk, operator=operator, reason="IBAN closed")
    assert (rejected.status, rejected.rejection_reason) == (PayoutStatus.REJECTED, "IBAN closed")
    assert rejected.settlement.idempotency_key == f"payout:{payout.pk}:release"
    assert payout_available(seller=seller) == Decimal("300.00")
    assert balance("payouts_pending:USD") == 0
    state = ledger_state()
    with pytest.raises(PayoutRefused):
        payout_reject(payout_id=payout.pk, operator=operator, reason="again")
    with pytest.raises(PayoutRefused):
        payout_mark_paid(payout_id=payout.pk, operator=operator, reason="paid")
    assert ledger_state() == state


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_requests_exceeding_the_earnings_one_succeeds():
    seller = SellerFactory()
    earn(seller, "150.00")
    owners = [member(seller), member(seller)]

    results, errors = run_together(
        2, lambda index: payout_request(seller_id=seller.pk, requested_by=owners[index], amount_text="100")
    )
    assert len(results) == 1, errors
    assert len(errors) == 1 and isinstance(errors[0], PayoutRefused)
    assert errors[0].code == "payout_above_available"
    assert Payout.objects.count() == 1
    assert payout_available(seller=seller) == Decimal("50.00")
    assert balance("payouts_pending:USD") == Decimal("100.00")


# --- portal --------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("language", ["en", "pt", "fr"])
def test_payouts_page_renders_for_an_owner(client, seller, owner, operator, language):
    payout = payout_request(seller_id=seller.pk, requested_by=owner, amount_text="60")
    payout_reject(payout_id=payout.pk, operator=operator, reason="Wrong account")
    client.force_login(owner)
    with translation.override(language):
        page = client.get(url("sellers:portal-payouts", language)).content.decode()
        assert escape(gettext("Earnings and payouts")) in page
        assert escape(gettext("Request a payout")) in page
        assert escape(str(PayoutStatus.REJECTED.label)) in page
        assert "Wrong account" in page
        dashboard = client.get(url("sellers:portal", language)).content.decode()
        assert url("sellers:portal-payouts", language) in dashboard


@pytest.mark.django_db
def test_request_from_the_portal(client, seller, owner):
    client.force_login(owner)
    response = client.post(url("sellers:portal-payout-request"), {"amount": "75.00"})
    assert response.status_code == 302 and response["Location"] == url("sellers:portal-payouts")
    assert Payout.objects.get().amount == Decimal("75.00")
    before = ledger_state()
    response = client.post(url("sellers:portal-payout-request"), {"amount": "1000"})
    assert response.status_code == 400
    assert "225" in response.content.decode()
    assert ledger_state() == before


@pytest.mark.django_db
def test_member_sees_payouts_but_cannot_request(client, seller):
    client.force_login(member(seller, role=MemberRole.MEMBER))
    page = client.get(url("sellers:portal-payouts")).content.decode()
    assert escape(gettext("Only the owners of your seller can request a payout.")) in page
    before = ledger_state()
    response = client.post(url("sellers:portal-payout-request"), {"amount": "60"})
    assert response.status_code == 400
    assert ledger_state() == before


@pytest.mark.django_db
def test_other_sellers_payouts_are_never_shown_or_touched(client, seller, owner):
    other = SellerFactory(name="Beta Compute")
    earn(other, "500.00")
    payout_request(seller_id=other.pk, requested_by=member(other), amount_text="444.44")
    client.force_login(owner)
    page = client.get(url("sellers:portal-payouts")).content.decode()
    assert "444" not in page and "500" not in page
    before = ledger_state()
    client.post(url("sellers:portal-payout-request"), {"amount": "60", "seller_id": other.pk})
    assert payout_available(seller=other) == Decimal("55.56")
    assert Payout.objects.filter(seller=seller).count() == 1
    assert ledger_state()[0] == before[0] + 1


@pytest.mark.django_db
def test_non_members_are_sent_away(client, seller):
    pages = [("get", url("sellers:portal-payouts")), ("post", url("sellers:portal-payout-request"))]
    for method, address in pages:
        assert getattr(client, method)(address).status_code == 302
    client.force_login(UserFactory())
    for method, address in pages:
        response = client.post(address, {"amount": "60"}) if method == "post" else client.get(address)
        assert response.status_code == 302 and response["Location"] == url("sellers:sell")
    client.force_login(member(seller, mfa=False))
    response = client.post(url("sellers:portal-payout-request"), {"amount": "60"})
    assert response.status_code == 302
    back = quote(url("sellers:portal"), safe="")
    assert response["Location"] == f'{url("sellers:two-factor")}?next={back}'
    assert not Payout.objects.exists()


@pytest.mark.django_db
def test_admin_actions_call_the_services(client, seller, owner):
    admin_client = client
    operator = operator_client(client, role="finance")
    first = payout_request(seller_id=seller.pk, requested_by=owner, amount_text="60")
    second = payout_request(seller_id=seller.pk, requested_by=owner, amount_text="70")
    changelist = reverse("admin:billing_payout_changelist")
    for _ in range(2):
        response = action_post(admin_client, changelist, "mark_paid", [first.pk], reference="SEPA ref 4411")
        assert response.status_code in (200, 302)  # the second time, the form shows the refusal
    action_post(admin_client, changelist, "reject", [second.pk], reason="Wrong IBAN")
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, second.status) == (PayoutStatus.PAID, PayoutStatus.REJECTED)
    assert (first.decided_by, second.rejection_reason) == (operator, "Wrong IBAN")
    assert payout_available(seller=seller) == Decimal("240.00")
    assert admin_client.get(reverse("admin:billing_payout_change", args=[first.pk])).status_code == 200
