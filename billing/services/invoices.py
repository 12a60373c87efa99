"""Invoices and credit notes: each in a gapless yearly series of its own, with the parties and the
VAT treatment written into the document when it is issued, never read again from the profile."""

from decimal import Decimal

from django.conf import settings
from django.utils import timezone

from accounts.models import Profile

from ..models import (
    CreditNote,
    CreditNoteSequence,
    Invoice,
    InvoiceSequence,
    TopUp,
    TopUpRefund,
    TopUpVatRefund,
)


def _buyer_details(top_up: TopUp) -> dict:
    profile = Profile.objects.filter(user=top_up.user).first()
    return {
        "email": top_up.user.email,
        "name": profile.name if profile else "",
        "company_name": profile.company_name if profile else "",
        "address": profile.address if profile else "",
        "country": top_up.billing_country,
        "vat_id": profile.vat_id if profile else "",
    }


def _number_take(sequence_model, year: int) -> int:
    """The next number of a year's series, with no gaps: the counter row is locked until the calling
    transaction commits, so numbers are taken in commit order and a rollback gives its number back."""
    sequence_model.objects.bulk_create([sequence_model(year=year)], ignore_conflicts=True)
    counter = sequence_model.objects.select_for_update().get(year=year)
    counter.last_number += 1
    counter.save(update_fields=["last_number"])
    return counter.last_number


def invoice_issue(*, top_up: TopUp) -> Invoice:
    """The invoice of a paid top-up, numbered EXC-<year>-<6 digits> with no gaps."""
    issued_at = timezone.now()
    year = issued_at.year
    number = _number_take(InvoiceSequence, year)
    return Invoice.objects.create(
        number=f"EXC-{year}-{number:06d}", year=year, sequence=number,
        top_up=top_up, issued_at=issued_at, seller=dict(settings.PLATFORM_COMPANY),
        buyer=_buyer_details(top_up), currency=top_up.currency, net=top_up.amount,
        vat_kind=top_up.vat_kind, vat_rate=top_up.vat_rate, vat_amount=top_up.vat_amount,
        total=top_up.total,
    )


def credit_note_issue(*, refund: TopUpRefund) -> CreditNote:
    """The credit note of a top-up refund, numbered EXC-CN-<year>-<6 digits> in its own gapless
    series; it names the invoice it corrects and repeats its parties and VAT treatment."""
    return _credit_note_create(
        invoice=refund.top_up.invoice, refund=refund, net=refund.amount, vat=refund.vat_amount
    )


def credit_note_issue_for_vat_refund(*, vat_refund: TopUpVatRefund) -> CreditNote:
    """The credit note of a VAT refund, in the same series: the VAT alone (net zero), at the rate of
    the invoice it corrects."""
    return _credit_note_create(
        invoice=vat_refund.top_up.invoice, vat_refund=vat_refund, net=Decimal("0.00"),
        vat=vat_refund.vat_amount,
    )


def _credit_note_create(*, invoice: Invoice, net: Decimal, vat: Decimal, **source) -> CreditNote:
    """`source` is the refund the note documents: `refund=` or `vat_refund=`."""
    issued_at = timezone.now()
    year = issued_at.year
    number = _number_take(CreditNoteSequence, year)
    return CreditNote.objects.create(
        number=f"EXC-CN-{year}-{number:06d}", year=year, sequence=number, invoice=invoice,
        issued_at=issued_at, seller=invoice.seller, buyer=invoice.buyer, currency=invoice.currency,
        net=net, vat_kind=invoice.vat_kind, vat_rate=invoice.vat_rate, vat_amount=vat, total=net + vat,
        **source,
    )
