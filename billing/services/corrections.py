"""Operators' corrections of buyers' money: refunding a top-up and adjusting a balance.

Each is one balanced ledger transaction, posted by an operator holding the "move money"
permission, with a written reason, and recorded in the audit log in the same database
transaction. Each takes a `request_key` (the admin form's one-time token) that becomes part of
its idempotency key, so a form sent twice moves money once. Neither ever takes a wallet below
zero: `ledger_post` refuses it, and the error says how much the wallet holds.
"""

from dataclasses import dataclass
from decimal import Decimal

from django.db import transaction
from django.db.models import Sum
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from accounts.models import AuditAction, User, Wallet
from accounts.roles import MOVE_MONEY
from accounts.services import audit_record, operator_require, reason_require
from marketplace import formatting
from marketplace.emails import absolute_url, email_send
from marketplace.money import money_round, parse_amount

from ..exceptions import CorrectionRefused, InsufficientBalance
from ..ledger import ledger_account_for_wallet, ledger_account_system, ledger_post
from ..models import (
    CreditNote,
    LedgerAccount,
    LedgerTransaction,
    TopUp,
    TopUpRefund,
    TopUpStatus,
    TopUpVatRefund,
)
from .invoices import credit_note_issue

ZERO = Decimal("0.00")


@dataclass(frozen=True)
class Adjustment:
    wallet: Wallet
    amount: Decimal
    transaction: LedgerTransaction


def operator_amount_parse(*, text: str, currency: str) -> Decimal:
    """An amount typed by an operator: "12.50", "12,50" or "-5" in the wallet's currency."""
    cleaned = str(text or "").strip()
    if "," in cleaned and "." not in cleaned:
        cleaned = cleaned.replace(",", ".", 1)
    try:
        return parse_amount(cleaned, currency)
    except ValueError as error:
        raise CorrectionRefused(
            _("Enter an amount such as 25 or 25.00, with at most two decimals."), code="amount_invalid"
        ) from error


def _key_checked(request_key: str) -> str:
    key = (request_key or "").strip()
    if not key or len(key) > 64:
        raise CorrectionRefused(_("This form has expired: open it again."), code="request_key_missing")
    return key


def _too_low(wallet: Wallet) -> CorrectionRefused:
    return CorrectionRefused(
        _("The wallet holds only %(balance)s: a balance never goes below zero.")
        % {"balance": formatting.money(wallet.balance, wallet.currency)},
        code="balance_too_low",
    )


@transaction.atomic
def top_up_refund(
    *, top_up_id: int, operator: User, amount_text: str, reason: str, request_key: str
) -> TopUpRefund:
    """Give back `amount_text` of a paid top-up (in its currency, VAT excluded): the wallet is
    debited that amount, the VAT collected on it is taken back in proportion (none once the VAT was
    refunded to the wallet, `vat_refunds`), and the payment clearing account owes the buyer both.
    The refunds of a top-up never exceed its amount, and the wallet never goes below zero: a larger
    amount is refused with the most that can still be refunded. Raises `OperatorNotAllowed`,
    `ReasonRequired`, `CorrectionRefused`.
    """
    operator_require(operator=operator, permission=MOVE_MONEY)
    reason = reason_require(reason)
    key = _key_checked(request_key)
    top_up = TopUp.objects.select_for_update().select_related("user").get(pk=top_up_id)
    previous = TopUpRefund.objects.filter(
        ledger_transaction__idempotency_key=_refund_key(top_up, key)
    ).first()
    if previous is not None:
        return previous
    if top_up.status != TopUpStatus.PAID:
        raise CorrectionRefused(_("Only a paid top-up can be refunded."), code="top_up_not_paid")
    amount = operator_amount_parse(text=amount_text, currency=top_up.currency)
    if amount <= 0:
        raise CorrectionRefused(_("A refund is a positive amount."), code="amount_not_positive")
    refunded = top_up.refunds.aggregate(amount=Sum("amount"), vat=Sum("vat_amount"))
    refunded_amount, refunded_vat = refunded["amount"] or ZERO, refunded["vat"] or ZERO
    left = top_up.amount - refunded_amount
    wallet = Wallet.objects.get(user=top_up.user)
    if amount > left:
        raise _too_much(top_up, wallet, left=left, code="refund_exceeds_top_up")
    if amount > wallet.balance:
        raise _too_much(top_up, wallet, left=left, code="balance_too_low")
    vat = _refund_vat(top_up, refunded_amount=refunded_amount, refunded_vat=refunded_vat, amount=amount)
    clearing = ledger_account_system(
        kind=LedgerAccount.Kind.PAYMENT_CLEARING, currency=top_up.currency, provider=top_up.provider
    )
    lines = [(ledger_account_for_wallet(wallet=wallet), -amount), (clearing, amount + vat)]
    if vat:
        vat_payable = ledger_account_system(kind=LedgerAccount.Kind.VAT_PAYABLE, currency=top_up.currency)
        lines.append((vat_payable, -vat))
    try:
        posted = ledger_post(
            idempotency_key=_refund_key(top_up, key), kind=LedgerTransaction.Kind.REFUND,
            description=f"Refund of top-up {top_up.reference}", lines=lines, created_by=operator,
        )
    except InsufficientBalance:
        wallet.refresh_from_db()  # spent since it was read above
        raise _too_much(top_up, wallet, left=left, code="balance_too_low") from None
    wallet.refresh_from_db()  # the balance as the posting left it, under its lock
    refund = TopUpRefund.objects.create(
        top_up=top_up, currency=top_up.currency, amount=amount, vat_amount=vat, total=amount + vat,
        reason=reason, ledger_transaction=posted.transaction, created_by=operator,
    )
    credit_note = credit_note_issue(refund=refund)
    _refund_email(refund=refund, credit_note=credit_note, wallet=wallet)
    audit_record(
        actor=operator, action=AuditAction.TOP_UP_REFUND, target=top_up, reason=reason,
        before={"refunded": refunded_amount, "wallet_balance": wallet.balance + amount},
        after={"refunded": refunded_amount + amount, "wallet_balance": wallet.balance,
               "vat_refunded": vat, "currency": top_up.currency, "credit_note": credit_note.number},
    )
    return refund


def _refund_key(top_up: TopUp, request_key: str) -> str:
    return f"top-up:{top_up.pk}:refund:{request_key}"


def _too_much(top_up: TopUp, wallet: Wallet, *, left: Decimal, code: str) -> CorrectionRefused:
    """The refusal of a refund above what can still be refunded: what is left of the top-up, and
    no more than the wallet holds."""
    maximum = max(min(left, wallet.balance), ZERO)
    return CorrectionRefused(
        _("At most %(amount)s can still be refunded.")
        % {"amount": formatting.money(maximum, top_up.currency)},
        code=code,
    )


def _refund_vat(
    top_up: TopUp, *, refunded_amount: Decimal, refunded_vat: Decimal, amount: Decimal
) -> Decimal:
    """The VAT that a refund of `amount` gives back with it."""
    if TopUpVatRefund.objects.filter(top_up=top_up).exists():
        return ZERO  # the VAT still held was given back to the wallet once VIES confirmed the buyer
    # The VAT of all refunds so far, this one included, rounded once on the running total: each
    # refund's VAT is never negative, the refunds never give back more VAT than was paid, and the
    # last one lands on it exactly.
    vat_due = money_round(top_up.vat_amount * (refunded_amount + amount) / top_up.amount, top_up.currency)
    return vat_due - refunded_vat


@transaction.atomic
def wallet_adjust(
    *, wallet_id: int, operator: User, amount_text: str, reason: str, request_key: str
) -> Adjustment:
    """Add (positive) or take (negative) an amount in the wallet's currency, balanced against the
    platform's adjustments account. Raises `OperatorNotAllowed`, `ReasonRequired`,
    `CorrectionRefused` (zero, unreadable, or below zero)."""
    operator_require(operator=operator, permission=MOVE_MONEY)
    reason = reason_require(reason)
    key = f"adjustment:{_key_checked(request_key)}"
    # Locked before the duplicate check, so that the same form sent twice at once waits here and
    # then finds the first one's transaction.
    wallet = Wallet.objects.select_for_update().select_related("user").get(pk=wallet_id)
    existing = LedgerTransaction.objects.filter(idempotency_key=key).first()
    if existing is not None:
        return Adjustment(wallet=wallet, amount=ZERO, transaction=existing)
    amount = operator_amount_parse(text=amount_text, currency=wallet.currency)
    if not amount:
        raise CorrectionRefused(_("An adjustment of zero moves nothing."), code="amount_zero")
    adjustments = ledger_account_system(kind=LedgerAccount.Kind.ADJUSTMENTS, currency=wallet.currency)
    try:
        posted = ledger_post(
            idempotency_key=key, kind=LedgerTransaction.Kind.ADJUSTMENT,
            description=f"Adjustment of {wallet.user.email}'s balance: {reason}"[:300],
            lines=[(ledger_account_for_wallet(wallet=wallet), amount), (adjustments, -amount)],
            created_by=operator,
        )
    except InsufficientBalance:
        wallet.refresh_from_db()
        raise _too_low(wallet) from None
    if not posted.created:
        return Adjustment(wallet=wallet, amount=ZERO, transaction=posted.transaction)
    wallet.refresh_from_db()  # the balance as the posting left it, under its lock
    audit_record(
        actor=operator, action=AuditAction.WALLET_ADJUST, target=wallet, reason=reason,
        before={"balance": wallet.balance - amount, "currency": wallet.currency},
        after={"balance": wallet.balance, "currency": wallet.currency, "amount": amount},
    )
    return Adjustment(wallet=wallet, amount=amount, transaction=posted.transaction)


def _refund_email(*, refund: TopUpRefund, credit_note: CreditNote, wallet: Wallet) -> None:
    """Tell the buyer, in their language, what was refunded of which top-up, their balance now and
    where their credit note is."""
    currency, number = refund.currency, credit_note.number
    email_send(
        template="billing/email/top_up_refund", user=refund.top_up.user, key=f"top-up-refund:{refund.pk}",
        context=lambda: {
            "reference": refund.top_up.reference,
            "amount": formatting.money(refund.amount, currency),
            "vat": formatting.money(refund.vat_amount, currency) if refund.vat_amount else "",
            "total": formatting.money(refund.total, currency),
            "balance": formatting.money(wallet.balance, currency),
            "number": number,
            "url": absolute_url(reverse("billing:credit-note", kwargs={"number": number})),
        },
    )
