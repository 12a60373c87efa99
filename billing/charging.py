"""Hourly charging: "charge the next hour of this rental", the one service every rental hour goes through.

Prepaid and in advance: the first hour when the rental starts, then one hour at each hour
boundary. Each hour is one ledger transaction under the key "rental:<id>:hour:<start, UTC>"
and one `RentalCharge` row, unique per (rental, hour start): delivering the same charge twice,
from two beat processes or a retried task, moves the money once.

Lock order, the same as the exchange's: the rental row first, then the wallet (inside
`ledger_post`), then whatever `exchange.services.rental_end` takes (the market lock of the GPU
model, then server rows). A rental is charged by one process at a time: the others wait for
its row and then find the hour paid.
"""

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from accounts.models import Wallet
from exchange.models import EndReason, Rental, RentalState
from exchange.services import rental_end, rental_mark_paid, rentals_due
from marketplace.errors import DomainError
from marketplace.money import money_round

from .exceptions import InsufficientBalance, RateMissing
from .fx import BASE_CURRENCY, fx_convert_from_usd
from .ledger import ledger_account_for_seller, ledger_account_for_wallet, ledger_account_system, ledger_post
from .models import ExchangeRate, LedgerAccount, LedgerTransaction, RentalCharge

logger = logging.getLogger(__name__)

HOUR = timedelta(hours=1)


class ChargeStatus:
    """What `rental_charge_next_hour` did (`ChargeOutcome.status`)."""

    CHARGED = "charged"  # the next hour was paid; `charge` is the new row
    ALREADY_CHARGED = "already charged"  # that hour had been paid before; `charge` is that row
    NOT_DUE = "not due"  # the rental is paid beyond `now`: nothing to do yet
    ENDED = "ended"  # the rental had already ended: nothing moves
    HOURS_USED = "hours used"  # every booked hour was paid: the rental ended at the last boundary
    PAYMENT_FAILED = "payment failed"  # the first hour could not be paid: the rental ended
    BALANCE_EXHAUSTED = "balance exhausted"  # a later hour could not be paid: the rental ended


@dataclass(frozen=True)
class ChargeOutcome:
    status: str
    charge: RentalCharge | None = None


@dataclass(frozen=True)
class _Split:
    cost_usd: Decimal
    fee_usd: Decimal
    seller_earnings_usd: Decimal


def _split(*, price_usd: Decimal, gpus: int) -> _Split:
    """price x GPUs, the platform's fee on it (half-up to the cent) and what is left for the seller."""
    cost_usd = money_round(price_usd * gpus, BASE_CURRENCY)
    percent = Decimal(settings.PLATFORM_FEE_PERCENT)
    if not Decimal(0) <= percent <= Decimal(100):
        raise ValueError(f"PLATFORM_FEE_PERCENT must be between 0 and 100, not {percent}.")
    fee_usd = money_round(cost_usd * percent / 100, BASE_CURRENCY)
    return _Split(cost_usd=cost_usd, fee_usd=fee_usd, seller_earnings_usd=cost_usd - fee_usd)


def _idempotency_key(*, rental_id: int, period_start: datetime) -> str:
    return f"rental:{rental_id}:hour:{period_start.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"


def _charge_lines(*, rental: Rental, wallet: Wallet, split: _Split, amount: Decimal) -> list:
    """The lines of one hour, summing to zero in each currency; zero lines (a fee of 0.00) left out."""
    Kind = LedgerAccount.Kind
    lines = [(ledger_account_for_wallet(wallet=wallet), -amount)]
    if wallet.currency != BASE_CURRENCY:
        # The platform changes the buyer's money into dollars: it receives the wallet's currency
        # on its FX account and pays the dollars out of its FX account in USD.
        lines += [
            (ledger_account_system(kind=Kind.FX, currency=wallet.currency), amount),
            (ledger_account_system(kind=Kind.FX, currency=BASE_CURRENCY), -split.cost_usd),
        ]
    if split.seller_earnings_usd:
        earnings = ledger_account_for_seller(seller=rental.server.seller, currency=BASE_CURRENCY)
        lines.append((earnings, split.seller_earnings_usd))
    if split.fee_usd:
        lines.append(
            (ledger_account_system(kind=Kind.PLATFORM_REVENUE, currency=BASE_CURRENCY), split.fee_usd)
        )
    return lines


def _rental_end_unpaid(*, rental: Rental, now: datetime) -> ChargeOutcome:
    """The wallet cannot pay the next hour: end the rental at that boundary and tell the buyer."""
    first_hour = rental.paid_through is None
    if first_hour:
        ended = rental_end(rental_id=rental.pk, reason=EndReason.PAYMENT_FAILED, at=now)
    else:
        ended = rental_end(rental_id=rental.pk, reason=EndReason.BALANCE_EXHAUSTED, at=rental.paid_through)
    from .tasks import rental_unpaid_email_send

    transaction.on_commit(lambda: rental_unpaid_email_send.delay(ended.pk))
    return ChargeOutcome(status=ChargeStatus.PAYMENT_FAILED if first_hour else ChargeStatus.BALANCE_EXHAUSTED)


@transaction.atomic
def rental_charge_next_hour(*, rental_id: int, now: datetime | None = None) -> ChargeOutcome:
    """Charge the hour of the rental that starts where it is paid through (its start, the first
    time), if that hour has begun by `now`. See `ChargeStatus` for the outcomes.

    One database transaction: the rental row is locked first, the hour is posted to the ledger
    (wallet -> seller's earnings + platform's fee), the rental is marked paid through the end of
    the hour and running, and the `RentalCharge` row is written. A wallet that cannot pay (none,
    too low, no exchange rate for its currency) ends the rental instead, moving nothing, and the
    buyer is emailed after commit.
    """
    now = now or timezone.now()
    rental = (
        Rental.objects.select_for_update(of=("self",))
        .select_related("server__seller", "gpu_model")
        .get(pk=rental_id)
    )
    if rental.state == RentalState.ENDED:
        return ChargeOutcome(status=ChargeStatus.ENDED)
    period_start = rental.paid_through or rental.started_at
    if period_start > now:
        # Checked before the booked hours: a rental whose last hour is still running keeps its GPUs
        # until that hour is over.
        return ChargeOutcome(status=ChargeStatus.NOT_DUE)
    if rental.hours is not None and period_start >= rental.started_at + rental.hours * HOUR:
        rental_end(rental_id=rental.pk, reason=EndReason.HOURS_USED, at=period_start)
        return ChargeOutcome(status=ChargeStatus.HOURS_USED)

    existing = RentalCharge.objects.filter(rental=rental, period_start=period_start).first()
    if existing is not None:
        return ChargeOutcome(status=ChargeStatus.ALREADY_CHARGED, charge=existing)

    wallet = Wallet.objects.filter(user_id=rental.buyer_id).first()
    if wallet is None:
        return _rental_end_unpaid(rental=rental, now=now)
    split = _split(price_usd=rental.price_usd, gpus=rental.gpus)
    try:
        conversion = fx_convert_from_usd(amount_usd=split.cost_usd, currency=wallet.currency)
    except RateMissing:
        logger.warning("No %s rate to charge rental %s: ending it.", wallet.currency, rental.pk)
        return _rental_end_unpaid(rental=rental, now=now)
    fx_rate = ExchangeRate.objects.get(pk=conversion.rate_id) if conversion.rate_id else None
    period_end = period_start + HOUR
    key = _idempotency_key(rental_id=rental.pk, period_start=period_start)
    try:
        posted = ledger_post(
            idempotency_key=key,
            kind=LedgerTransaction.Kind.CHARGE,
            description=(
                f"Rental {rental.pk}: {rental.gpus} x {rental.gpu_model.name} at {rental.price_usd} USD, "
                f"hour from {period_start.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
            ),
            lines=_charge_lines(rental=rental, wallet=wallet, split=split, amount=conversion.amount),
            fx_rate=fx_rate,
        )
    except InsufficientBalance:
        return _rental_end_unpaid(rental=rental, now=now)
    if not posted.created:
        # The key was posted but no charge row says so: the hour is paid, its row belongs to it.
        charge = RentalCharge.objects.filter(ledger_transaction=posted.transaction).first()
        if charge is not None:
            return ChargeOutcome(status=ChargeStatus.ALREADY_CHARGED, charge=charge)
        raise RuntimeError(f"Ledger transaction {posted.transaction.pk} ({key}) has no rental charge.")

    rental_mark_paid(rental_id=rental.pk, paid_through=period_end)
    charge = RentalCharge.objects.create(
        rental=rental,
        period_start=period_start,
        period_end=period_end,
        ledger_transaction=posted.transaction,
        cost_usd=split.cost_usd,
        amount=conversion.amount,
        currency=wallet.currency,
        fx_rate=fx_rate,
        seller_earnings_usd=split.seller_earnings_usd,
        fee_usd=split.fee_usd,
        created_at=posted.transaction.created_at,
    )
    return ChargeOutcome(status=ChargeStatus.CHARGED, charge=charge)


def rentals_charge_due(*, now: datetime | None = None, limit: int | None = None) -> dict[str, int]:
    """Charge every rental that is due at `now`, in rental id order, at most `limit` rentals.

    A rental is charged hour after hour until it is paid beyond `now` (a rental that missed
    several boundaries pays each missed hour, in order) or ends. Each hour is its own database
    transaction, so a run stopped midway (a killed worker, a time limit) keeps what it charged
    and the next run carries on; two runs at once charge each hour once.

    Returns counts: "rentals" looked at, and one count per `ChargeStatus` reached (hours charged
    under "charged"), plus "errors" for rentals that failed unexpectedly (logged, retried next run).
    """
    now = now or timezone.now()
    counts: Counter[str] = Counter()
    # Starting rentals and running ones paid up to `now`, in id order (the exchange's definition).
    due = rentals_due(now=now).values_list("id", flat=True)
    for rental_id in list(due[:limit] if limit is not None else due):
        counts["rentals"] += 1
        try:
            while True:
                outcome = rental_charge_next_hour(rental_id=rental_id, now=now)
                counts[outcome.status] += 1
                if outcome.status != ChargeStatus.CHARGED or outcome.charge.period_end > now:
                    break
        except (DomainError, DatabaseError):
            logger.exception("Charging rental %s failed; the next run tries again.", rental_id)
            counts["errors"] += 1
    return {"rentals": 0, ChargeStatus.CHARGED: 0, "errors": 0, **counts}


def rental_first_hour_payable(*, buyer_id: int, price_usd: Decimal, gpus: int) -> bool:
    """Whether the buyer's wallet covers the first hour of `gpus` GPUs at `price_usd` each, converted
    into the wallet's currency at the current rate. Reads the balance without locking it: the
    charge itself decides. False without a wallet or without a rate for its currency."""
    wallet = Wallet.objects.filter(user_id=buyer_id).first()
    if wallet is None:
        return False
    try:
        conversion = fx_convert_from_usd(
            amount_usd=money_round(price_usd * gpus, BASE_CURRENCY), currency=wallet.currency
        )
    except RateMissing:
        return False
    return wallet.balance >= conversion.amount


def rental_unpaid_email_send(*, rental_id: int) -> bool:
    """Tell the buyer, in their language, that their rental ended because the balance could not pay
    its next hour, with a link to the top-up page."""
    from django.core.mail import send_mail
    from django.urls import reverse
    from django.utils import formats, translation
    from django.utils.translation import gettext

    from accounts.models import Profile

    rental = (
        Rental.objects.select_related("buyer", "gpu_model")
        .filter(
            pk=rental_id,
            state=RentalState.ENDED,
            end_reason__in=(EndReason.PAYMENT_FAILED, EndReason.BALANCE_EXHAUSTED),
        )
        .first()
    )
    if rental is None:
        return False
    profile = Profile.objects.filter(user=rental.buyer).first()
    language = profile.preferred_language if profile else settings.LANGUAGE_CODE
    with translation.override(language):
        path = reverse("billing:top-up")
        values = {
            "gpus": rental.gpus,
            "gpu": rental.gpu_model.name,
            "number": rental.pk,
            "ended_at": formats.date_format(rental.ended_at, "DATETIME_FORMAT"),
            "url": settings.SITE_URL + path if settings.SITE_URL else path,
        }
        subject = gettext("Your EverXCloud rental %(number)s has ended") % values
        if rental.end_reason == EndReason.PAYMENT_FAILED:
            reason = gettext(
                "Your rental %(number)s of %(gpus)s × %(gpu)s did not start: your balance could not "
                "pay its first hour. Its GPUs have gone back to the market."
            ) % values
        else:
            reason = gettext(
                "Your rental %(number)s of %(gpus)s × %(gpu)s ended on %(ended_at)s (UTC) because "
                "your balance could not pay its next hour. Its GPUs have gone back to the market."
            ) % values
        body = "\n\n".join(
            [
                gettext("Hello,"),
                reason,
                gettext("Top up your balance to rent GPUs again: %(url)s") % values,
                gettext("Thank you for using EverXCloud."),
            ]
        ) + "\n"
    send_mail(subject, body, None, [rental.buyer.email])
    return True
