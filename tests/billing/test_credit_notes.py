"""A top-up refund issues a credit note: its own gapless series, the corrected invoice named, the
refunded amount and VAT, shown to the buyer only, as a page and a PDF."""

from datetime import datetime
from decimal import Decimal
from uuid import uuid4

import pytest
from django.utils import timezone

from billing.exceptions import CorrectionRefused
from billing.models import CreditNote
from billing.services import top_up_refund
from tests.billing.support import START, document_page_lines, paid_invoice, pdf_lines, signed_in, spaced
from tests.factories import ProfileFactory, operator_make
from tests.threads import run_together

pytestmark = pytest.mark.django_db


def refund(invoice, amount: str):
    return top_up_refund(
        top_up_id=invoice.top_up_id, operator=operator_make("finance"), amount_text=amount,
        reason="Customer asked", request_key=uuid4().hex,
    )


def test_a_refund_issues_a_credit_note_that_corrects_the_invoice():
    invoice = paid_invoice(ProfileFactory().user)  # 50.00 EUR + 23 % VAT, Portugal
    note = refund(invoice, "20").credit_note
    year = timezone.now().year
    assert note.number == f"EXC-CN-{year}-000001"
    assert (note.invoice, note.currency, note.net, note.vat_amount, note.total) == (
        invoice, "EUR", Decimal("20.00"), Decimal("4.60"), Decimal("24.60")
    )
    assert (note.vat_kind, note.vat_rate, note.buyer, note.seller) == (
        invoice.vat_kind, invoice.vat_rate, invoice.buyer, invoice.seller
    )
    second = refund(invoice, "30").credit_note
    assert second.number == f"EXC-CN-{year}-000002"
    assert (second.net, second.vat_amount) == (Decimal("30.00"), Decimal("6.90"))  # all VAT back: 11.50


def test_a_refused_refund_takes_no_number():
    invoice = paid_invoice(ProfileFactory().user)
    with pytest.raises(CorrectionRefused) as refused:  # more than the top-up
        refund(invoice, "50.01")
    assert refused.value.code == "refund_exceeds_top_up"
    assert refund(invoice, "1").credit_note.number.endswith("-000001")


@pytest.mark.django_db(transaction=True)
def test_concurrent_refunds_of_different_top_ups_get_gapless_numbers():
    invoices = [paid_invoice(ProfileFactory().user) for _ in range(6)]
    operator = operator_make("finance")
    results, errors = run_together(len(invoices), lambda index: top_up_refund(
        top_up_id=invoices[index].top_up_id, operator=operator, amount_text="5", reason="Outage",
        request_key=uuid4().hex,
    ))
    assert not errors and len(results) == len(invoices)
    sequences = sorted(CreditNote.objects.values_list("sequence", flat=True))
    assert sequences == [1, 2, 3, 4, 5, 6]


def test_the_buyer_reads_the_credit_note_in_french_and_downloads_it(time_machine):
    time_machine.move_to(START, tick=False)
    user = ProfileFactory().user
    invoice = paid_invoice(user)
    note = refund(invoice, "20").credit_note
    client = signed_in(user)
    page = document_page_lines(client.get(f"/fr/account/credit-notes/{note.number}/").content.decode())
    assert page[:3] == [
        f"Avoir {note.number}", f"Rectifie la facture {invoice.number}", "Émise le 1er décembre 2026"
    ]
    assert page[-3:] == [
        "Remboursement du solde prépayé pour des heures GPU sur EverXCloud 20,00\u00a0€",
        "TVA (23\u00a0%) 4,60\u00a0€",
        "Total remboursé 24,60\u00a0€",
    ]

    response = client.get(f"/fr/account/credit-notes/{note.number}/pdf/")

    assert response["Content-Type"] == "application/pdf"
    pdf = pdf_lines(response.content)
    assert pdf[:3] == page[:3] and pdf[-3:] == page[-3:]  # number, invoice, date, amounts and VAT
    assert spaced(pdf) == spaced(page)  # and the parties between them, line for line
    overview = client.get("/fr/account/").content.decode()
    assert f"/fr/account/credit-notes/{note.number}/" in overview


def test_nobody_reads_someone_elses_credit_note():
    note = refund(paid_invoice(ProfileFactory().user), "20").credit_note
    client = signed_in(ProfileFactory().user)
    assert client.get(f"/en/account/credit-notes/{note.number}/").status_code == 404
    assert client.get(f"/en/account/credit-notes/{note.number}/pdf/").status_code == 404
    assert client.get("/en/account/credit-notes/EXC-CN-1999-000001/").status_code == 404


@pytest.mark.parametrize("refunded_top_ups", [1, 12])
def test_the_account_page_stays_at_a_fixed_number_of_queries(django_assert_max_num_queries, refunded_top_ups):
    user = ProfileFactory().user
    for _ in range(refunded_top_ups):
        invoice = paid_invoice(user)
        refund(invoice, "1")
        refund(invoice, "2")
    client = signed_in(user)
    with django_assert_max_num_queries(10):
        assert client.get("/en/account/").status_code == 200


def test_credit_note_year_follows_the_issue_date(time_machine):
    time_machine.move_to(datetime(2027, 1, 1, 0, 5, tzinfo=timezone.get_current_timezone()), tick=False)
    note = refund(paid_invoice(ProfileFactory().user), "3").credit_note
    assert note.number == "EXC-CN-2027-000001" and note.year == 2027
