"""Invoices and credit notes as PDF (fpdf2), in the language of the request, with the same figures as
the HTML page."""

from pathlib import Path

from django.utils.translation import gettext as _
from fpdf import FPDF

from marketplace import formatting

from .models import CreditNote, Invoice
from .vat import document_vat_mention

# A Unicode font for €, £ and CLDR's narrow spaces; the PDF core fonts know only Latin-1.
FONT_DIRS = [Path("/usr/share/fonts/truetype/dejavu")]


def _font(pdf: FPDF) -> str:
    for folder in FONT_DIRS:
        regular, bold = folder / "DejaVuSans.ttf", folder / "DejaVuSans-Bold.ttf"
        if regular.exists() and bold.exists():
            pdf.add_font("DejaVu", "", str(regular))
            pdf.add_font("DejaVu", "B", str(bold))
            return "DejaVu"
    return "Helvetica"


def _latin1(text: str) -> str:
    """Fallback for machines without DejaVu: spell currency signs the core fonts lack."""
    text = text.replace("€", "EUR").replace("\u202f", " ").replace("\u00a0", " ")
    return text.encode("latin-1", "replace").decode("latin-1")


def invoice_payment_text(invoice: Invoice) -> str:
    """When and how the invoiced top-up was paid, in the active language and time zone: "Paid on 3
    Dec 2026, 14:05 WET. Payment method: Card (Stripe)." The page and the PDF say the same."""
    top_up = invoice.top_up
    return _("Paid on %(date)s. Payment method: %(method)s.") % {
        "date": formatting.datetime_zone(top_up.paid_at or invoice.issued_at),
        "method": top_up.get_provider_display(),
    }


def document_party_lines(party: dict) -> list[str]:
    """A seller's or buyer's block on an invoice, one line each, without the lines a party has not
    filled in (a private person has no company, many no VAT ID): the page and the PDF say the same."""
    vat_id = party.get("vat_id")
    return [line for line in [
        party.get("company_name"), party.get("name"), *(party.get("address") or "").splitlines(),
        formatting.country_name(party.get("country", "")), party.get("email"),
        _("VAT ID: %(vat_id)s") % {"vat_id": vat_id} if vat_id else "",
    ] if line and line.strip()]


def invoice_pdf_render(*, invoice: Invoice) -> bytes:
    return _document_render(
        document=invoice, title=_("Invoice %(number)s") % {"number": invoice.number},
        label=_("Prepaid balance for GPU hours on EverXCloud"), total=_("Total"),
        payment=invoice_payment_text(invoice),
    )


def credit_note_pdf_render(*, credit_note: CreditNote) -> bytes:
    return _document_render(
        document=credit_note, title=_("Credit note %(number)s") % {"number": credit_note.number},
        label=_("Refund of prepaid balance for GPU hours on EverXCloud"), total=_("Total credited"),
        corrects=_("Corrects invoice %(number)s") % {"number": credit_note.invoice.number},
    )


def _document_render(
    *, document: Invoice | CreditNote, title: str, label: str, total: str, corrects: str = "",
    payment: str = "",
) -> bytes:
    """The document's parties and figures as the page (billing/invoice.html) writes them: the same
    sentences, the issue date in the active language and time zone, the same amounts."""
    invoice = document  # the same fields on both documents
    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(auto=True, margin=18)
    pdf.add_page()
    family = _font(pdf)
    clean = (lambda text: text) if family == "DejaVu" else _latin1
    money = lambda amount: formatting.money(amount, invoice.currency)  # noqa: E731

    def line(text: str, size: int = 10, bold: bool = False, height: float = 5.5) -> None:
        pdf.set_font(family, "B" if bold else "", size)
        pdf.multi_cell(0, height, clean(text), new_x="LMARGIN", new_y="NEXT")

    line(title, size=18, bold=True, height=9)
    if corrects:
        line(corrects)
    line(_("Issued on %(date)s") % {"date": formatting.day(invoice.issued_at)})
    if payment:
        line(payment)
    pdf.ln(4)
    line(_("From"), bold=True)
    line("\n".join(document_party_lines(invoice.seller)))
    pdf.ln(3)
    line(_("Billed to"), bold=True)
    line("\n".join(document_party_lines(invoice.buyer)))
    pdf.ln(5)
    rows = [
        (label, money(invoice.net)),
        (_("VAT (%(vat_rate)s %%)") % {"vat_rate": formatting.number(invoice.vat_rate.normalize())},
         money(invoice.vat_amount)),
        (total, money(invoice.total)),
    ]
    for index, (label, amount) in enumerate(rows):
        pdf.set_font(family, "B" if index == len(rows) - 1 else "", 11)
        pdf.cell(140, 8, clean(label), border="B")
        pdf.cell(0, 8, clean(amount), border="B", align="R", new_x="LMARGIN", new_y="NEXT")
    mention = document_vat_mention(invoice)
    if mention:
        pdf.ln(4)
        line(mention, size=9)
    return bytes(pdf.output())
