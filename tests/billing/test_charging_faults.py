"""The charging run under faults: duplicate deliveries, concurrent runs, a worker dying mid-batch,
wallets running dry at a boundary, and a clock crossing hour, day, month and year boundaries.

Every test here commits for real (each thread has its own connection), and after every one the
books are checked: each ledger transaction and the whole ledger sum to zero per currency, no
wallet is negative, each cached balance is its ledger balance, and each rental has exactly one
charge per hour it was paid for, contiguous from its start (never twice, never skipped).
"""

from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.db.models import Sum

from accounts.models import Wallet
from billing.ledger import ledger_account_for_wallet, ledger_account_system, ledger_post
from billing.models import LedgerEntry, LedgerTransaction, RentalCharge
from billing.services import ChargeStatus, charging, rental_charge_next_hour, rentals_charge_due
from billing.tasks import rentals_charge_due as charge_task
from exchange.models import EndReason, Rental, RentalState
from tests.billing.support import HOUR, START, assert_books_consistent, books, buyer_with, rental_for
from tests.factories import ExchangeRateFactory
from tests.threads import run_together

pytestmark = pytest.mark.django_db(transaction=True)


class WorkerKilled(BaseException):
    """What a worker's death looks like from inside: not an `Exception`, so nothing catches it."""


def assert_invariants() -> None:
    assert_books_consistent()
    totals = LedgerEntry.objects.values("currency").annotate(total=Sum("amount"))
    assert {row["currency"]: row["total"] for row in totals if row["total"] != 0} == {}
    assert not Wallet.objects.filter(balance__lt=0).exists()
    hours: dict[int, list[datetime]] = defaultdict(list)
    for rental_id, period_start in RentalCharge.objects.order_by("rental_id", "period_start").values_list(
        "rental_id", "period_start"
    ):
        hours[rental_id].append(period_start)
    for rental in Rental.objects.all():
        charged = hours.get(rental.pk, [])
        assert charged == [rental.started_at + n * HOUR for n in range(len(charged))], rental.pk
        assert rental.paid_through == (rental.started_at + len(charged) * HOUR if charged else None)
        if rental.state == RentalState.RUNNING:
            assert charged, f"rental {rental.pk} runs unpaid"
        if rental.state == RentalState.STARTING:
            assert not charged, f"rental {rental.pk} is charged but not running"


@pytest.fixture(autouse=True)
def _setup(time_machine):
    time_machine.move_to(START + timedelta(minutes=1), tick=False)
    ExchangeRateFactory(currency="EUR", rate=Decimal("0.92000000"), valid_from=START - 400 * 24 * HOUR)
    ExchangeRateFactory(currency="GBP", rate=Decimal("0.79000000"), valid_from=START - 400 * 24 * HOUR)
    yield
    assert_invariants()


def deliver(_index: int = 0) -> dict:
    """One delivery of the beat's "charge due rentals" message, run as a worker would run it."""
    result = charge_task.apply()
    assert result.successful(), result.traceback
    return result.result


def charges_per_rental() -> Counter:
    return Counter(RentalCharge.objects.values_list("rental_id", flat=True))


def a_book_of_rentals() -> dict:
    """Twelve rentals of five buyers in three currencies, some missing hours, one buyer short."""
    eur, usd, gbp = buyer_with("EUR", "200.00"), buyer_with("USD", "200.00"), buyer_with("GBP", "200.00")
    short = buyer_with("EUR", "6.00")  # two hours at 2.65, not three
    broke = buyer_with("USD", "1.00")
    rentals = [rental_for(buyer) for buyer in (eur, usd, gbp, eur, usd, gbp, eur)]
    rentals.append(rental_for(broke))
    late = rental_for(usd, gpus=2, started_at=START - 2 * HOUR)
    rental_charge_next_hour(rental_id=late.pk, now=START - 2 * HOUR)  # then missed two hours
    rentals.append(late)
    booked = rental_for(gbp, hours=2)
    rentals.append(booked)
    rentals += [rental_for(short, started_at=START + timedelta(minutes=m)) for m in (0, 5)]
    return {"rentals": rentals, "late": late, "booked": booked, "broke": broke, "short": short}


# --- duplicate delivery and concurrent runs --------------------------------------------------------


def test_the_same_charge_task_delivered_three_times_charges_each_hour_once(time_machine):
    book = a_book_of_rentals()
    time_machine.move_to(START + 2 * HOUR + timedelta(minutes=30), tick=False)

    first = deliver()
    again = [deliver() for _ in range(2)]

    assert first["errors"] == 0 and first["charged"] > 0
    assert again == [{"rentals": 0, "charged": 0, "errors": 0}] * 2
    charged = charges_per_rental()
    assert charged[book["late"].pk] == 5  # its first hour, the two it missed and the two since now
    assert charged[book["booked"].pk] == 2
    assert book["rentals"][7].pk not in charged  # the broke buyer's
    assert sum(charged.values()) == first["charged"] + 1


def test_three_deliveries_of_the_charge_task_at_the_same_moment_charge_each_hour_once(time_machine):
    book = a_book_of_rentals()
    time_machine.move_to(START + 2 * HOUR + timedelta(minutes=30), tick=False)

    results, errors = run_together(3, deliver)

    assert errors == []
    assert sum(result["errors"] for result in results) == 0
    assert sum(result["charged"] for result in results) == RentalCharge.objects.count() - 1
    assert charges_per_rental()[book["late"].pk] == 5
    assert LedgerTransaction.objects.filter(kind="charge").count() == RentalCharge.objects.count()


@pytest.mark.parametrize("batch_size", [1, 3, 1000])
def test_two_charging_runs_from_threads_charge_every_rental_hour_once(batch_size):
    book = a_book_of_rentals()
    before = RentalCharge.objects.count()
    now = START + 3 * HOUR + timedelta(minutes=10)

    results, errors = run_together(2, lambda _: rentals_charge_due(now=now, batch_size=batch_size))

    assert errors == []
    assert sum(result["errors"] for result in results) == 0
    assert sum(result["charged"] for result in results) == RentalCharge.objects.count() - before
    charged = charges_per_rental()
    assert charged[book["late"].pk] == 6
    assert charged[book["booked"].pk] == 2
    ends = dict(Rental.objects.filter(state=RentalState.ENDED).values_list("pk", "end_reason"))
    assert ends[book["booked"].pk] == EndReason.HOURS_USED
    assert ends[book["rentals"][7].pk] == EndReason.PAYMENT_FAILED  # the broke buyer's
    for rental in Rental.objects.exclude(state=RentalState.ENDED):
        assert rental.paid_through > now


def test_two_beat_processes_sending_the_same_schedule_every_minute_charge_once(time_machine):
    """Two beats each send "charge due rentals" every minute; the clock runs three hours."""
    buyers = [buyer_with(currency, "100.00") for currency in ("EUR", "USD", "GBP")]
    rentals = [
        rental_for(buyer, started_at=START + timedelta(minutes=minute))
        for buyer in buyers for minute in (0, 7, 31)
    ]
    minute = START
    end = START + 3 * HOUR
    while minute < end:
        time_machine.move_to(minute, tick=False)
        _results, errors = run_together(2, deliver)
        assert errors == []
        minute += timedelta(minutes=6)

    charged = charges_per_rental()
    for rental in rentals:
        # charged at every boundary from its start up to the last tick (2:54 after START)
        expected = len([n for n in range(4) if rental.started_at + n * HOUR <= end - timedelta(minutes=6)])
        assert charged[rental.pk] == expected, rental.started_at


# --- a worker dying mid-batch ----------------------------------------------------------------------


def test_a_worker_dying_mid_batch_leaves_that_batch_unapplied_and_the_rerun_finishes_it(monkeypatch):
    buyer = buyer_with("USD", "100.00")
    rentals = [rental_for(buyer, started_at=START + timedelta(seconds=n)) for n in range(7)]
    unpaid = rental_for(buyer_with("EUR", "1.00"))  # must end, in a batch the crash leaves unapplied
    before_crash = books()
    real = charging._next_hour_charge
    seen: list[int] = []

    def dies_at_the_sixth_rental(**kwargs):
        if kwargs["rental_id"] not in seen:
            seen.append(kwargs["rental_id"])
        if len(seen) == 6:
            raise WorkerKilled  # the second batch has charged two rentals, not yet written
        return real(**kwargs)

    monkeypatch.setattr(charging, "_next_hour_charge", dies_at_the_sixth_rental)
    with pytest.raises(WorkerKilled):
        rentals_charge_due(now=START + timedelta(minutes=1), batch_size=3)
    monkeypatch.undo()

    # The first batch (three rentals, oldest first) committed; the second was rolled back whole.
    assert set(charges_per_rental()) == {rental.pk for rental in rentals[:3]}
    assert books()[0] == before_crash[0] + 3
    for rental in rentals[3:] + [unpaid]:
        rental.refresh_from_db()
        assert (rental.state, rental.paid_through) == (RentalState.STARTING, None)
    assert_invariants()

    counts = rentals_charge_due(now=START + timedelta(minutes=1), batch_size=3)

    assert counts == {"rentals": 5, "charged": 4, "errors": 0, "payment failed": 1}
    assert charges_per_rental() == {rental.pk: 1 for rental in rentals}
    unpaid.refresh_from_db()
    assert unpaid.end_reason == EndReason.PAYMENT_FAILED
    assert len(mail.outbox) == 1  # one email, from the rerun: the crashed batch queued nothing


def test_a_worker_killed_between_posting_an_hour_and_marking_it_paid_applies_nothing(monkeypatch):
    buyer = buyer_with("EUR", "100.00")
    rentals = [rental_for(buyer, started_at=START + timedelta(seconds=n)) for n in range(4)]
    before = books()
    real_mark_paid = charging.rentals_mark_paid

    def dies(**kwargs):
        assert kwargs["hours"] == {rental.pk: 1 for rental in rentals}
        raise WorkerKilled  # the ledger transactions of these hours are already written

    monkeypatch.setattr(charging, "rentals_mark_paid", dies)
    with pytest.raises(WorkerKilled):
        rentals_charge_due(now=START + timedelta(minutes=1))

    assert books() == before  # one batch, rolled back whole: not even the hours posted before
    assert_invariants()

    monkeypatch.setattr(charging, "rentals_mark_paid", real_mark_paid)
    assert rentals_charge_due(now=START + timedelta(minutes=1))["charged"] == 4
    assert charges_per_rental() == {rental.pk: 1 for rental in rentals}


def test_a_worker_killed_while_ending_a_rental_rolls_back_its_batch(monkeypatch):
    paying = rental_for(buyer_with("USD", "100.00"))
    unpaid = rental_for(buyer_with("USD", "1.00"))
    before = books()

    def killed(**kwargs):
        raise WorkerKilled

    monkeypatch.setattr(charging, "rental_end", killed)
    with pytest.raises(WorkerKilled):
        rentals_charge_due(now=START)
    assert books() == before
    monkeypatch.undo()

    counts = rentals_charge_due(now=START)
    assert (counts["charged"], counts["payment failed"]) == (1, 1)
    assert charges_per_rental() == {paying.pk: 1}
    unpaid.refresh_from_db()
    assert unpaid.state == RentalState.ENDED


def test_a_rental_that_fails_is_rolled_back_alone_and_retried_next_run(monkeypatch):
    buyer = buyer_with("USD", "100.00")
    first, broken, last = (rental_for(buyer, started_at=START + timedelta(seconds=n)) for n in range(3))
    real = charging._next_hour_charge

    def fails_for_one(*, books, rental_id, now):
        outcome = real(books=books, rental_id=rental_id, now=now)
        if rental_id == broken.pk:
            raise RuntimeError("unexpected")  # after its hour was posted: its savepoint undoes it
        return outcome

    monkeypatch.setattr(charging, "_next_hour_charge", fails_for_one)
    counts = rentals_charge_due(now=START + timedelta(minutes=1))
    assert counts == {"rentals": 3, "charged": 2, "errors": 1}
    assert charges_per_rental() == {first.pk: 1, last.pk: 1}
    assert_invariants()

    monkeypatch.undo()
    assert rentals_charge_due(now=START + timedelta(minutes=1)) == {"rentals": 1, "charged": 1, "errors": 0}


def test_a_batch_that_cannot_be_written_at_once_is_charged_rental_by_rental(monkeypatch):
    buyer = buyer_with("USD", "100.00")
    first, broken, last = (rental_for(buyer, started_at=START + timedelta(seconds=n)) for n in range(3))
    real = charging.ledger_post_many

    def refuses_the_broken_one(*, postings):
        if any(posting.idempotency_key.startswith(f"rental:{broken.pk}:") for posting in postings):
            raise RuntimeError("unexpected")
        return real(postings=postings)

    monkeypatch.setattr(charging, "ledger_post_many", refuses_the_broken_one)
    counts = rentals_charge_due(now=START + timedelta(minutes=1))

    # The batch could not be written at once; rental by rental, only the broken one failed.
    assert counts == {"rentals": 3, "charged": 2, "errors": 1}
    assert charges_per_rental() == {first.pk: 1, last.pk: 1}
    assert_invariants()

    monkeypatch.undo()
    assert rentals_charge_due(now=START + timedelta(minutes=1)) == {"rentals": 1, "charged": 1, "errors": 0}


# --- wallets running dry ---------------------------------------------------------------------------


def test_a_wallet_running_out_exactly_at_the_boundary():
    buyer = buyer_with("EUR", "5.30")  # exactly two hours at 2.65
    rental = rental_for(buyer)

    assert rentals_charge_due(now=START)["charged"] == 1
    assert rentals_charge_due(now=START + HOUR)["charged"] == 1
    buyer.wallet.refresh_from_db()
    assert buyer.wallet.balance == Decimal("0.00")
    # One microsecond before the boundary the paid hour still runs.
    assert rentals_charge_due(now=START + 2 * HOUR - timedelta(microseconds=1))["rentals"] == 0
    rental.refresh_from_db()
    assert rental.state == RentalState.RUNNING

    counts = rentals_charge_due(now=START + 2 * HOUR)  # the email goes after commit

    assert counts == {"rentals": 1, "charged": 0, "errors": 0, "balance exhausted": 1}
    rental.refresh_from_db()
    assert (rental.state, rental.end_reason, rental.ended_at, rental.paid_through) == (
        RentalState.ENDED, EndReason.BALANCE_EXHAUSTED, START + 2 * HOUR, START + 2 * HOUR
    )
    assert [email.to for email in mail.outbox] == [[buyer.email]]
    assert rentals_charge_due(now=START + 3 * HOUR)["rentals"] == 0


@pytest.mark.parametrize("batch_size", [1, 2, 1000])
def test_a_wallet_that_pays_two_of_three_rentals_ends_the_most_recently_started(batch_size):
    buyer = buyer_with("USD", "100.00")
    # Created newest first, so that ids do not give the order away.
    newest = rental_for(buyer, started_at=START - 2 * HOUR + timedelta(minutes=20))
    middle = rental_for(buyer, started_at=START - 2 * HOUR + timedelta(minutes=10))
    oldest = rental_for(buyer, started_at=START - 2 * HOUR)
    for rental in (oldest, middle, newest):
        for hour in range(2):
            rental_charge_next_hour(rental_id=rental.pk, now=rental.started_at + hour * HOUR)
    wallet = Wallet.objects.get(user=buyer)
    # Leave exactly two hours at 2.88 in the wallet, through the ledger.
    ledger_post(
        idempotency_key="drain", kind="adjustment", description="test",
        lines=[
            (ledger_account_for_wallet(wallet=wallet), -(wallet.balance - Decimal("5.76"))),
            (ledger_account_system(kind="adjustments", currency="USD"), wallet.balance - Decimal("5.76")),
        ],
    )

    counts = rentals_charge_due(now=START + timedelta(minutes=30), batch_size=batch_size)

    assert (counts["charged"], counts["balance exhausted"]) == (2, 1)
    for rental in (oldest, middle, newest):
        rental.refresh_from_db()
    assert (oldest.state, middle.state) == (RentalState.RUNNING, RentalState.RUNNING)
    assert (newest.state, newest.end_reason, newest.ended_at) == (
        RentalState.ENDED, EndReason.BALANCE_EXHAUSTED, newest.paid_through
    )
    assert newest.paid_through == START + timedelta(minutes=20)
    wallet.refresh_from_db()
    assert wallet.balance == Decimal("0.00")


def test_equal_start_times_go_by_rental_id():
    buyer = buyer_with("USD", "5.76")
    first, second, third = (rental_for(buyer) for _ in range(3))

    rentals_charge_due(now=START)

    assert charges_per_rental() == {first.pk: 1, second.pk: 1}
    third.refresh_from_db()
    assert third.end_reason == EndReason.PAYMENT_FAILED


# --- the clock -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "started_at",
    [
        datetime(2027, 1, 31, 22, 30, tzinfo=UTC),  # into February
        datetime(2026, 12, 31, 22, 45, tzinfo=UTC),  # into the next year
        datetime(2027, 2, 28, 23, 10, tzinfo=UTC),  # out of a short month
    ],
)
def test_charging_by_the_clock_across_hour_day_month_and_year_boundaries(time_machine, started_at):
    buyer = buyer_with("GBP", "100.00")
    rental = rental_for(buyer, started_at=started_at)
    tick = started_at - timedelta(minutes=1)
    while tick < started_at + 4 * HOUR:
        time_machine.move_to(tick, tick=False)
        rentals_charge_due()  # no `now`: the clock decides, once per run
        tick += timedelta(minutes=13)

    charges = list(RentalCharge.objects.filter(rental=rental).order_by("period_start"))
    assert [charge.period_start for charge in charges] == [started_at + n * HOUR for n in range(4)]
    assert {charge.amount for charge in charges} == {Decimal("2.28")}
    keys = [charge.ledger_transaction.idempotency_key for charge in charges]
    assert keys[2] == f"rental:{rental.pk}:hour:{started_at + 2 * HOUR:%Y-%m-%dT%H:%M:%SZ}"
    assert charges[2].period_start.month != started_at.month or charges[2].period_start.day != started_at.day
    buyer.wallet.refresh_from_db()
    assert buyer.wallet.balance == Decimal("100.00") - 4 * Decimal("2.28")


def test_a_local_time_zone_with_a_summer_time_change_changes_nothing(settings, time_machine):
    settings.TIME_ZONE = "Europe/Lisbon"  # clocks go forward at 01:00 UTC on 28 March 2027
    started_at = datetime(2027, 3, 27, 23, 30, tzinfo=UTC)
    rental = rental_for(buyer_with("USD", "100.00"), started_at=started_at)
    for minutes in range(0, 4 * 60, 20):
        time_machine.move_to(started_at + timedelta(minutes=minutes), tick=False)
        rentals_charge_due()

    starts = list(RentalCharge.objects.filter(rental=rental).values_list("period_start", flat=True))
    assert starts == [started_at + n * HOUR for n in range(4)]


def test_a_naive_now_is_refused():
    rental = rental_for(buyer_with("USD", "100.00"))
    before = books()

    with pytest.raises(ValueError, match="aware"):
        rentals_charge_due(now=datetime(2026, 12, 1, 10, 30))
    with pytest.raises(ValueError, match="aware"):
        rental_charge_next_hour(rental_id=rental.pk, now=datetime(2026, 12, 1, 10, 30))
    assert books() == before


def test_one_run_decides_every_rental_with_one_instant(monkeypatch, time_machine):
    """The clock is read once per run: a run that takes long does not charge an hour that began
    while it was running."""
    buyer = buyer_with("USD", "100.00")
    rentals = [rental_for(buyer, started_at=START + timedelta(minutes=59, seconds=59 - n)) for n in range(3)]
    for rental in rentals:
        rental_charge_next_hour(rental_id=rental.pk, now=rental.started_at)
    time_machine.move_to(START + HOUR + timedelta(minutes=59, seconds=58), tick=False)
    real = charging._next_hour_charge

    def slow(**kwargs):
        time_machine.shift(timedelta(seconds=1))  # each rental takes a second of the clock
        return real(**kwargs)

    monkeypatch.setattr(charging, "_next_hour_charge", slow)
    counts = rentals_charge_due(batch_size=1)

    # Due at the run's instant (:59:58): the rentals paid through :59:57 and :59:58, not :59:59,
    # although the clock has passed :59:59 by the time the run claims its third batch.
    assert (counts["rentals"], counts[ChargeStatus.CHARGED]) == (2, 2)
    assert charges_per_rental() == {rentals[0].pk: 1, rentals[1].pk: 2, rentals[2].pk: 2}
