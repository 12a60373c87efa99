"""Crediting a bank transfer with the amount actually received and the bank's reference, marking a
payout paid with its transfer reference, and the operations page's list of waiting work."""

import threading
import uuid
from decimal import Decimal

import pytest
from django.db import close_old_connections
from django.urls import reverse
from django.utils import timezone, translation

from accounts.exceptions import OperatorNotAllowed
from accounts.models import AuditAction, AuditEntry, Wallet
from billing.exceptions import PayoutRefused, TopUpRejected
from billing.models import Invoice, LedgerEntry, LedgerTransaction, Payout, PayoutStatus, TopUp, TopUpStatus
from billing.services import payout_mark_paid, payout_request, top_up_bank_transfer_credit, top_up_create
from billing.vat import vat_split_gross
from marketplace import formatting
from sellers.models import ServerStatus
from tests.admin_support import action_post, operator_client
from tests.billing.support import assert_books_consistent, earn, entries_by_code, member
from tests.factories import ProfileFactory, SellerFactory, ServerFactory, operator_make

D = Decimal


def bank_top_up(amount: str = "200", currency: str = "EUR", **profile) -> TopUp:
    user = ProfileFactory(**profile).user
    return top_up_create(user=user, amount_text=amount, currency=currency, provider="bank",
                         form_token=uuid.uuid4())


def books() -> tuple:
    return (
        LedgerTransaction.objects.count(),
        list(LedgerEntry.objects.order_by("pk").values_list("pk", "amount")),
        list(Wallet.objects.order_by("pk").values_list("pk", "balance")),
        list(TopUp.objects.order_by("pk").values_list(
            "pk", "status", "amount", "vat_amount", "total", "bank_reference", "expected_total"
        )),
        Invoice.objects.count(),
        list(Payout.objects.order_by("pk").values_list("pk", "status", "bank_reference")),
        AuditEntry.objects.count(),
    )


# --- the VAT split of a gross sum -----------------------------------------------------------------


@pytest.mark.parametrize(("gross", "rate", "net", "vat"), [
    ("123.00", "23", "100.00", "23.00"),
    ("100.00", "23", "81.30", "18.70"),
    ("250.00", "23", "203.25", "46.75"),
    ("0.01", "23", "0.01", "0.00"),
    ("95.50", "0", "95.50", "0.00"),
    ("119.99", "19", "100.83", "19.16"),
])
def test_a_gross_sum_splits_into_net_and_vat_that_add_up(gross, rate, net, vat):
    assert vat_split_gross(gross=D(gross), rate=D(rate), currency="EUR") == (D(net), D(vat))


# --- the service ----------------------------------------------------------------------------------


@pytest.mark.django_db
class TestCredit:
    def test_a_portuguese_consumer_sends_more_than_asked_and_vat_is_worked_out_again(self):
        top_up = bank_top_up("200")  # 200.00 + 23 % = 246.00 asked
        finance = operator_make("finance")

        credited = top_up_bank_transfer_credit(
            top_up_id=top_up.pk, received="250,00", reference=" CGD  2026-12-03 / 88 ", operator=finance
        )

        assert (credited.status, credited.credited_by) == (TopUpStatus.PAID, finance)
        assert (credited.amount, credited.vat_amount, credited.total) == (
            D("203.25"), D("46.75"), D("250.00")
        )
        assert (credited.expected_amount, credited.expected_vat_amount, credited.expected_total) == (
            D("200.00"), D("46.00"), D("246.00")
        )
        assert credited.received_difference == D("4.00")
        assert credited.bank_reference == "CGD 2026-12-03 / 88"
        wallet = Wallet.objects.get(user=top_up.user)
        assert wallet.balance == D("203.25")
        assert entries_by_code(credited.ledger_transaction) == {
            "clearing:bank:EUR": D("-250.00"), f"wallet:{wallet.pk}": D("203.25"),
            "vat_payable:EUR": D("46.75"),
        }
        invoice = Invoice.objects.get(top_up=credited)
        assert (invoice.net, invoice.vat_rate, invoice.vat_amount, invoice.total) == (
            D("203.25"), D("23.00"), D("46.75"), D("250.00")
        )
        entry = AuditEntry.objects.get(action=AuditAction.TOP_UP_CREDIT)
        assert (entry.actor, entry.reason) == (finance, "CGD 2026-12-03 / 88")
        assert_books_consistent()

    def test_a_reverse_charged_business_sends_less_and_no_vat_is_added(self):
        top_up = bank_top_up(
            "100", billing_country="DE", billing_type="business", company_name="GPU Labs GmbH",
            vat_id="DE136695976", vat_id_status="valid", vat_id_checked_at=timezone.now(),
        )
        assert (top_up.vat_kind, top_up.total) == ("reverse_charge", D("100.00"))

        credited = top_up_bank_transfer_credit(
            top_up_id=top_up.pk, received=D("95.50"), reference="DB-4471", operator=operator_make("finance")
        )

        assert (credited.amount, credited.vat_amount, credited.total) == (D("95.50"), D("0.00"), D("95.50"))
        assert credited.received_difference == D("-4.50")
        wallet = Wallet.objects.get(user=top_up.user)
        assert wallet.balance == D("95.50")
        assert entries_by_code(credited.ledger_transaction) == {
            "clearing:bank:EUR": D("-95.50"), f"wallet:{wallet.pk}": D("95.50"),
        }
        assert Invoice.objects.get(top_up=credited).vat_kind == "reverse_charge"
        assert_books_consistent()

    def test_a_buyer_outside_the_eu_pays_no_vat_on_what_arrived(self):
        top_up = bank_top_up("100", currency="USD", billing_country="US")

        credited = top_up_bank_transfer_credit(
            top_up_id=top_up.pk, received="100.01", reference="CHASE 1", operator=operator_make("finance")
        )

        assert (credited.vat_kind, credited.amount, credited.vat_amount, credited.total) == (
            "outside_scope", D("100.01"), D("0.00"), D("100.01")
        )
        assert credited.received_difference == D("0.01")
        assert Wallet.objects.get(user=top_up.user).balance == D("100.01")
        assert_books_consistent()

    def test_the_amount_asked_is_credited_as_quoted(self):
        top_up = bank_top_up("200")
        credited = top_up_bank_transfer_credit(
            top_up_id=top_up.pk, received="246", reference="REF 1", operator=operator_make("finance")
        )
        assert (credited.amount, credited.vat_amount, credited.total) == (
            D("200.00"), D("46.00"), D("246.00")
        )
        assert (credited.expected_total, credited.received_difference, credited.bank_reference) == (
            None, None, "REF 1"
        )

    @pytest.mark.parametrize(("received", "code"), [
        ("-5", "amount_not_positive"), ("0", "amount_not_positive"), ("0,00", "amount_not_positive"),
        ("12.345", "amount_too_many_decimals"), (D("12.345"), "amount_too_many_decimals"),
        ("cinquenta", "amount_not_a_number"), ("", "amount_not_a_number"),
        ("1.000,00", "amount_thousands_separator"), ("1e3", "amount_not_a_number"),
        ("NaN", "amount_not_finite"),
        ("99999999999", "amount_too_large"),
    ])
    def test_bad_amounts_are_refused_and_nothing_moves(self, received, code):
        top_up = bank_top_up("200")
        finance = operator_make("finance")
        before = books()
        with translation.override("pt"), pytest.raises(TopUpRejected) as refused:
            top_up_bank_transfer_credit(
                top_up_id=top_up.pk, received=received, reference="R", operator=finance
            )
        assert refused.value.code == code
        assert refused.value.message  # translated, never empty
        assert books() == before

    def test_the_bank_reference_is_required(self):
        top_up = bank_top_up("200")
        before = books()
        with pytest.raises(TopUpRejected) as refused:
            top_up_bank_transfer_credit(
                top_up_id=top_up.pk, received="246", reference="   ", operator=operator_make("finance")
            )
        assert refused.value.code == "reference_missing"
        assert books() == before

    def test_a_transfer_is_credited_once(self):
        top_up = bank_top_up("200")
        finance = operator_make("finance")
        top_up_bank_transfer_credit(top_up_id=top_up.pk, received="246", reference="R1", operator=finance)
        before = books()
        with pytest.raises(TopUpRejected) as refused:
            top_up_bank_transfer_credit(top_up_id=top_up.pk, received="300", reference="R2", operator=finance)
        assert refused.value.code == "already_credited"
        assert books() == before

    def test_support_cannot_credit(self):
        top_up = bank_top_up("200")
        before = books()
        with pytest.raises(OperatorNotAllowed):
            top_up_bank_transfer_credit(
                top_up_id=top_up.pk, received="246", reference="R1", operator=operator_make("support")
            )
        assert books() == before


@pytest.mark.django_db(transaction=True)
def test_two_operators_crediting_at_once_credit_once():
    top_up = bank_top_up("200")
    operators = [operator_make("finance"), operator_make("finance")]
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def credit(operator, received):
        try:
            barrier.wait(timeout=10)
            top_up_bank_transfer_credit(
                top_up_id=top_up.pk, received=received, reference="R", operator=operator
            )
            outcomes.append("credited")
        except TopUpRejected as refused:
            outcomes.append(refused.code)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=credit, args=(operator, received))
               for operator, received in zip(operators, ("250.00", "260.00"), strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes) == ["already_credited", "credited"]
    top_up.refresh_from_db()
    wallet = Wallet.objects.get(user=top_up.user)
    assert wallet.balance == top_up.amount
    assert top_up.total in (D("250.00"), D("260.00"))
    assert LedgerTransaction.objects.filter(idempotency_key=f"top-up:{top_up.pk}").count() == 1
    assert Invoice.objects.filter(top_up=top_up).count() == 1
    assert_books_consistent()


# --- payouts --------------------------------------------------------------------------------------


def requested_payout(**seller_fields) -> Payout:
    seller = SellerFactory(**seller_fields)
    owner = member(seller)
    earn(seller, "100.00")
    return payout_request(seller_id=seller.pk, requested_by=owner, amount_text="60")


@pytest.mark.django_db
def test_a_payout_paid_keeps_its_transfer_reference_and_the_email_says_it(
    mailoutbox, django_capture_on_commit_callbacks
):
    payout = requested_payout()
    with django_capture_on_commit_callbacks(execute=True):
        paid = payout_mark_paid(
            payout_id=payout.pk, operator=operator_make("finance"), reference=" SEPA  77 "
        )
    assert (paid.status, paid.bank_reference) == (PayoutStatus.PAID, "SEPA 77")
    assert AuditEntry.objects.get(action=AuditAction.PAYOUT_PAY).after["bank_reference"] == "SEPA 77"
    assert any("SEPA 77" in message.body for message in mailoutbox)


@pytest.mark.django_db
def test_a_payout_is_not_marked_paid_without_a_reference():
    payout = requested_payout()
    before = books()
    with pytest.raises(PayoutRefused) as refused:
        payout_mark_paid(payout_id=payout.pk, operator=operator_make("finance"), reference="  ")
    assert refused.value.code == "payout_reference_missing"
    assert books() == before


# --- the admin ------------------------------------------------------------------------------------


def credit_url(top_up, language="en"):
    with translation.override(language):
        return reverse("admin:billing_topup_credit_one", args=[top_up.pk])


@pytest.mark.django_db
def test_finance_credits_a_different_amount_in_portuguese_and_sees_the_difference(client):
    operator_client(client, "finance")
    top_up = bank_top_up("200")
    page = credit_url(top_up, "pt")
    response = client.get(page)
    assert response.status_code == 200
    with translation.override("pt"):
        assert formatting.money(D("246.00"), "EUR") in response.content.decode()
    response = client.post(
        page, {"received": "250,00", "bank_reference": "CGD 88", "reason": ""}, follow=True
    )
    assert response.status_code == 200
    top_up.refresh_from_db()
    assert (top_up.status, top_up.amount, top_up.total) == (TopUpStatus.PAID, D("203.25"), D("250.00"))
    html = response.content.decode()
    with translation.override("pt"):
        difference = formatting.money(D("4.00"), "EUR")
    assert html.count(difference) >= 2  # in the confirmation message and on the top-up's page
    assert "CGD 88" in html


@pytest.mark.django_db
@pytest.mark.parametrize("received", ["-1", "0", "1,234", "muito", ""])
def test_bad_amounts_in_the_admin_form_keep_the_form_and_move_nothing(client, received):
    operator_client(client, "finance")
    top_up = bank_top_up("200")
    before = books()
    response = client.post(credit_url(top_up, "fr"), {"received": received, "bank_reference": "R"})
    assert response.status_code == 200
    assert 'class="errorlist' in response.content.decode()
    assert books() == before


@pytest.mark.django_db
def test_support_cannot_open_the_credit_form(client):
    operator_client(client, "support")
    top_up = bank_top_up("200")
    before = books()
    response = client.post(credit_url(top_up), {"received": "246", "bank_reference": "R"})
    assert response.status_code == 302
    assert books() == before


@pytest.mark.django_db
def test_crediting_by_reference_leads_to_the_credit_form(client):
    operator_client(client, "finance")
    top_up = bank_top_up("200")
    response = client.post(reverse("admin:billing_topup_credit"), {"reference": top_up.reference.lower()})
    assert response.status_code == 302 and response["Location"] == credit_url(top_up)
    response = action_post(client, reverse("admin:billing_topup_changelist"), "credit_bank_transfers",
                           [top_up.pk])
    assert response.status_code == 302 and response["Location"] == credit_url(top_up)


@pytest.mark.django_db
def test_the_mark_paid_confirmation_shows_the_iban_and_holder_and_asks_for_the_reference(client):
    operator_client(client, "finance")
    payout = requested_payout(payout_iban="PT50000201231234567890154", payout_account_holder="Lusa GPU, Lda.")
    changelist = reverse("admin:billing_payout_changelist")
    response = client.post(changelist, {"action": "mark_paid", "_selected_action": [payout.pk]})
    html = response.content.decode()
    assert "PT50000201231234567890154" in html and "Lusa GPU, Lda." in html
    before = books()
    response = action_post(client, changelist, "mark_paid", [payout.pk], reference="", reason="")
    assert response.status_code == 200 and 'class="errorlist' in response.content.decode()
    assert books() == before
    response = action_post(client, changelist, "mark_paid", [payout.pk], reference="SEPA 2026-12-03 #4",
                           reason="")
    assert response.status_code == 302
    payout.refresh_from_db()
    assert (payout.status, payout.bank_reference) == (PayoutStatus.PAID, "SEPA 2026-12-03 #4")


# --- the operations page --------------------------------------------------------------------------


def waiting_work(count: int) -> None:
    for _ in range(count):
        bank_top_up("50")
        ServerFactory(status=ServerStatus.PENDING)


@pytest.mark.django_db
def test_the_operations_page_counts_the_waiting_work_in_a_fixed_number_of_queries(
    client, django_assert_max_num_queries
):
    operator_client(client, "finance")
    waiting_work(2)
    page = reverse("admin:operations")
    client.get(page)
    with django_assert_max_num_queries(19) as few:  # the isolation trouble adds two
        response = client.get(page)
    summary = response.context["summary"]
    assert (summary.bank_transfers_waiting, summary.servers_to_verify) == (2, 2)
    waiting_work(13)
    with django_assert_max_num_queries(len(few.captured_queries)):
        response = client.get(page)
    summary = response.context["summary"]
    assert (summary.bank_transfers_waiting, summary.servers_to_verify) == (15, 15)
    html = response.content.decode()
    topups = reverse("admin:billing_topup_changelist")
    assert f"{topups}?provider__exact=bank&amp;status__exact=pending" in html
    assert f"{reverse('admin:sellers_server_changelist')}?status__exact=pending" in html
    assert f"{reverse('admin:sellers_serveragent_changelist')}?unreachable_since__isempty=0" in html
    assert 'id="waiting-bank-transfers"' in html


@pytest.mark.django_db
def test_the_counted_links_open_the_filtered_lists(client):
    operator_client(client)
    waiting_work(1)
    for link in (f"{reverse('admin:billing_topup_changelist')}?provider__exact=bank&status__exact=pending",
                 f"{reverse('admin:sellers_server_changelist')}?status__exact=pending",
                 f"{reverse('admin:sellers_serveragent_changelist')}?unreachable_since__isempty=0"):
        response = client.get(link)
        assert response.status_code == 200, link
        assert "?e=1" not in response.get("Location", "")
