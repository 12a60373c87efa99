"""VAT refunds: the VAT charged on a top-up only because VIES had not confirmed the buyer's VAT ID
yet, given back once it does.

A business of another member state is reverse-charged only with a VAT ID that VIES confirmed
lately (`accounts.vies`). Until then its top-ups are charged VAT and record the number
(`TopUp.unconfirmed_vat_id`). When VIES confirms that same number, accounts announces it and
`top_ups_vat_refund_confirmed` (registered in `BillingConfig.ready`) refunds each such paid
top-up; a top-up paid after the confirmation is refunded as it is paid (`top_up_mark_paid`).

A refund is one ledger transaction moving the VAT still held on the top-up (what operators'
refunds have not given back already) from VAT payable to the buyer's wallet, a credit note of
that VAT, and the buyer's email, written to the outbox in the same transaction. Once per top-up:
the one-to-one row, checked under the top-up's lock, and the idempotency key
"top-up:<id>:vat-refund".
"""

from decimal import Decimal

from django.db import transaction
from django.db.models import Sum
from django.urls import reverse

from accounts.models import Profile, Wallet
from accounts.vies import vat_id_confirmed
from marketplace import formatting
from marketplace.emails import absolute_url, email_send

from ..ledger import ledger_account_for_wallet, ledger_account_system, ledger_post
from ..models import LedgerAccount, LedgerTransaction, TopUp, TopUpStatus, TopUpVatRefund
from .invoices import credit_note_issue_for_vat_refund

ZERO = Decimal("0.00")


def vat_refund_idempotency_key(*, top_up_id: int) -> str:
    return f"top-up:{top_up_id}:vat-refund"


@transaction.atomic
def top_up_vat_refund(*, top_up_id: int) -> TopUpVatRefund | None:
    """Give back the VAT of a paid top-up that was charged it only because VIES had not confirmed the
    buyer's VAT ID, now that VIES has confirmed that same number. None, with nothing written, for
    any other top-up, one already refunded, or one whose VAT operators' refunds gave back in full."""
    top_up = TopUp.objects.select_for_update().filter(pk=top_up_id).first()
    if top_up is None or top_up.status != TopUpStatus.PAID or not top_up.unconfirmed_vat_id:
        return None
    if TopUpVatRefund.objects.filter(top_up=top_up).exists():
        return None
    profile = Profile.objects.filter(user_id=top_up.user_id).first()
    confirmed = profile is not None and profile.vat_id == top_up.unconfirmed_vat_id
    if not (confirmed and vat_id_confirmed(profile=profile)):
        return None
    vat = top_up.vat_amount - (top_up.refunds.aggregate(vat=Sum("vat_amount"))["vat"] or ZERO)
    if vat <= 0:
        return None
    wallet = Wallet.objects.get(user_id=top_up.user_id)
    vat_payable = ledger_account_system(kind=LedgerAccount.Kind.VAT_PAYABLE, currency=top_up.currency)
    posted = ledger_post(
        idempotency_key=vat_refund_idempotency_key(top_up_id=top_up.pk), kind=LedgerTransaction.Kind.REFUND,
        description=f"VAT of top-up {top_up.reference} refunded: VIES confirmed {profile.vat_id}",
        lines=[(vat_payable, -vat), (ledger_account_for_wallet(wallet=wallet), vat)],
    )
    vat_refund = TopUpVatRefund.objects.create(
        top_up=top_up, currency=top_up.currency, vat_amount=vat, vat_id=profile.vat_id,
        confirmed_at=profile.vat_id_checked_at, ledger_transaction=posted.transaction,
    )
    credit_note = credit_note_issue_for_vat_refund(vat_refund=vat_refund)
    _vat_refund_email(vat_refund=vat_refund, wallet=wallet, number=credit_note.number)
    return vat_refund


def top_ups_vat_refund_confirmed(*, user_id: int) -> list[TopUpVatRefund]:
    """Refund the VAT of each of the user's paid top-ups that was charged it while VIES had not
    confirmed their VAT ID (`top_up_vat_refund`, one transaction each). Safe to call any number of
    times: VIES announces every "valid" answer."""
    top_up_ids = (
        TopUp.objects.filter(user_id=user_id, status=TopUpStatus.PAID, vat_refund__isnull=True)
        .exclude(unconfirmed_vat_id="")
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    refunds = [top_up_vat_refund(top_up_id=top_up_id) for top_up_id in top_up_ids]
    return [refund for refund in refunds if refund is not None]


def _vat_refund_email(*, vat_refund: TopUpVatRefund, wallet: Wallet, number: str) -> None:
    """Tell the buyer, in their language, that VIES confirmed their VAT number and how much VAT of
    which top-up went to their balance, with the credit note."""
    currency = vat_refund.currency
    wallet.refresh_from_db(fields=["balance"])
    email_send(
        template="billing/email/vat_refund", user=vat_refund.top_up.user,
        key=f"top-up-vat-refund:{vat_refund.top_up_id}",
        context=lambda: {
            "reference": vat_refund.top_up.reference,
            "vat_id": vat_refund.vat_id,
            "vat": formatting.money(vat_refund.vat_amount, currency),
            "balance": formatting.money(wallet.balance, currency),
            "number": number,
            "url": absolute_url(reverse("billing:credit-note", kwargs={"number": number})),
        },
    )
