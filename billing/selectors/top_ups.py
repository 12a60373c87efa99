"""Top-ups and their documents (invoices, credit notes) as their owner reads them: another user's
number or id finds nothing."""

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q

from accounts.models import User

from ..models import CreditNote, Invoice, TopUp

INVOICE, CREDIT_NOTE = "invoice", "credit_note"


def top_up_get_for_user(*, user: User, pk: int) -> TopUp | None:
    return (
        TopUp.objects.filter(user=user, pk=pk)
        .select_related("invoice", "vat_refund__credit_note").first()
    )


def invoice_get_for_user(*, user: User, number: str) -> Invoice | None:
    return Invoice.objects.filter(top_up__user=user, number=number).select_related("top_up").first()


def credit_note_get_for_user(*, user: User, number: str) -> CreditNote | None:
    return (
        CreditNote.objects.filter(invoice__top_up__user=user, number=number)
        .select_related("invoice", "vat_refund").first()
    )


@dataclass(frozen=True)
class DocumentPlace:
    """Where a document stands in the list of a user's invoices and credit notes, newest first:
    by issue time, then kind (credit notes after invoices of the same instant), then id."""

    issued_at: datetime
    kind: str  # INVOICE or CREDIT_NOTE
    pk: int

    def sort_key(self) -> tuple:
        return (self.issued_at, self.kind == INVOICE, self.pk)


def _before(place: DocumentPlace | None, kind: str) -> Q:
    """The documents of `kind` that come after `place` in the list (older ones)."""
    if place is None:
        return Q()
    same_instant = Q(issued_at=place.issued_at)
    if kind == place.kind:
        same_instant &= Q(pk__lt=place.pk)
    elif kind == INVOICE:  # invoices come first at one instant: none left after a credit note
        same_instant &= Q(pk__in=[])
    return Q(issued_at__lt=place.issued_at) | same_instant


def tax_documents_for_user(
    *, user: User, after: DocumentPlace | None = None, limit: int = 50
) -> list[tuple[str, Invoice | CreditNote]]:
    """The user's invoices and credit notes as one list, newest first: `limit` of them that come
    after `after` (None: from the start), as (kind, document). Two queries."""
    invoices = (
        Invoice.objects.filter(_before(after, INVOICE), top_up__user=user)
        .order_by("-issued_at", "-pk")[:limit]
    )
    credit_notes = (
        CreditNote.objects.filter(_before(after, CREDIT_NOTE), invoice__top_up__user=user)
        .select_related("invoice").order_by("-issued_at", "-pk")[:limit]
    )
    documents = [(INVOICE, invoice) for invoice in invoices] + [
        (CREDIT_NOTE, credit_note) for credit_note in credit_notes
    ]
    documents.sort(
        key=lambda item: tax_document_place(kind=item[0], document=item[1]).sort_key(), reverse=True
    )
    return documents[:limit]


def tax_document_place(*, kind: str, document: Invoice | CreditNote) -> DocumentPlace:
    return DocumentPlace(issued_at=document.issued_at, kind=kind, pk=document.pk)
