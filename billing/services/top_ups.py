"""Top-ups: created by buyers, paid by a provider (or credited by an operator for a bank transfer),
each with its invoice and its receipt email.

The ledger itself (posting, locking wallets, idempotency) is in billing/ledger.py; a top-up
credits a wallet through it, under the idempotency key "top-up:<id>", so a payment that is
reported twice, or by two events, credits once.
"""

import secrets
import uuid
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from accounts.models import AuditAction, BillingType, Profile, User, Wallet
from accounts.roles import MOVE_MONEY
from accounts.services import audit_record, operator_require, reason_require
from accounts.vies import vat_id_awaiting_vies, vat_id_confirmed
from marketplace import formatting
from marketplace.emails import absolute_url, email_send
from marketplace.money import CURRENCIES, InvalidAmount, is_rounded, parse_amount

from ..exceptions import TopUpRejected
from ..ledger import ledger_account_for_wallet, ledger_account_system, ledger_post
from ..models import Invoice, LedgerAccount, PaymentProvider, TopUp, TopUpStatus, VatKind
from ..vat import vat_amount, vat_id_unconfirmed_reason, vat_split_gross, vat_treatment
from .invoices import invoice_issue
from .vat_refunds import top_up_vat_refund

REFERENCE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O or 1/I to misread


@dataclass(frozen=True)
class TopUpQuote:
    currency: str
    amount: Decimal
    vat_kind: str
    vat_rate: Decimal
    vat_amount: Decimal
    total: Decimal
    mention: str
    # The VAT ID that would be reverse-charged once VIES confirms it, and why VAT is added meanwhile
    # (in the active language); both "" otherwise.
    unconfirmed_vat_id: str = ""
    reason: str = ""


def wallet_open(*, user: User, currency: str) -> Wallet:
    """The user's wallet, opened in `currency` if it does not exist yet (race-safe)."""
    try:
        with transaction.atomic():
            wallet, _created = Wallet.objects.get_or_create(user=user, defaults={"currency": currency})
    except IntegrityError:
        wallet = Wallet.objects.get(user=user)
    return wallet


def top_up_providers() -> list[str]:
    providers = []
    if settings.PAYMENT_SANDBOX_ENABLED:
        providers.append(PaymentProvider.SANDBOX)
    if settings.STRIPE_SECRET_KEY and settings.STRIPE_WEBHOOK_SECRET:
        providers.append(PaymentProvider.STRIPE)
    providers.append(PaymentProvider.BANK)
    return providers


def _limits_message(currency: str) -> str:
    low, high = settings.TOP_UP_LIMITS[currency]
    return _("Top up between %(low)s and %(high)s.") % {
        "low": formatting.money(Decimal(low), currency),
        "high": formatting.money(Decimal(high), currency),
    }


def top_up_amount_parse(*, text: str, currency: str) -> Decimal:
    """The amount as typed, checked against the currency's decimals and the limits."""
    if currency not in CURRENCIES:
        raise TopUpRejected(_("Choose euro, US dollar or pound sterling."), code="currency_unknown")
    text = text.strip()
    if "," in text and "." not in text:
        text = text.replace(",", ".", 1)  # "50,00" as typed in Portuguese or French
    try:
        amount = parse_amount(text, currency)
    except ValueError as error:
        raise TopUpRejected(
            _("Enter an amount such as 50 or 50.00, with at most two decimals."), code="amount_invalid"
        ) from error
    low, high = settings.TOP_UP_LIMITS[currency]
    if not Decimal(low) <= amount <= Decimal(high):
        raise TopUpRejected(_limits_message(currency), code="amount_out_of_range")
    return amount


def top_up_quote(*, profile: Profile, amount: Decimal, currency: str) -> TopUpQuote:
    """The VAT on a top-up of `amount`. Only a VAT ID that VIES confirmed lately is reverse-charged:
    a well-formed number proves nothing. While VIES has not confirmed it, VAT is charged and the
    quote says why; it is refunded once VIES confirms the number (`vat_refunds`)."""
    is_business = profile.billing_type == BillingType.BUSINESS
    treatment = vat_treatment(
        country=profile.billing_country, is_business=is_business,
        has_valid_vat_id=vat_id_confirmed(profile=profile),
    )
    unconfirmed = ""
    if treatment.kind == VatKind.STANDARD and vat_id_awaiting_vies(profile=profile):
        confirmed_later = vat_treatment(
            country=profile.billing_country, is_business=is_business, has_valid_vat_id=True
        )
        if confirmed_later.kind == VatKind.REVERSE_CHARGE:
            unconfirmed = profile.vat_id
    vat = vat_amount(net=amount, rate=treatment.rate, currency=currency)
    return TopUpQuote(
        currency=currency, amount=amount, vat_kind=treatment.kind, vat_rate=treatment.rate,
        vat_amount=vat, total=amount + vat, mention=str(treatment.mention),
        unconfirmed_vat_id=unconfirmed, reason=vat_id_unconfirmed_reason(unconfirmed) if unconfirmed else "",
    )


def _new_reference() -> str:
    return "EXC-" + "".join(secrets.choice(REFERENCE_ALPHABET) for _ in range(8))


@transaction.atomic
def top_up_create(
    *, user: User, amount_text: str, currency: str, provider: str, form_token: uuid.UUID
) -> TopUp:
    """A pending top-up, with its VAT worked out. The same form sent twice gives one top-up."""
    existing = TopUp.objects.filter(user=user, form_token=form_token).first()
    if existing:
        return existing
    if provider not in top_up_providers():
        raise TopUpRejected(_("Choose one of the payment methods offered."), code="provider_unavailable")
    profile = Profile.objects.filter(user=user).first()
    if profile is None or not profile.billing_country:
        raise TopUpRejected(
            _("Add your billing country first: the VAT on a top-up depends on it."),
            code="billing_identity_missing",
        )
    wallet = Wallet.objects.filter(user=user).first()
    if wallet and currency != wallet.currency:
        raise TopUpRejected(
            _("Your wallet is in %(currency)s: top-ups must be in %(currency)s too.")
            % {"currency": wallet.currency},
            code="currency_mismatch",
        )
    amount = top_up_amount_parse(text=amount_text, currency=currency)
    quote = top_up_quote(profile=profile, amount=amount, currency=currency)
    try:
        with transaction.atomic():
            return TopUp.objects.create(
                user=user, currency=currency, amount=quote.amount, vat_kind=quote.vat_kind,
                vat_rate=quote.vat_rate, vat_amount=quote.vat_amount, total=quote.total,
                billing_country=profile.billing_country, unconfirmed_vat_id=quote.unconfirmed_vat_id,
                provider=provider, reference=_new_reference(), form_token=form_token,
            )
    except IntegrityError:
        # The same form, sent again while the first request was still running.
        return TopUp.objects.get(user=user, form_token=form_token)


@transaction.atomic
def top_up_mark_paid(*, top_up_id: int, credited_by: User | None = None) -> TopUp:
    """Credit a paid top-up: one ledger transaction (clearing -> wallet + VAT payable), the
    invoice, and the receipt email, written in the same transaction; and the VAT refund of a top-up
    charged VAT while VIES had not confirmed a VAT ID that it has confirmed since. Calling it again
    changes nothing."""
    top_up = TopUp.objects.select_for_update().get(pk=top_up_id)
    if top_up.status == TopUpStatus.PAID:
        return top_up
    wallet = wallet_open(user=top_up.user, currency=top_up.currency)
    if wallet.currency != top_up.currency:
        raise TopUpRejected(
            _("Your wallet is in %(currency)s: top-ups must be in %(currency)s too.")
            % {"currency": wallet.currency},
            code="currency_mismatch",
        )
    lines = [
        (ledger_account_system(kind=LedgerAccount.Kind.PAYMENT_CLEARING, currency=top_up.currency,
                               provider=top_up.provider), -top_up.total),
        (ledger_account_for_wallet(wallet=wallet), top_up.amount),
    ]
    if top_up.vat_amount:
        lines.append(
            (ledger_account_system(kind=LedgerAccount.Kind.VAT_PAYABLE, currency=top_up.currency),
             top_up.vat_amount)
        )
    posted = ledger_post(
        idempotency_key=f"top-up:{top_up.pk}", kind="top_up",
        description=f"Top-up {top_up.reference}", lines=lines, created_by=credited_by,
    )
    top_up.status = TopUpStatus.PAID
    top_up.paid_at = timezone.now()
    top_up.ledger_transaction = posted.transaction
    top_up.credited_by = credited_by
    top_up.save(update_fields=["status", "paid_at", "ledger_transaction", "credited_by"])
    invoice = invoice_issue(top_up=top_up)
    _receipt_email(top_up=top_up, invoice=invoice)
    if top_up.unconfirmed_vat_id:
        # VIES may have confirmed the number between the quote and the payment.
        top_up_vat_refund(top_up_id=top_up.pk)
    return top_up


@transaction.atomic
def top_up_mark_failed(*, top_up_id: int) -> TopUp:
    """A payment the provider reports as failed. A top-up already paid stays paid."""
    top_up = TopUp.objects.select_for_update().get(pk=top_up_id)
    if top_up.status == TopUpStatus.PENDING:
        top_up.status = TopUpStatus.FAILED
        top_up.save(update_fields=["status"])
    return top_up


def top_up_pay_sandbox(*, user: User, top_up_id: int) -> TopUp:
    """The sandbox provider: pays at once, no real money. Never enabled in production."""
    if not settings.PAYMENT_SANDBOX_ENABLED:
        raise TopUpRejected(_("Test payments are switched off."), code="sandbox_disabled")
    top_up = TopUp.objects.filter(pk=top_up_id, user=user, provider=PaymentProvider.SANDBOX).first()
    if top_up is None:
        raise TopUp.DoesNotExist
    if top_up.status not in (TopUpStatus.PENDING, TopUpStatus.PAID):
        raise TopUpRejected(_("This top-up can no longer be paid."), code="top_up_closed")
    return top_up_mark_paid(top_up_id=top_up.pk)


@transaction.atomic
def top_up_credit_bank_transfer(*, reference: str, operator: User, reason: str) -> TopUp:
    """An operator saw the transfer with this reference arrive: credit it, once. Raises
    `OperatorNotAllowed` (no "move money" permission), `ReasonRequired`, and `TopUpRejected` for an
    unknown reference, a transfer already credited (`already_credited`) or a cancelled top-up."""
    operator_require(operator=operator, permission=MOVE_MONEY)
    reason = reason_require(reason)
    top_up = TopUp.objects.select_for_update().filter(
        reference=(reference or "").strip().upper(), provider=PaymentProvider.BANK
    ).first()
    if top_up is None:
        raise TopUpRejected(_("No bank-transfer top-up has this reference."), code="reference_unknown")
    if top_up.status == TopUpStatus.PAID:
        raise TopUpRejected(
            _("This bank transfer has already been credited: nothing was credited again."),
            code="already_credited",
        )
    if top_up.status != TopUpStatus.PENDING:
        raise TopUpRejected(_("This top-up can no longer be paid."), code="top_up_closed")
    top_up = top_up_mark_paid(top_up_id=top_up.pk, credited_by=operator)
    audit_record(
        actor=operator, action=AuditAction.TOP_UP_CREDIT, target=top_up, reason=reason,
        before={"status": TopUpStatus.PENDING},
        after={"status": top_up.status, "amount": top_up.amount, "total": top_up.total,
               "currency": top_up.currency},
    )
    return top_up


BANK_REFERENCE_MAX_LENGTH = 100
# The most a received transfer can hold: the top-up's columns are Decimal(12, 2).
RECEIVED_MAX = Decimal("9999999999.99")


def _received_check(*, received: Decimal | str, currency: str) -> Decimal:
    """The sum the bank statement shows, VAT included: text is read in any of the site's notations
    ("1234,56" or "1234.56"); it must be positive and on the currency's cent."""
    if isinstance(received, str):
        try:
            received = parse_amount(received, currency)
        except InvalidAmount as invalid:
            raise TopUpRejected(invalid.message, code=invalid.code) from None
    if isinstance(received, float) or not isinstance(received, Decimal) or not received.is_finite():
        raise TypeError("The amount received is a Decimal or the text typed, never float.")
    if not is_rounded(received, currency):
        raise TopUpRejected(
            _("Enter the amount received with at most two decimals."), code="amount_too_many_decimals"
        )
    if received <= 0:
        raise TopUpRejected(
            _("Enter the amount received: a positive sum, as on the bank statement."),
            code="amount_not_positive",
        )
    if received > RECEIVED_MAX:
        raise TopUpRejected(_("This number is too large."), code="amount_too_large")
    return received


def top_up_bank_transfer_credit(
    *, top_up_id: int, received: Decimal | str, reference: str, operator: User, reason: str = ""
) -> TopUp:
    """An operator found the bank transfer of this top-up on the statement: credit what arrived.

    `received` is the sum on the statement in the top-up's currency, VAT included (a Decimal, or
    the text the operator typed); `reference` the bank's reference of the transfer (required). A
    sum other than the quote's total is credited as received: split into the net credit and its VAT
    at the top-up's VAT rate (`vat_split_gross`), the quote's figures kept in `expected_*`, and the
    invoice and the receipt show what was received. Once only: the top-up's row lock serialises two
    operators, and the second is refused (`already_credited`). Raises `OperatorNotAllowed` (no "move
    money" permission) and `TopUpRejected`; nothing moves when it raises."""
    operator_require(operator=operator, permission=MOVE_MONEY)
    bank_reference = " ".join((reference or "").split())
    if not bank_reference:
        raise TopUpRejected(
            _("Enter the bank's reference of the transfer, as on the statement."), code="reference_missing"
        )
    if len(bank_reference) > BANK_REFERENCE_MAX_LENGTH:
        raise TopUpRejected(
            _("The bank reference is at most %(count)d characters.") % {"count": BANK_REFERENCE_MAX_LENGTH},
            code="reference_too_long",
        )
    with transaction.atomic():
        top_up = TopUp.objects.select_for_update().filter(pk=top_up_id, provider=PaymentProvider.BANK).first()
        if top_up is None:
            raise TopUpRejected(_("No bank-transfer top-up has this reference."), code="reference_unknown")
        if top_up.status == TopUpStatus.PAID:
            raise TopUpRejected(
                _("This bank transfer has already been credited: nothing was credited again."),
                code="already_credited",
            )
        if top_up.status != TopUpStatus.PENDING:
            raise TopUpRejected(_("This top-up can no longer be paid."), code="top_up_closed")
        received = _received_check(received=received, currency=top_up.currency)
        quoted = {"amount": top_up.amount, "vat_amount": top_up.vat_amount, "total": top_up.total}
        top_up.bank_reference = bank_reference
        fields = ["bank_reference"]
        if received != top_up.total:
            net, vat = vat_split_gross(gross=received, rate=top_up.vat_rate, currency=top_up.currency)
            if net <= 0:
                raise TopUpRejected(
                    _("This sum is too small to credit once its VAT is taken off."), code="amount_too_small"
                )
            top_up.expected_amount, top_up.expected_vat_amount, top_up.expected_total = (
                top_up.amount, top_up.vat_amount, top_up.total
            )
            top_up.amount, top_up.vat_amount, top_up.total = net, vat, received
            fields += ["expected_amount", "expected_vat_amount", "expected_total", "amount", "vat_amount",
                       "total"]
        top_up.save(update_fields=fields)
        top_up = top_up_mark_paid(top_up_id=top_up.pk, credited_by=operator)
        audit_record(
            actor=operator, action=AuditAction.TOP_UP_CREDIT, target=top_up,
            reason=(reason or "").strip() or bank_reference,
            before={"status": TopUpStatus.PENDING, **quoted},
            after={"status": top_up.status, "amount": top_up.amount, "vat_amount": top_up.vat_amount,
                   "total": top_up.total, "currency": top_up.currency, "bank_reference": bank_reference,
                   "difference": top_up.total - quoted["total"]},
        )
    return top_up


def _receipt_email(*, top_up: TopUp, invoice: Invoice) -> None:
    """The receipt of a paid top-up, in the buyer's language, with the invoice link."""
    email_send(
        template="billing/email/receipt", user=top_up.user, key=f"top-up-receipt:{top_up.pk}",
        context=lambda: {
            "invoice": invoice,
            "amount": formatting.money(top_up.amount, top_up.currency),
            "total": formatting.money(top_up.total, top_up.currency),
            "invoice_url": absolute_url(reverse("billing:invoice", kwargs={"number": invoice.number})),
        },
    )
