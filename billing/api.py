"""Billing's operations of the API: the buyer's wallet, its history, invoices and credit notes
(docs/api.md). Entry points only: a token's user, one selector, the answer shaped."""

import base64
import binascii
from datetime import UTC, datetime

from django.http import HttpResponse
from django.utils.translation import gettext_lazy as _
from ninja import Field, Router, Schema

from marketplace.api_support import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    READ,
    ApiProblem,
    Money,
    Page,
    UtcTime,
    money,
    page_of,
    problems,
    token_of,
    usd,
)
from marketplace.money import quantum

from .invoice_pdf import credit_note_pdf_render, invoice_pdf_render
from .selectors import (
    CREDIT_NOTE,
    INVOICE,
    DocumentPlace,
    credit_note_get_for_user,
    invoice_get_for_user,
    ledger_movement_description,
    tax_document_place,
    tax_documents_for_user,
    wallet_for_user,
    wallet_movements,
    wallet_runway,
)

router = Router(tags=["billing"])


def _wallet_or_404(request):
    wallet = wallet_for_user(user=token_of(request).user)
    if wallet is None:
        raise ApiProblem(404, "wallet_not_found", _("You have no balance yet: your first top-up opens it."))
    return wallet


class WalletOut(Schema):
    currency: str = Field(examples=["EUR"], description="Chosen at the first top-up, for good.")
    balance: Money
    burn_rate: Money | None = Field(
        description="What the starting and running rentals cost per hour in the wallet's currency "
                    "(zero when none runs; null when the currency has no rate)."
    )
    burn_rate_usd: Money = Field(description="The same hour in US dollars.")
    runway_hours: int | None = Field(
        examples=[41],
        description="Full hours the balance still pays at this rate; null when nothing burns it.",
    )


@router.get(
    "/wallet", response={200: WalletOut, **problems(401, 403, 404, 429)},
    auth=READ, operation_id="wallet_get",
    summary="Your balance, what your rentals burn per hour and how many hours the balance lasts",
)
def wallet_get(request):
    wallet = _wallet_or_404(request)
    runway = wallet_runway(wallet=wallet)
    if runway is None:
        burn_rate, burn_rate_usd, hours = money(0, wallet.currency), usd(0), None
    else:
        burn_rate = money(runway.per_hour, wallet.currency)
        burn_rate_usd, hours = usd(runway.per_hour_usd), runway.hours
    return {
        "currency": wallet.currency, "balance": money(wallet.balance, wallet.currency),
        "burn_rate": burn_rate, "burn_rate_usd": burn_rate_usd, "runway_hours": hours,
    }


class MovementOut(Schema):
    id: int = Field(examples=[311])
    time: UtcTime
    description: str = Field(examples=["Rental #7, 2 × H100 SXM, hour from 12/1/26, 9:00 PM"],
                             description="As the account page says it, in the request's language.")
    amount: Money = Field(description="Signed: a charge is negative.")
    balance_after: Money


@router.get(
    "/wallet/history", response={200: Page[MovementOut], **problems(400, 401, 403, 404, 422, 429)}, auth=READ,
    operation_id="wallet_history", summary="The movements of your balance, newest first",
)
def wallet_history(request, cursor: str | None = None, limit: int | None = None):
    wallet = _wallet_or_404(request)
    entries, next_cursor = page_of(wallet_movements(wallet=wallet), cursor=cursor, limit=limit)
    return {
        "items": [
            {"id": entry.pk, "time": entry.created_at,
             "description": ledger_movement_description(ledger_transaction=entry.transaction),
             "amount": money(entry.amount.amount, wallet.currency),
             # SQLite's window sum comes back with a float's digits: cents, as the ledger keeps them.
             "balance_after": money(entry.balance_after.quantize(quantum(wallet.currency)), wallet.currency)}
            for entry in entries
        ],
        "next_cursor": next_cursor,
    }


class DocumentOut(Schema):
    number: str = Field(examples=["EXC-2026-000042"])
    kind: str = Field(examples=["invoice"], description="invoice or credit_note.")
    issued_at: UtcTime
    corrects: str | None = Field(
        examples=[None], description="A credit note: the number of the invoice it corrects."
    )
    net: Money
    vat: Money
    total: Money
    pdf_url: str = Field(examples=["/api/v1/invoices/EXC-2026-000042/pdf"])


def _document_out(kind: str, document) -> dict:
    currency = document.currency
    return {
        "number": document.number, "kind": kind, "issued_at": document.issued_at,
        "corrects": document.invoice.number if kind == CREDIT_NOTE else None,
        "net": money(document.net, currency), "vat": money(document.vat_amount, currency),
        "total": money(document.total, currency),
        "pdf_url": f"/api/v1/invoices/{document.number}/pdf",
    }


# A page of documents ends at (issue time, kind, id): the cursor carries it.
def _place_encode(place: DocumentPlace) -> str:
    text = f"{place.issued_at.astimezone(UTC).isoformat()}|{place.kind}|{place.pk}"
    return base64.urlsafe_b64encode(text.encode("ascii")).decode("ascii").rstrip("=")


def _place_decode(cursor: str) -> DocumentPlace:
    try:
        stamp, kind, pk = base64.urlsafe_b64decode(cursor.encode("ascii") + b"==").decode("ascii").split("|")
        issued_at = datetime.fromisoformat(stamp)
        place = DocumentPlace(issued_at=issued_at, kind=kind, pk=int(pk)) if issued_at.tzinfo else None
    except (ValueError, UnicodeError, binascii.Error, OverflowError):
        place = None
    if place is None or place.kind not in (INVOICE, CREDIT_NOTE) or not 0 < place.pk <= 2**62:
        raise ApiProblem(400, "cursor_invalid", _("This cursor does not come from a previous page."))
    return place


@router.get(
    "/invoices", response={200: Page[DocumentOut], **problems(400, 401, 403, 422, 429)},
    auth=READ, operation_id="invoices_list",
    summary="Your invoices and credit notes in one list, newest first",
)
def invoices_list(request, cursor: str | None = None, limit: int | None = None):
    limit = DEFAULT_PAGE_SIZE if limit is None else limit
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise ApiProblem(
            422, "limit_invalid", _("The limit is a whole number from 1 to %(max)d.") % {"max": MAX_PAGE_SIZE}
        )
    after = _place_decode(cursor) if cursor else None
    documents = tax_documents_for_user(user=token_of(request).user, after=after, limit=limit + 1)
    next_cursor = None
    if len(documents) > limit:
        documents = documents[:limit]
        next_cursor = _place_encode(tax_document_place(kind=documents[-1][0], document=documents[-1][1]))
    items = [_document_out(kind, document) for kind, document in documents]
    return {"items": items, "next_cursor": next_cursor}


def _document_or_404(request, number: str):
    user = token_of(request).user
    invoice = invoice_get_for_user(user=user, number=number)
    if invoice is not None:
        return INVOICE, invoice
    credit_note = credit_note_get_for_user(user=user, number=number)
    if credit_note is not None:
        return CREDIT_NOTE, credit_note
    raise ApiProblem(404, "invoice_not_found", _("We could not find this invoice."))


@router.get(
    "/invoices/{number}", response={200: DocumentOut, **problems(401, 403, 404, 429)},
    auth=READ, operation_id="invoice_get",
    summary="One of your invoices or credit notes",
)
def invoice_get(request, number: str):
    return _document_out(*_document_or_404(request, number))


@router.get(
    "/invoices/{number}/pdf", response=problems(401, 403, 404, 429),
    auth=READ, operation_id="invoice_pdf",
    summary="The PDF of one of your invoices or credit notes, as the account page serves it",
    openapi_extra={"responses": {200: {
        "description": "The document as PDF.",
        "content": {"application/pdf": {"schema": {"type": "string", "format": "binary"}}},
    }}},
)
def invoice_pdf(request, number: str):
    kind, document = _document_or_404(request, number)
    if kind == INVOICE:
        body = invoice_pdf_render(invoice=document)
    else:
        body = credit_note_pdf_render(credit_note=document)
    response = HttpResponse(body, content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="{document.number}.pdf"'
    return response
