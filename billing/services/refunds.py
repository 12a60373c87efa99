"""A seller's server fails: its rentals end and each buyer gets back the unused minutes of the hour
they had paid for, and an email saying so.

The hour was charged in advance as one ledger transaction: the wallet paid `amount` (its currency),
the seller earned `seller_earnings_usd` and the platform kept `fee_usd` of `cost_usd`. The refund
posts the unused part of each of those lines back, in one transaction per rental under the key
"rental:<id>:server-failure-refund": each line is the original times (unused minutes / 60), rounded
half-up to the cent, except the platform's fee, which is what remains of the refunded cost once
the seller's part is taken off, so that the lines still sum to zero in US dollars (the platform,
not the seller or the buyer, absorbs the rounding cent). A wallet in euros or pounds gets back its
own currency through the FX account, at the rate of the original charge, never at today's rate.

Lock order, the same as charging's: the rental rows first (ascending ids), then the wallets
(ascending ids), then the market lock of the GPU model (withdrawing the offer, ending rentals).
"""

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from accounts.models import AuditAction, User, Wallet
from accounts.roles import MOVE_MONEY
from accounts.services import audit_record, operator_require, reason_require
from exchange.exceptions import RentalEnded, RentalNotFound
from exchange.models import EndReason, Rental, RentalState
from exchange.services import rental_end, server_failure_apply
from marketplace import formatting
from marketplace.emails import email_send
from marketplace.money import money_round
from sellers.models import Server

from ..ledger import ledger_account_for_seller, ledger_account_for_wallet, ledger_account_system, ledger_post
from ..models import LedgerAccount, LedgerTransaction, RentalCharge
from ..selectors.fx import BASE_CURRENCY

logger = logging.getLogger(__name__)

MINUTE = timedelta(minutes=1)
MINUTES_PER_HOUR = 60
ZERO = Decimal("0.00")


def refund_idempotency_key(*, rental_id: int) -> str:
    return f"rental:{rental_id}:server-failure-refund"


@dataclass(frozen=True)
class RentalRefund:
    """The unused part of one rental's paid time, as it was posted (or would be)."""

    rental_id: int
    unused_minutes: int  # over every paid hour not used, usually fewer than 60
    amount: Decimal  # back to the wallet, in its currency
    currency: str
    cost_usd: Decimal  # the refunded cost in US dollars
    seller_earnings_usd: Decimal  # taken back from the seller
    fee_usd: Decimal  # taken back from the platform's revenue
    transaction: LedgerTransaction | None = None  # None when nothing was left to refund


@dataclass(frozen=True)
class ServerFailure:
    server_id: int
    at: datetime
    ended_rental_ids: list[int] = field(default_factory=list)
    refunds: list[RentalRefund] = field(default_factory=list)
    withdrawn_offer_id: int | None = None


def _unused_minutes(charge: RentalCharge, at: datetime) -> int:
    """Whole minutes of the charged hour after `at`: a minute begun is a minute used."""
    unused = charge.period_end - max(at, charge.period_start)
    if unused <= timedelta(0):
        return 0
    return min(int(unused // MINUTE), MINUTES_PER_HOUR)


def _part(value: Decimal, minutes: int, currency: str) -> Decimal:
    return money_round(value * minutes / MINUTES_PER_HOUR, currency)


def rental_refund_compute(*, rental: Rental, charges: list[RentalCharge], at: datetime) -> RentalRefund:
    """What ending the rental at `at` gives back: the unused minutes of each charged hour that had
    not run out by `at` (the current hour, and any later hour already charged)."""
    amount = cost = earnings = ZERO
    minutes_total = 0
    currency = None
    for charge in charges:
        minutes = _unused_minutes(charge, at)
        if not minutes:
            continue
        currency = charge.currency
        minutes_total += minutes
        amount += _part(charge.amount, minutes, charge.currency)
        part_cost = _part(charge.cost_usd, minutes, BASE_CURRENCY)
        part_earnings = _part(charge.seller_earnings_usd, minutes, BASE_CURRENCY)
        cost += part_cost
        earnings += part_earnings
    return RentalRefund(
        rental_id=rental.pk,
        unused_minutes=minutes_total,
        amount=amount,
        currency=currency or "",
        cost_usd=cost,
        seller_earnings_usd=earnings,
        fee_usd=cost - earnings,
    )


def _refund_lines(*, rental: Rental, wallet: Wallet, refund: RentalRefund) -> list:
    """The charge's lines, reversed in proportion; zero lines left out. Sums to zero per currency."""
    Kind = LedgerAccount.Kind
    lines = [(ledger_account_for_wallet(wallet=wallet), refund.amount)]
    if wallet.currency != BASE_CURRENCY:
        lines += [
            (ledger_account_system(kind=Kind.FX, currency=wallet.currency), -refund.amount),
            (ledger_account_system(kind=Kind.FX, currency=BASE_CURRENCY), refund.cost_usd),
        ]
    if refund.seller_earnings_usd:
        earnings = ledger_account_for_seller(seller=rental.server.seller, currency=BASE_CURRENCY)
        lines.append((earnings, -refund.seller_earnings_usd))
    if refund.fee_usd:
        lines.append(
            (ledger_account_system(kind=Kind.PLATFORM_REVENUE, currency=BASE_CURRENCY), -refund.fee_usd)
        )
    return [(account, amount) for account, amount in lines if amount]


def _refund_post(*, rental: Rental, wallet: Wallet, refund: RentalRefund, charges: list[RentalCharge],
                 reported_by: User | None = None, key: str | None = None, why: str = "") -> RentalRefund:
    if refund.amount <= 0 or wallet.currency != refund.currency:
        if refund.amount > 0:
            logger.error("Rental %s was charged in %s but its wallet is in %s: no refund posted.",
                         rental.pk, refund.currency, wallet.currency)
        return refund
    lines = _refund_lines(rental=rental, wallet=wallet, refund=refund)
    rate = next((charge.fx_rate for charge in reversed(charges) if charge.fx_rate_id), None)
    posted = ledger_post(
        idempotency_key=key or refund_idempotency_key(rental_id=rental.pk),
        kind=LedgerTransaction.Kind.REFUND,
        description=(
            f"Rental {rental.pk}: {why or f'server {rental.server_id} failed'}; refund of "
            f"{refund.unused_minutes} unused minutes ({refund.cost_usd} USD)"
        )[:300],
        lines=lines,
        created_by=reported_by,
        fx_rate=rate,
    )
    return RentalRefund(**{**refund.__dict__, "transaction": posted.transaction})


def _charges_not_run_out(*, rental_ids: list[int], at: datetime) -> dict[int, list[RentalCharge]]:
    """The charged hours of these rentals that had not run out by `at`, per rental, oldest first."""
    charges_of: dict[int, list[RentalCharge]] = defaultdict(list)
    for charge in (
        RentalCharge.objects.filter(rental__in=rental_ids, period_end__gt=at)
        .select_related("fx_rate")
        .order_by("rental_id", "period_start")
    ):
        charges_of[charge.rental_id].append(charge)
    return charges_of


def _failure_refund(
    *, rental: Rental, charges: list[RentalCharge], wallet: Wallet | None, at: datetime,
    reported_by: User | None = None, why: str = "",
) -> RentalRefund:
    """The refund rule of a failure, posted under the rental's server-failure key: the unused
    minutes after `at` of the hours paid. The rental row and the wallet are locked by the caller."""
    refund = rental_refund_compute(rental=rental, charges=charges, at=at)
    if wallet is None or not charges:
        return refund
    return _refund_post(rental=rental, wallet=wallet, refund=refund, charges=charges, reported_by=reported_by,
                        why=why)


@transaction.atomic
def server_failure_report(
    *, server_id: int, reported_by: User | None = None, at: datetime | None = None
) -> ServerFailure:
    """The server failed at `at` (now by default): withdraw its active offer, end every rental of it
    that is starting or running with reason "server failure" at `at`, refund each buyer the unused
    minutes of the hour they had paid (see the module's docstring) and write each buyer's email, in
    one database transaction. Reporting the same failure again changes nothing: the rentals have
    ended and each refund's key is taken. The server's status is left as it is: operators decide its future.

    Raises `Server.DoesNotExist` for an unknown server and ValueError for a time in the future.
    """
    now = timezone.now()
    at = at or now
    if timezone.is_naive(at):
        raise ValueError("The time of a server failure needs a time zone.")
    if at > now:
        raise ValueError("A server failure is reported once it has happened, not in advance.")
    server = Server.objects.select_related("seller").get(pk=server_id)

    rentals = list(
        Rental.objects.select_for_update(of=("self",))
        .filter(server_id=server.pk, state__in=(RentalState.STARTING, RentalState.RUNNING))
        .order_by("id")
    )
    for rental in rentals:
        rental.server = server  # the refund lines need its seller
    charges_of = _charges_not_run_out(rental_ids=[rental.pk for rental in rentals], at=at)
    wallets = {
        wallet.user_id: wallet
        for wallet in Wallet.objects.select_for_update()
        .filter(user_id__in={rental.buyer_id for rental in rentals})
        .order_by("pk")
    }

    refunds = [
        _failure_refund(
            rental=rental, charges=charges_of.get(rental.pk, []), wallet=wallets.get(rental.buyer_id), at=at,
            reported_by=reported_by,
        )
        for rental in rentals
    ]

    failed = server_failure_apply(server_id=server.pk, rentals=rentals, at=at)
    refund_of = {refund.rental_id: refund for refund in refunds}
    ended = Rental.objects.filter(pk__in=failed.ended_rental_ids).select_related(
        "buyer__profile", "gpu_model"
    )
    for rental in ended.order_by("id"):
        _rental_ended_email(
            template="billing/email/rental_server_failure", rental=rental, refund=refund_of[rental.pk]
        )
    logger.warning(
        "Server %s reported failed at %s by %s: %d rentals ended, %d refunded.",
        server.pk, at.astimezone(UTC).isoformat(), reported_by or "the system", len(failed.ended_rental_ids),
        sum(1 for refund in refunds if refund.transaction is not None),
    )
    return ServerFailure(
        server_id=server.pk,
        at=at,
        ended_rental_ids=failed.ended_rental_ids,
        refunds=refunds,
        withdrawn_offer_id=failed.withdrawn_offer_id,
    )


GPU_FAILURE_EMAIL = "billing/email/rental_gpu_failure"


@transaction.atomic
def rental_fail(
    *, rental_id: int, at: datetime, why: str, email_template: str = GPU_FAILURE_EMAIL,
    reason: str = EndReason.SERVER_FAILURE,
) -> RentalRefund | None:
    """One rental failed at `at` while its server goes on (a GPU it holds failed, say; `why` tells
    the ledger): it ends with `reason` ("server failure", or "isolation lost" when its server can no
    longer keep it apart from the others) with the refund rule of a server failure, the unused
    minutes of the hours paid after `at`, under the same key (a rental is refunded once, whichever
    way it failed), its GPUs go back to the book and the buyer is emailed. Returns None, changing
    nothing, when the rental had ended. Raises ValueError for a naive or future `at`."""
    if timezone.is_naive(at):
        raise ValueError("The time of a failure needs a time zone.")
    if at > timezone.now():
        raise ValueError("A failure is reported once it has happened, not in advance.")
    rental = (
        Rental.objects.select_for_update(of=("self",)).select_related("server__seller")
        .filter(pk=rental_id).first()
    )
    if rental is None or rental.state == RentalState.ENDED:
        return None
    charges = _charges_not_run_out(rental_ids=[rental.pk], at=at).get(rental.pk, [])
    wallet = Wallet.objects.select_for_update().filter(user_id=rental.buyer_id).first()
    refund = _failure_refund(rental=rental, charges=charges, wallet=wallet, at=at, why=why)
    ended = rental_end(rental_id=rental.pk, reason=reason, at=max(at, rental.started_at))
    _rental_ended_email(template=email_template, rental=ended, refund=refund)
    logger.warning("Rental %s failed at %s (%s): ended, %s refunded.", rental.pk,
                   at.astimezone(UTC).isoformat(), why, refund.amount if refund.transaction else ZERO)
    return refund


def operator_refund_idempotency_key(*, rental_id: int) -> str:
    return f"rental:{rental_id}:operator-refund"


@transaction.atomic
def rental_end_by_operator(*, rental_id: int, operator: User, reason: str) -> RentalRefund:
    """An operator ends a rental now, with the refund rule of a server failure: the buyer gets back
    the unused minutes of the hour paid, taken back from the seller's earnings and the platform's
    fee in proportion. Its GPUs go back to the book. Raises `OperatorNotAllowed`, `ReasonRequired`,
    `RentalNotFound`, `RentalEnded` (nothing changed)."""
    operator_require(operator=operator, permission=MOVE_MONEY)
    reason = reason_require(reason)
    at = timezone.now()
    rental = (
        Rental.objects.select_for_update(of=("self",)).select_related("server__seller")
        .filter(pk=rental_id).first()
    )
    if rental is None:
        raise RentalNotFound(_("We could not find this rental."), code="rental_not_found")
    if rental.state == RentalState.ENDED:
        raise RentalEnded(_("This rental has already ended."), code="rental_ended")
    state_before = rental.state
    charges = list(
        RentalCharge.objects.filter(rental=rental, period_end__gt=at).select_related("fx_rate")
        .order_by("period_start")
    )
    refund = rental_refund_compute(rental=rental, charges=charges, at=at)
    wallet = Wallet.objects.select_for_update().filter(user_id=rental.buyer_id).first()
    if wallet is not None and charges:
        refund = _refund_post(
            rental=rental, wallet=wallet, refund=refund, charges=charges, reported_by=operator,
            key=operator_refund_idempotency_key(rental_id=rental.pk), why="ended by an operator",
        )
    ended = rental_end(rental_id=rental.pk, reason=EndReason.OPERATOR, at=at)
    _rental_ended_email(template="billing/email/rental_ended_by_operator", rental=ended, refund=refund)
    audit_record(
        actor=operator, action=AuditAction.RENTAL_END, target=rental, reason=reason,
        before={"state": state_before},
        after={"state": RentalState.ENDED, "refund": refund.amount if refund.transaction else ZERO,
               "currency": refund.currency, "unused_minutes": refund.unused_minutes},
    )
    return refund


def _rental_ended_email(*, template: str, rental: Rental, refund: RentalRefund) -> None:
    """Tell the buyer, in their language, that EverXCloud ended their rental (an operator, or its
    server's failure) and what came back to their balance. An operator's reason stays internal
    (it is in the audit log)."""
    refunded = refund.transaction is not None
    email_send(template=template, user=rental.buyer, key=f"rental-ended:{rental.pk}", context=lambda: {
        "number": rental.pk,
        "gpus": rental.gpus,
        "gpu": rental.gpu_model.name,
        "ended_at": formatting.datetime_long(rental.ended_at),
        "amount": formatting.money(refund.amount, refund.currency) if refunded else "",
    })
