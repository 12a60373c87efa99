"""Hourly charging: "charge the next hour of this rental", the one service every rental hour goes through.

Prepaid and in advance: the first hour when the rental starts, then one hour at each hour
boundary. Each hour is one ledger transaction under the key "rental:<id>:hour:<start, UTC>"
and one `RentalCharge` row, unique per (rental, hour start): delivering the same charge twice,
from two beat processes or a retried task, moves the money once.

The money rules live in `_next_hour_charge` alone. `rental_charge_next_hour` (one rental, one
hour), `first_hour.rental_charge_first_hour` (the first hour of a buyer's own order, in the
order's transaction) and `rentals_charge_due` (the charging run, in batches) all go through it,
each passing the books it decides against; it decides how a rental must end but never ends it
itself, so that each caller ends rentals at a point that keeps the lock order.

Lock order, the same as the exchange's (see `exchange.matching`):

    rental rows  ->  wallet rows, by ascending id  ->  market locks of the GPU models, by
    ascending id (inside `exchange.services.rental_end`)  ->  server rows

A rental is charged by one process at a time: the others skip it (the charging run) or wait
for its row and then find the hour paid. The ledger accounts a batch posts to are created
before its transaction begins, so that no batch holds an uncommitted new account another needs.

Reads and writes in batches: `_next_hour_charge` decides against `_Books`, the rows its charges
need (rentals, wallets, ledger accounts, current rates, hours charged already), read with a
constant number of queries for a whole batch, and records each charge there; `_Books.write`
then posts them all at once (`billing.ledger.ledger_post_many`, one statement per table) and the
exchange marks the rentals paid (`rentals_mark_paid`). A batch of a thousand rentals costs a few
dozen statements, not tens of thousands of round trips. A batch that cannot be written at once
(an unexpected error) is charged again rental by rental, each in a savepoint of its own.

The clock: every decision of a charge or of a run is taken against one aware `now`, given by
the caller or read once from `django.utils.timezone.now()` (UTC; tests freeze it with
time-machine). A naive datetime is refused rather than compared with the aware ones stored.
"""

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, F, OuterRef, Q
from django.urls import reverse
from django.utils import timezone

from accounts.models import Wallet
from exchange.models import EndReason, Rental, RentalState
from exchange.services import rental_end, rentals_due, rentals_mark_paid
from marketplace import formatting
from marketplace.emails import absolute_url, email_send
from marketplace.money import CURRENCIES, money_round
from marketplace.sql import rows_insert
from sellers.models import Seller

from ..exceptions import RateMissing
from ..ledger import (
    Posting,
    ledger_account_for_seller,
    ledger_account_for_wallet,
    ledger_account_system,
    ledger_post_many,
)
from ..models import LedgerAccount, LedgerTransaction, RentalCharge
from ..selectors.fx import BASE_CURRENCY, fx_convert_from_usd, fx_rates_current

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


def _charge_lines(*, books: "_Books", rental: Rental, wallet: Wallet, split: _Split, amount: Decimal) -> list:
    """The lines of one hour, summing to zero in each currency; zero lines (a fee of 0.00) left out."""
    Kind = LedgerAccount.Kind
    lines = [(books.wallet_account(wallet), -amount)]
    if wallet.currency != BASE_CURRENCY:
        # The platform changes the buyer's money into dollars: it receives the wallet's currency
        # on its FX account and pays the dollars out of its FX account in USD.
        lines += [
            (books.system_account(Kind.FX, wallet.currency), amount),
            (books.system_account(Kind.FX, BASE_CURRENCY), -split.cost_usd),
        ]
    if split.seller_earnings_usd:
        lines.append((books.seller_account(rental.server_seller_id), split.seller_earnings_usd))
    if split.fee_usd:
        lines.append((books.system_account(Kind.PLATFORM_REVENUE, BASE_CURRENCY), split.fee_usd))
    return lines


# --- the rows charges read, and the charges to write -----------------------------------------------


@dataclass
class _Charge:
    """An hour decided by `_next_hour_charge`, to be written by `_Books.write`."""

    posting: Posting
    row: RentalCharge  # unsaved: its ledger transaction is written first
    rental: Rental
    wallet_id: int
    amount: Decimal
    before: tuple[datetime | None, str]  # the rental's paid_through and state before this hour


class _Books:
    """The rows the charges of some rentals read, and the charges decided but not yet written.

    Made inside the caller's transaction and handed to `_next_hour_charge`: the rentals are locked
    first, then the wallets of their buyers in ascending id order (the lock order of the module's
    docstring); the ledger accounts, the current exchange rates and the hours already charged are
    read once. `_next_hour_charge` keeps each wallet's balance as the charges before leave it;
    `write` posts every charge at once. `mark` and `undo` forget the charges decided since a mark:
    a rental that fails is dropped alone, as a savepoint would drop it.
    """

    def __init__(self, *, rental_ids: list[int]):
        # The seller and the GPU's name as two columns, not as three more model instances per
        # rental: building those was the costliest part of reading a batch.
        rentals = (
            Rental.objects.select_for_update(of=("self",))
            .annotate(server_seller_id=F("server__seller_id"), gpu_model_name=F("gpu_model__name"))
            .filter(pk__in=rental_ids)
        )
        self.rentals = {rental.pk: rental for rental in rentals}
        buyer_ids = {rental.buyer_id for rental in self.rentals.values()}
        wallets = list(Wallet.objects.select_for_update().filter(user_id__in=buyer_ids).order_by("pk"))
        self.wallets = {wallet.user_id: wallet for wallet in wallets}
        self.balances = {wallet.pk: wallet.balance for wallet in wallets}
        self.rates = fx_rates_current(currencies={wallet.currency for wallet in wallets})
        # The buyers' wallet accounts, the sellers' earnings in dollars and the platform's own
        # accounts (a handful), in one query; any missing is created when first needed.
        Kind = LedgerAccount.Kind
        accounts = LedgerAccount.objects.filter(
            Q(wallet__in=wallets)
            | Q(kind=Kind.SELLER_EARNINGS, currency=BASE_CURRENCY,
                seller_id__in={rental.server_seller_id for rental in self.rentals.values()})
            | Q(kind__in=(Kind.FX, Kind.PLATFORM_REVENUE))
        )
        self._wallet_accounts: dict[int, LedgerAccount] = {}
        self._seller_accounts: dict[int, LedgerAccount] = {}
        self._system_accounts: dict[tuple[str, str], LedgerAccount] = {}
        for account in accounts:
            if account.wallet_id is not None:
                self._wallet_accounts[account.wallet_id] = account
            elif account.seller_id is not None:
                self._seller_accounts[account.seller_id] = account
            else:
                self._system_accounts[account.kind, account.currency] = account
        # Hours charged from where each rental is paid through on: normally none.
        self.charged = {
            (charge.rental_id, charge.period_start): charge
            for charge in RentalCharge.objects.filter(rental_id__in=list(self.rentals)).filter(
                Q(rental__paid_through__isnull=True) | Q(period_start__gte=F("rental__paid_through"))
            )
        }
        self.charges: list[_Charge] = []

    def rental(self, rental_id: int) -> Rental:
        try:
            return self.rentals[rental_id]
        except KeyError:
            raise Rental.DoesNotExist(f"Rental {rental_id} does not exist.") from None

    def wallet_account(self, wallet: Wallet) -> LedgerAccount:
        if wallet.pk not in self._wallet_accounts:
            self._wallet_accounts[wallet.pk] = ledger_account_for_wallet(wallet=wallet)
        return self._wallet_accounts[wallet.pk]

    def seller_account(self, seller_id: int) -> LedgerAccount:
        if seller_id not in self._seller_accounts:
            seller = Seller.objects.get(pk=seller_id)  # rare: a batch's accounts are created before it
            account = ledger_account_for_seller(seller=seller, currency=BASE_CURRENCY)
            self._seller_accounts[seller_id] = account
        return self._seller_accounts[seller_id]

    def system_account(self, kind: str, currency: str) -> LedgerAccount:
        if (kind, currency) not in self._system_accounts:
            self._system_accounts[kind, currency] = ledger_account_system(kind=kind, currency=currency)
        return self._system_accounts[kind, currency]

    def add(self, charge: _Charge) -> None:
        """Record a decided hour: the wallet pays it, the rental is paid through its end."""
        self.balances[charge.wallet_id] -= charge.amount
        charge.rental.paid_through = charge.row.period_end
        if charge.rental.delivered_at is not None:  # else it starts once its login is ready
            charge.rental.state = RentalState.RUNNING
        self.charged[charge.rental.pk, charge.row.period_start] = charge.row
        self.charges.append(charge)

    def mark(self) -> int:
        return len(self.charges)

    def undo(self, mark: int) -> None:
        while len(self.charges) > mark:
            charge = self.charges.pop()
            self.balances[charge.wallet_id] += charge.amount
            charge.rental.paid_through, charge.rental.state = charge.before
            del self.charged[charge.rental.pk, charge.row.period_start]

    def write(self) -> None:
        """Post every recorded hour, have the exchange mark the rentals paid, write the charge rows."""
        charges, self.charges = self.charges, []
        if not charges:
            return
        posted = ledger_post_many(postings=[charge.posting for charge in charges])
        rentals_mark_paid(hours=Counter(charge.rental.pk for charge in charges))
        for charge, ledger_transaction in zip(charges, posted, strict=True):
            charge.row.ledger_transaction = ledger_transaction
            charge.row.created_at = ledger_transaction.created_at
        _charge_rows_insert([charge.row for charge in charges])


_CHARGE_COLUMNS = ("rental_id", "period_start", "period_end", "ledger_transaction_id", "cost_usd", "amount",
                   "currency", "fx_rate_id", "seller_earnings_usd", "fee_usd", "created_at")


def _charge_rows_insert(rows: list[RentalCharge]) -> None:
    """The charge rows in one statement from plain lists (`rows_insert`), each instance then
    holding its id as `bulk_create` would leave it."""
    written = rows_insert(
        RentalCharge,
        columns={name: [getattr(row, name) for row in rows] for name in _CHARGE_COLUMNS},
        returning=("ledger_transaction_id", "id"),
    )
    ids = dict(written)
    for row in rows:
        row.pk = ids[row.ledger_transaction_id]
        row._state.adding, row._state.db = False, connection.alias


@dataclass(frozen=True)
class _Ending:
    """How a rental must end, decided by `_next_hour_charge` and carried out by its caller."""

    reason: str
    at: datetime
    status: str
    notify: bool  # email the buyer that the balance could not pay (in the same transaction)


def _now(now: datetime | None) -> datetime:
    """The one instant a charge or a run decides with: the caller's, or the clock's once."""
    if now is None:
        return timezone.now()
    if timezone.is_naive(now):
        raise ValueError(f"Charging needs an aware datetime, not the naive {now!r}.")
    return now


def _unpaid(*, rental: Rental, now: datetime) -> tuple[ChargeOutcome, _Ending]:
    """The wallet cannot pay the next hour: the rental ends at that boundary (at `now` for a first
    hour, which never began) and the buyer is told."""
    if rental.paid_through is None:
        ending = _Ending(
            reason=EndReason.PAYMENT_FAILED, at=now, status=ChargeStatus.PAYMENT_FAILED, notify=True
        )
    else:
        ending = _Ending(
            reason=EndReason.BALANCE_EXHAUSTED, at=rental.paid_through,
            status=ChargeStatus.BALANCE_EXHAUSTED, notify=True,
        )
    return ChargeOutcome(status=ending.status), ending


def _ending_apply(*, rental_id: int, ending: _Ending) -> None:
    """End the rental as decided (GPUs back to the book, matching for its model) and write the
    buyer's email in the same transaction. Takes the market lock: call it after every wallet is
    locked."""
    ended = rental_end(rental_id=rental_id, reason=ending.reason, at=ending.at)
    if ending.notify and ended.end_reason == ending.reason:
        _rental_unpaid_email(rental=ended)


def _rental_unpaid_email(*, rental: Rental) -> None:
    """Tell the buyer, in their language, that their rental ended because the balance could not pay
    its next hour (or, for a first hour, did not start), with a link to the top-up page."""
    email_send(
        template="billing/email/rental_unpaid", user=rental.buyer, key=f"rental-ended:{rental.pk}",
        context=lambda: {
            "number": rental.pk,
            "gpus": rental.gpus,
            "gpu": rental.gpu_model.name,
            "ended_at": formatting.datetime_long(rental.ended_at),
            "did_not_start": rental.end_reason == EndReason.PAYMENT_FAILED,
            "url": absolute_url(reverse("billing:top-up")),
        },
    )


def _next_hour_charge(
    *, books: _Books, rental_id: int, now: datetime
) -> tuple[ChargeOutcome, _Ending | None]:
    """The money rules, in one place. Against `books` (the caller's, which locked the rental and
    its buyer's wallet, and which record the charges decided before this one): charge the hour
    that starts where the rental is paid through (its start, the first time) if that hour has
    begun by `now`: the ledger transaction (wallet -> seller's earnings + platform's fee, through
    the FX accounts for a wallet not in USD), `paid_through` and the state moved by the exchange,
    and the `RentalCharge` row, all written when the caller writes the books.

    When the rental must end instead (every booked hour used; the wallet missing, too low, or
    without an exchange rate), nothing moves and the `_Ending` says how: the caller ends it.
    """
    rental = books.rental(rental_id)
    if rental.state == RentalState.ENDED:
        return ChargeOutcome(status=ChargeStatus.ENDED), None
    period_start = rental.paid_through or rental.started_at
    if period_start > now:
        # Checked before the booked hours: a rental whose last hour is still running keeps its GPUs
        # until that hour is over.
        return ChargeOutcome(status=ChargeStatus.NOT_DUE), None
    if rental.hours is not None and period_start >= rental.started_at + rental.hours * HOUR:
        ending = _Ending(
            reason=EndReason.HOURS_USED, at=period_start, status=ChargeStatus.HOURS_USED, notify=False
        )
        return ChargeOutcome(status=ending.status), ending

    existing = books.charged.get((rental.pk, period_start))
    if existing is not None:
        return ChargeOutcome(status=ChargeStatus.ALREADY_CHARGED, charge=existing), None

    wallet = books.wallets.get(rental.buyer_id)
    if wallet is None:
        return _unpaid(rental=rental, now=now)
    split = _split(price_usd=rental.price_usd, gpus=rental.gpus)
    try:
        conversion = fx_convert_from_usd(
            amount_usd=split.cost_usd, currency=wallet.currency, rates=books.rates
        )
    except RateMissing:
        logger.warning("No %s rate to charge rental %s: ending it.", wallet.currency, rental.pk)
        return _unpaid(rental=rental, now=now)
    if books.balances[wallet.pk] < conversion.amount:
        return _unpaid(rental=rental, now=now)
    fx_rate = books.rates.get(wallet.currency)
    period_end = period_start + HOUR
    posting = Posting(
        idempotency_key=_idempotency_key(rental_id=rental.pk, period_start=period_start),
        kind=LedgerTransaction.Kind.CHARGE,
        description=(
            f"Rental {rental.pk}: {rental.gpus} x {rental.gpu_model_name} at {rental.price_usd} USD, "
            f"hour from {period_start.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
        ),
        lines=_charge_lines(books=books, rental=rental, wallet=wallet, split=split, amount=conversion.amount),
        fx_rate=fx_rate,
    )
    charge = RentalCharge(
        rental=rental,
        period_start=period_start,
        period_end=period_end,
        cost_usd=split.cost_usd,
        amount=conversion.amount,
        currency=wallet.currency,
        fx_rate=fx_rate,
        seller_earnings_usd=split.seller_earnings_usd,
        fee_usd=split.fee_usd,
    )
    books.add(_Charge(
        posting=posting, row=charge, rental=rental, wallet_id=wallet.pk, amount=conversion.amount,
        before=(rental.paid_through, rental.state),
    ))
    return ChargeOutcome(status=ChargeStatus.CHARGED, charge=charge), None


@transaction.atomic
def rental_charge_next_hour(*, rental_id: int, now: datetime | None = None) -> ChargeOutcome:
    """Charge the hour of the rental that starts where it is paid through (its start, the first
    time), if that hour has begun by `now`. See `ChargeStatus` for the outcomes.

    One database transaction: the rental row is locked first, the hour is posted to the ledger
    (wallet -> seller's earnings + platform's fee), the rental is marked paid through the end of
    the hour and running, and the `RentalCharge` row is written. A wallet that cannot pay (none,
    too low, no exchange rate for its currency) ends the rental instead, moving nothing, and the
    buyer's email is written to the outbox in the same transaction; a rental whose booked hours
    are used ends without a charge.
    """
    now = _now(now)
    books = _Books(rental_ids=[rental_id])
    outcome, ending = _next_hour_charge(books=books, rental_id=rental_id, now=now)
    books.write()
    if ending is not None:
        _ending_apply(rental_id=rental_id, ending=ending)
    return outcome


# --- the charging run ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Due:
    """A claimed rental, with what orders its ending."""

    id: int
    buyer_id: int
    started_at: datetime
    gpu_model_id: int


def _due_order(*, now: datetime) -> list[int]:
    """The ids of the rentals due at `now`, read once per run, ordered by buyer, then oldest
    started first (then id): a buyer's rentals come together, and in the order they are charged.

    Read once and walked in batches, instead of asking the database for the next batch past a
    cursor: that query sorts every rental still due, so a run of n rentals sorted n²/batch rows
    (400,000 rentals took fifteen times as long as 100,000). The due index serves this one read."""
    due = rentals_due(now=now).order_by("buyer_id", "started_at", "id").values_list("id", flat=True)
    return list(due)


def _system_accounts_ensure() -> None:
    """Create the platform's FX and revenue accounts that do not exist yet, each committed at once,
    before any batch's transaction begins (see `_ledger_accounts_ensure`): once per run, for they
    are never deleted."""
    for currency in CURRENCIES:
        ledger_account_system(kind=LedgerAccount.Kind.FX, currency=currency)
    ledger_account_system(kind=LedgerAccount.Kind.PLATFORM_REVENUE, currency=BASE_CURRENCY)


def _ledger_accounts_ensure(*, rental_ids: list[int]) -> None:
    """Create the ledger accounts the next batch will post to and that do not exist yet (a new
    seller's earnings, a wallet never funded), each committed at once, before the batch's
    transaction begins. Created inside the batch, a new account's unique code would stay
    uncommitted until the batch ends, making any other batch that needs it wait, and two batches
    each creating one the other needs deadlock."""
    rentals = Rental.objects.filter(pk__in=rental_ids)
    earning = LedgerAccount.objects.filter(
        kind=LedgerAccount.Kind.SELLER_EARNINGS, currency=BASE_CURRENCY, seller=OuterRef("pk")
    )
    sellers = Seller.objects.filter(pk__in=rentals.values("server__seller_id")).filter(~Exists(earning))
    for seller in sellers.order_by("pk"):
        ledger_account_for_seller(seller=seller, currency=BASE_CURRENCY)
    wallets = Wallet.objects.filter(user_id__in=rentals.values("buyer_id"), ledger_account__isnull=True)
    for wallet in wallets.order_by("pk"):
        ledger_account_for_wallet(wallet=wallet)


def _batch_claim(*, now: datetime, rental_ids: list[int]) -> list[_Due]:
    """Lock and return those of `rental_ids` still due at `now`, in the order given (see
    `_due_order`). On PostgreSQL rows locked by another run are skipped (SKIP LOCKED): two runs at
    once share the work instead of queueing; SQLite serialises writers anyway. A rental another
    run charged meanwhile is no longer due and is left out."""
    due = rentals_due(now=now).filter(pk__in=rental_ids).order_by()
    if connection.features.has_select_for_update_skip_locked:
        due = due.select_for_update(skip_locked=True, of=("self",))
    place = {rental_id: position for position, rental_id in enumerate(rental_ids)}
    claimed = [_Due(*row) for row in due.values_list("id", "buyer_id", "started_at", "gpu_model_id")]
    return sorted(claimed, key=lambda due: place[due.id])


def _rental_catch_up(*, books: _Books, rental_id: int, now: datetime) -> tuple[list[str], _Ending | None]:
    """Charge the rental hour after hour, in order, until it is paid beyond `now` or must end."""
    statuses = []
    while True:
        outcome, ending = _next_hour_charge(books=books, rental_id=rental_id, now=now)
        if ending is not None:
            return statuses, ending
        statuses.append(outcome.status)
        if outcome.status != ChargeStatus.CHARGED or outcome.charge.period_end > now:
            return statuses, None


@contextmanager
def _own_books(due: _Due) -> Iterator[_Books]:
    """The books of one rental alone, written as soon as it is charged, in a savepoint of its own."""
    with transaction.atomic():
        books = _Books(rental_ids=[due.id])
        yield books
        books.write()


def _rentals_charge(
    *, batch: list[_Due], now: datetime, books_for: Callable[[_Due], AbstractContextManager[_Books]],
    counts: Counter, endings: list,
) -> None:
    """Charge each rental of the batch, a buyer's rentals oldest started first, each with its
    missed hours in order, against the books `books_for(due)` gives. A rental that fails is
    dropped alone (logged, counted under "errors", tried again next run)."""
    for due in batch:
        counts["rentals"] += 1
        try:
            with books_for(due) as books:
                mark = books.mark()
                try:
                    statuses, ending = _rental_catch_up(books=books, rental_id=due.id, now=now)
                except BaseException:
                    books.undo(mark)
                    raise
        except SoftTimeLimitExceeded:
            raise
        except Exception:
            logger.exception("Charging rental %s failed; the next run tries again.", due.id)
            counts["errors"] += 1
        else:
            counts.update(statuses)
            if ending is not None:
                endings.append((due, ending))


def _batch_charge(*, batch: list[_Due], now: datetime, counts: Counter) -> None:
    """Charge one claimed batch inside the caller's transaction.

    1. Lock the batch's wallets, ascending id (the rentals are already locked).
    2. Charge every rental against the books of the whole batch, then write them at once, in a
       savepoint (see the module's docstring). Should writing fail, charge the batch again rental
       by rental, each with books of its own written in a savepoint of its own: a rental that
       fails is rolled back alone and the others keep their charges. When a wallet cannot pay
       all its rentals, the most recently started ones are the ones that end.
    3. End the rentals that must end, by ascending GPU model id: `rental_end` takes the market
       lock of each model, always in the same order, so two batches never wait for each other.
    """
    buyer_ids = {due.buyer_id for due in batch}
    list(Wallet.objects.select_for_update().filter(user_id__in=buyer_ids).order_by("pk").values_list("pk"))
    found: Counter[str] = Counter()
    endings: list[tuple[_Due, _Ending]] = []
    try:
        with transaction.atomic():
            books = _Books(rental_ids=[due.id for due in batch])
            _rentals_charge(
                batch=batch, now=now, books_for=lambda _due: nullcontext(books), counts=found,
                endings=endings,
            )
            books.write()
    except SoftTimeLimitExceeded:
        raise
    except Exception:
        logger.exception("Writing a batch of charges at once failed; charging it rental by rental.")
        found, endings = Counter(), []
        _rentals_charge(batch=batch, now=now, books_for=_own_books, counts=found, endings=endings)
    counts.update(found)
    for due, ending in sorted(endings, key=lambda pair: (pair[0].gpu_model_id, pair[0].id)):
        try:
            with transaction.atomic():
                _ending_apply(rental_id=due.id, ending=ending)
        except SoftTimeLimitExceeded:
            raise
        except Exception:
            logger.exception("Ending rental %s failed; the next run tries again.", due.id)
            counts["errors"] += 1
        else:
            counts[ending.status] += 1


def rentals_charge_due(
    *, now: datetime | None = None, batch_size: int | None = None, limit: int | None = None
) -> dict[str, int]:
    """Charge every rental that is due at `now`: starting ones (first hour) and running ones paid
    up to `now`, in batches of `batch_size` (default `settings.RENTAL_CHARGE_BATCH_SIZE`), looking
    at `limit` rentals at most. The rentals due are read once, when the run begins (`_due_order`);
    one that falls due during the run is charged by the next.

    Each batch is claimed with SELECT ... FOR UPDATE SKIP LOCKED on PostgreSQL and committed as
    one database transaction (see `_batch_charge`). A run that stops midway (a killed worker, a
    time limit) loses only the batch it was in, which is rolled back whole; the next run charges
    it. Two runs at once (two beat processes, a task delivered twice) claim different rentals,
    and the idempotency key of each hour backs that up: each (rental, hour) is charged once.

    Returns counts: "rentals" looked at, and one count per `ChargeStatus` reached (hours charged
    under "charged"), plus "errors" for rentals that failed unexpectedly (logged, retried next run).
    """
    now = _now(now)
    batch_size = batch_size or settings.RENTAL_CHARGE_BATCH_SIZE
    if batch_size < 1:
        raise ValueError("The batch size is at least 1.")
    counts: Counter[str] = Counter()
    processed = 0
    _system_accounts_ensure()
    order = _due_order(now=now)
    position = 0
    while position < len(order) and (limit is None or processed < limit):
        size = batch_size if limit is None else min(batch_size, limit - processed)
        rental_ids = order[position:position + size]
        position += size
        _ledger_accounts_ensure(rental_ids=rental_ids)
        with transaction.atomic():
            batch = _batch_claim(now=now, rental_ids=rental_ids)
            if batch:
                _batch_charge(batch=batch, now=now, counts=counts)
        processed += len(batch)
    return {"rentals": 0, ChargeStatus.CHARGED: 0, "errors": 0, **counts}
