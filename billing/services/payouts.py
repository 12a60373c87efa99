"""Seller payouts: a request reserves earnings at once, an operator pays or rejects it.

Ledger movements, all in US dollars, one transaction each, keyed by the payout's id:

- request  "payout:<id>:reserve"  seller_earnings:<seller>:USD -amount, payouts_pending:USD +amount
- paid     "payout:<id>:paid"     payouts_pending:USD -amount, clearing:bank:USD +amount
- rejected "payout:<id>:release"  payouts_pending:USD -amount, seller_earnings:<seller>:USD +amount

Two requests of one seller serialise on a row lock of the seller's earnings account, so the
available earnings read by the second one already count the first one's reservation. The seller's
owners are emailed the operator's decision, written in the decision's transaction.
"""

from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from accounts.models import AuditAction, User
from accounts.roles import MOVE_MONEY
from accounts.services import audit_record, operator_require
from marketplace import formatting
from marketplace.emails import absolute_url, email_send
from marketplace.money import InvalidAmount, parse_amount
from sellers.models import MemberRole, Seller, SellerMembership
from sellers.selectors import seller_owners

from ..exceptions import PayoutRefused
from ..ledger import ledger_account_for_seller, ledger_account_system, ledger_post
from ..models import LedgerAccount, LedgerTransaction, Payout, PayoutStatus
from ..selectors.balances import ledger_account_balance
from ..selectors.payouts import CURRENCY, payout_minimum


def ledger_account_payouts_pending() -> LedgerAccount:
    """The platform's account of payouts requested and not yet paid, in US dollars."""
    return ledger_account_system(kind=LedgerAccount.Kind.PAYOUTS_PENDING, currency=CURRENCY)


def payout_request(*, seller_id: int, requested_by: User, amount_text: str) -> Payout:
    """Reserve `amount_text` US dollars of the seller's earnings for a payout. Owners only."""
    seller = Seller.objects.filter(pk=seller_id).first()
    if seller is None:
        raise PayoutRefused(_("This seller does not exist."), code="payout_seller_unknown")
    is_owner = SellerMembership.objects.filter(
        seller=seller, user=requested_by, role=MemberRole.OWNER
    ).exists()
    if not is_owner:
        raise PayoutRefused(_("Only the owners of a seller can request a payout."), code="payout_not_owner")
    try:
        amount = parse_amount(amount_text, CURRENCY)
    except InvalidAmount as invalid:
        raise PayoutRefused(invalid.message, code=invalid.code) from None
    minimum = payout_minimum()
    if amount < minimum:
        raise PayoutRefused(
            _("The smallest payout is %(minimum)s.") % {"minimum": formatting.usd(minimum)},
            code="payout_below_minimum",
        )
    earnings = ledger_account_for_seller(seller=seller, currency=CURRENCY)
    pending = ledger_account_payouts_pending()
    with transaction.atomic():
        # The lock that serialises two requests of the same seller.
        LedgerAccount.objects.select_for_update().get(pk=earnings.pk)
        available = ledger_account_balance(account=earnings)
        if amount > available:
            raise PayoutRefused(
                _("You can request at most %(available)s, your available earnings.")
                % {"available": formatting.usd(available)},
                code="payout_above_available",
            )
        payout = Payout.objects.create(
            seller=seller, amount=amount, currency=CURRENCY, requested_by=requested_by,
            requested_at=timezone.now(),
        )
        posted = ledger_post(
            idempotency_key=f"payout:{payout.pk}:reserve",
            kind=LedgerTransaction.Kind.PAYOUT,
            description=f"Payout #{payout.pk} of {seller.name}: reserved",
            lines=[(earnings, -amount), (pending, amount)],
            created_by=requested_by,
        )
        payout.reservation = posted.transaction
        payout.save(update_fields=["reservation"])
    return payout


def _decide(*, payout_id: int, operator: User, status: str, reason: str, bank_reference: str = "") -> Payout:
    operator_require(operator=operator, permission=MOVE_MONEY)
    with transaction.atomic():
        payout = Payout.objects.select_for_update().select_related("seller").filter(pk=payout_id).first()
        if payout is None:
            raise PayoutRefused(_("This payout does not exist."), code="payout_unknown")
        if payout.status == PayoutStatus.PAID:
            raise PayoutRefused(_("This payout is already marked paid: nothing moved again."),
                                code="payout_already_paid")
        if payout.status != PayoutStatus.REQUESTED:
            raise PayoutRefused(_("This payout has already been decided."), code="payout_already_decided")
        pending = ledger_account_payouts_pending()
        if status == PayoutStatus.PAID:
            key, label = f"payout:{payout.pk}:paid", "paid"
            other = ledger_account_system(
                kind=LedgerAccount.Kind.PAYMENT_CLEARING, currency=CURRENCY, provider="bank"
            )
        else:
            key, label = f"payout:{payout.pk}:release", "rejected, released"
            other = ledger_account_for_seller(seller=payout.seller, currency=CURRENCY)
        posted = ledger_post(
            idempotency_key=key,
            kind=LedgerTransaction.Kind.PAYOUT,
            description=f"Payout #{payout.pk} of {payout.seller.name}: {label}",
            lines=[(pending, -payout.amount), (other, payout.amount)],
            created_by=operator,
        )
        payout.status = status
        payout.decided_by = operator
        payout.decided_at = timezone.now()
        payout.rejection_reason = reason if status == PayoutStatus.REJECTED else ""
        payout.bank_reference = bank_reference
        payout.settlement = posted.transaction
        payout.save(update_fields=["status", "decided_by", "decided_at", "rejection_reason", "bank_reference",
                                   "settlement"])
        audit_record(
            actor=operator,
            action=AuditAction.PAYOUT_PAY if status == PayoutStatus.PAID else AuditAction.PAYOUT_REJECT,
            target=payout, reason=reason,
            before={"status": PayoutStatus.REQUESTED},
            after={"status": status, "amount": payout.amount, "currency": payout.currency,
                   **({"bank_reference": bank_reference} if bank_reference else {})},
        )
        _decision_email(payout=payout)
    return payout


def _decision_email(*, payout: Payout) -> None:
    """Tell each owner of the seller, in their language, that the payout was paid or rejected (with
    the operator's reason)."""
    outcome = "paid" if payout.status == PayoutStatus.PAID else "rejected"
    for owner in seller_owners(seller_id=payout.seller_id):
        email_send(
            template=f"billing/email/payout_{outcome}", user=owner,
            key=f"payout-{outcome}:{payout.pk}:{owner.pk}",
            context=lambda: {
                "number": payout.pk,
                "name": payout.seller.name,
                "amount": formatting.usd(payout.amount),
                "reason": payout.rejection_reason,
                "bank_reference": payout.bank_reference,
                "url": absolute_url(reverse("sellers:portal-payouts")),
            },
        )


BANK_REFERENCE_MAX_LENGTH = 100


def payout_mark_paid(*, payout_id: int, operator: User, reference: str = "", reason: str = "") -> Payout:
    """The money has left the platform's bank: `reference` is the bank transfer's reference
    (required, stored on the payout and told to the seller), `reason` an optional note for the audit
    log. Callers that wrote the reference as the reason (before the reference had its own field) still
    work: without a reference, the reason is taken as it. Marking it paid again is refused
    (`payout_already_paid`): money moves once. Raises `OperatorNotAllowed`, `PayoutRefused`."""
    bank_reference = " ".join((reference or reason or "").split())
    if not bank_reference:
        raise PayoutRefused(
            _("Enter the reference of the bank transfer that paid this payout."),
            code="payout_reference_missing",
        )
    if len(bank_reference) > BANK_REFERENCE_MAX_LENGTH:
        raise PayoutRefused(
            _("The bank reference is at most %(count)d characters.") % {"count": BANK_REFERENCE_MAX_LENGTH},
            code="payout_reference_too_long",
        )
    return _decide(payout_id=payout_id, operator=operator, status=PayoutStatus.PAID,
                   reason=(reason or "").strip() or bank_reference, bank_reference=bank_reference)


def payout_reject(*, payout_id: int, operator: User, reason: str) -> Payout:
    """Refuse the payout and give the reserved amount back to the seller's earnings."""
    reason = (reason or "").strip()
    if not reason:
        raise PayoutRefused(_("Give the seller a reason for the rejection."), code="payout_reason_missing")
    return _decide(payout_id=payout_id, operator=operator, status=PayoutStatus.REJECTED, reason=reason)
