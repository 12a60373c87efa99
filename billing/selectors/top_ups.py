"""Top-ups and their documents (invoices, credit notes) as their owner reads them: another user's
number or id finds nothing."""

from accounts.models import User

from ..models import CreditNote, Invoice, TopUp


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
