"""Top-ups, invoices and the Stripe webhook. Thin: forms in, one service or selector, render."""

import logging
from decimal import Decimal

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from accounts.models import Currency, Profile
from accounts.services import profile_ensure
from marketplace import formatting

from .exceptions import TopUpRejected, WebhookRejected
from .forms import TopUpForm, top_up_range_text
from .invoice_pdf import (
    credit_note_pdf_render,
    document_party_lines,
    invoice_payment_text,
    invoice_pdf_render,
)
from .models import PaymentProvider, TopUp, TopUpStatus
from .months import month_slug
from .selectors import (
    credit_note_get_for_user,
    invoice_get_for_user,
    statement_csv,
    statement_for_user,
    top_up_get_for_user,
    wallet_for_user,
)
from .services import (
    stripe_checkout_start,
    stripe_webhook_handle,
    top_up_create,
    top_up_pay_sandbox,
    top_up_providers,
    top_up_quote,
)
from .vat import document_vat_mention, vat_id_unconfirmed_reason, vat_mention

logger = logging.getLogger(__name__)


def _vat_preview(profile: Profile, currency: str):
    """The VAT rule that will apply, shown before the buyer chooses an amount."""
    if not profile.billing_country:
        return None
    return top_up_quote(profile=profile, amount=Decimal("100"), currency=currency)


def _total_with_vat(profile: Profile):
    if not profile.billing_country:
        return None
    return lambda amount, currency: top_up_quote(profile=profile, amount=amount, currency=currency).total


@login_required
def top_up(request):
    profile = profile_ensure(user=request.user)
    wallet = wallet_for_user(user=request.user)
    providers = top_up_providers()
    form = TopUpForm(request.POST or None, currency=wallet.currency if wallet else None,
                     chosen=request.GET.get("currency"), providers=providers,
                     quote=_total_with_vat(profile))
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            created = top_up_create(
                user=request.user, amount_text=data["amount_text"], currency=data["currency"],
                provider=data["provider"], form_token=data["form_token"],
            )
        except TopUpRejected as rejected:
            form.add_error(None, rejected.message)
        else:
            return redirect("billing:top-up-detail", pk=created.pk)
    currency = form.shown_currency
    return render(request, "billing/top_up.html", {
        "form": form,
        "wallet": wallet,
        "profile": profile,
        "preview": _vat_preview(profile, currency),
        "currency": currency,
        # Before the first top-up: one link per currency, the presets and range follow the choice.
        "currency_links": [] if wallet else [
            {"code": code, "label": label, "current": code == currency}
            for code, label in Currency.choices
        ],
        "range_text": top_up_range_text(currency),
        "sandbox": PaymentProvider.SANDBOX in providers,
    }, status=400 if request.method == "POST" else 200)


def _vat_reason(top_up: TopUp) -> str:
    """Why a business paid VAT on this top-up: VIES had not confirmed its number, or has since and
    the VAT went back to its balance."""
    if not top_up.unconfirmed_vat_id:
        return ""
    vat_refund = getattr(top_up, "vat_refund", None)
    if vat_refund is None:
        return vat_id_unconfirmed_reason(top_up.unconfirmed_vat_id)
    return _(
        "VIES has confirmed your VAT number %(vat_id)s: the VAT of this top-up, %(vat)s, was refunded to "
        "your balance with credit note %(number)s."
    ) % {
        "vat_id": vat_refund.vat_id, "vat": formatting.money(vat_refund.vat_amount, vat_refund.currency),
        "number": vat_refund.credit_note.number,
    }


@login_required
def top_up_detail(request, pk: int):
    found = top_up_get_for_user(user=request.user, pk=pk)
    if found is None:
        raise Http404(_("We could not find this top-up."))
    checkout = request.GET.get("checkout")
    if checkout == "success" and found.status == TopUpStatus.PENDING:
        messages.info(
            request, _("Stripe has your payment. Your balance is credited as soon as Stripe confirms it.")
        )
    elif checkout == "cancelled" and found.status == TopUpStatus.PENDING:
        messages.warning(
            request, _("You cancelled the card payment. Nothing was charged; you can pay again below.")
        )
    return render(request, "billing/top_up_detail.html", {
        "top_up": found,
        "vat_reason": _vat_reason(found),
        "amount": formatting.money(found.amount, found.currency),
        "vat": formatting.money(found.vat_amount, found.currency),
        "total": formatting.money(found.total, found.currency),
        "vat_rate": formatting.number(found.vat_rate.normalize()),
        "bank": settings.BANK_DETAILS,
        "pending": found.status == TopUpStatus.PENDING,
        "vat_mention": vat_mention(found.vat_kind),
    })


@login_required
@require_POST
def top_up_pay(request, pk: int):
    found = top_up_get_for_user(user=request.user, pk=pk)
    if found is None:
        raise Http404(_("We could not find this top-up."))
    try:
        if found.provider == PaymentProvider.SANDBOX:
            top_up_pay_sandbox(user=request.user, top_up_id=found.pk)
            messages.success(request, _("Test payment received: your balance is credited."))
        elif found.provider == PaymentProvider.STRIPE and found.status == TopUpStatus.PENDING:
            back = request.build_absolute_uri(reverse("billing:top-up-detail", kwargs={"pk": found.pk}))
            return redirect(stripe_checkout_start(
                top_up=found, success_url=f"{back}?checkout=success",
                cancel_url=f"{back}?checkout=cancelled",
            ))
    except TopUpRejected as rejected:
        messages.error(request, rejected.message)
    except TopUp.DoesNotExist as missing:
        raise Http404(_("We could not find this top-up.")) from missing
    return redirect("billing:top-up-detail", pk=found.pk)


def _document_page(request, document, *, credit_note: bool = False):
    """An invoice or a credit note, as the page shows them: the same parties and figures."""
    return render(request, "billing/invoice.html", {
        "invoice": document,
        "credit_note": document if credit_note else None,
        "net": formatting.money(document.net, document.currency),
        "vat": formatting.money(document.vat_amount, document.currency),
        "total": formatting.money(document.total, document.currency),
        "vat_rate": formatting.number(document.vat_rate.normalize()),
        "seller_lines": document_party_lines(document.seller),
        "buyer_lines": document_party_lines(document.buyer),
        "vat_mention": document_vat_mention(document),
        "payment": "" if credit_note else invoice_payment_text(document),
    })


@login_required
def invoice_view(request, number: str):
    invoice = invoice_get_for_user(user=request.user, number=number)
    if invoice is None:
        raise Http404(_("We could not find this invoice."))
    return _document_page(request, invoice)


@login_required
def credit_note_view(request, number: str):
    credit_note = credit_note_get_for_user(user=request.user, number=number)
    if credit_note is None:
        raise Http404(_("We could not find this credit note."))
    return _document_page(request, credit_note, credit_note=True)


@login_required
def credit_note_pdf(request, number: str):
    credit_note = credit_note_get_for_user(user=request.user, number=number)
    if credit_note is None:
        raise Http404(_("We could not find this credit note."))
    response = HttpResponse(credit_note_pdf_render(credit_note=credit_note), content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="{credit_note.number}.pdf"'
    return response


@login_required
def invoice_pdf(request, number: str):
    invoice = invoice_get_for_user(user=request.user, number=number)
    if invoice is None:
        raise Http404(_("We could not find this invoice."))
    response = HttpResponse(invoice_pdf_render(invoice=invoice), content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="{invoice.number}.pdf"'
    return response


@csrf_exempt  # Stripe signs its requests; the signature replaces the CSRF token here.
@require_POST
def stripe_webhook(request):
    try:
        outcome = stripe_webhook_handle(
            payload=request.body, signature=request.headers.get("Stripe-Signature")
        )
    except WebhookRejected as rejected:
        logger.warning("Stripe webhook rejected: %s", rejected)
        return HttpResponseBadRequest("invalid signature", content_type="text/plain")
    return HttpResponse(outcome, content_type="text/plain")


# --- monthly statements -------------------------------------------------------------------------


def _statement_or_404(request, month):
    found = statement_for_user(user=request.user, month=month)
    if found is None:
        raise Http404(_("We could not find this statement."))
    return found


@login_required
def statement_view(request, month):
    """The signed-in buyer's usage statement of one month (`month`: the first day, from the URL)."""
    return render(request, "billing/statement.html", {"statement": _statement_or_404(request, month)})


@login_required
def statement_csv_view(request, month):
    found = _statement_or_404(request, month)
    response = HttpResponse(statement_csv(statement=found), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="everxcloud-statement-{month_slug(month)}.csv"'
    return response
