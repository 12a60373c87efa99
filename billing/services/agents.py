"""The exchange's watch over the host agents, once a minute (Celery beat, `agents_check`): servers
gone silent, GPUs gone bad, logins never delivered, each ended with its refund rule; and the
minute counted for the reliability scores.

- Grace. `AgentMonitor.up_since` is when the watch last started running without a gap (see
  `exchange.services.agent_monitor_tick`). Heartbeats cannot arrive while the exchange is down,
  so no server is judged silent before AGENT_UNREACHABLE_SECONDS have passed since then, and a
  login's delivery deadline counts from max(start, up_since): the exchange's own outage ends
  nobody's rental. Minutes inside the grace are not counted for reliability either.
- Unreachable. A server whose agent was last heard more than AGENT_UNREACHABLE_SECONDS ago (never
  heard: whose oldest live rental started that long ago), with live rentals or verified, is judged
  once: `server_failure_report` at the last heartbeat (its rentals end "server failure" with the
  unused minutes refunded, its offer is withdrawn, buyers emailed), then it is unverified, the
  event written and its seller's owners emailed. Its rentals whose login was never delivered end
  "not delivered" instead, with the whole first hour back: the buyer never had the machine.
- Failed GPUs. On a fresh report (heard within the threshold), a live rental holding a GPU that
  the report lacks, or shows with uncorrected ECC errors, ends alone as "server failure" with the
  same refund rule from that report's time (`rental_fail`), and the event is written.
- Isolation lost. A live rental sold with a stronger isolation level than its server now has
  (its agent's report fell), while another live rental shares the server, ends alone as
  "isolation lost" with the refund rule of a server failure from now (`rental_fail`); a rental
  alone on its server runs on, there is no one to keep it apart from.
- Not delivered. A starting rental whose login is not ready RENTAL_DELIVERY_SECONDS after its start
  ends "not delivered": every line of each hour charged is reversed exactly (a charge reversal in
  the ledger, under "rental:<id>:not-delivered-reversal"), so the buyer gets it all back, the
  seller earns nothing and the platform keeps no fee; the buyer is emailed. A rental never charged
  just ends. A rental its agent reported refused (this host cannot deliver it as sold: no port
  or loop device left, a limit or GPU lock the kernel refused) ends the same way at the next run,
  without waiting for the deadline, nor for the grace: the agent has spoken.

Each judgement is its own transaction, so a run stopped half-way has done whole judgements, and a
second run at once (two beats) does none twice: a server is claimed by a conditional update of its
agent's row, a rental by its row lock and state. Lock order: the agent's row (the claim), rental
rows, wallets, market lock, server rows. The quiet run (nothing to judge) is a handful of
queries whatever the number of servers; a judged server costs a bounded number of its own.
"""

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import OperationalError, transaction
from django.utils import timezone

from accounts.models import Wallet
from exchange.models import EndReason, Rental, RentalState
from exchange.selectors import (
    GpuFailure,
    SilentServer,
    rental_gpus_failed,
    rentals_delivery_refused,
    rentals_isolation_lost,
    rentals_undelivered,
    servers_gone_silent,
)
from exchange.services import (
    agent_monitor_tick,
    availability_count,
    level_is_lower,
    rental_end,
    rental_gpu_failed_record,
    server_unreachable_claim,
    server_unreachable_record,
)
from marketplace import formatting
from marketplace.emails import email_send

from ..exceptions import AlreadyReversed
from ..ledger import ledger_reverse
from ..models import RentalCharge
from .refunds import rental_fail, server_failure_report

logger = logging.getLogger(__name__)

LIVE = (RentalState.STARTING, RentalState.RUNNING)
ZERO = Decimal("0.00")


def not_delivered_reversal_key(*, rental_id: int) -> str:
    return f"rental:{rental_id}:not-delivered-reversal"


@dataclass(frozen=True)
class AgentsChecked:
    """What one run of the watch did."""

    up_since: datetime
    judged: bool  # False during the grace after an outage of the exchange
    unreachable_server_ids: list[int] = field(default_factory=list)
    gpu_failed_rental_ids: list[int] = field(default_factory=list)
    not_delivered_rental_ids: list[int] = field(default_factory=list)
    isolation_lost_rental_ids: list[int] = field(default_factory=list)
    refused_rental_ids: list[int] = field(default_factory=list)  # not delivered, as their agent said
    servers_counted: int = 0  # for availability; 0 when the minute had been counted


def agents_check(*, now: datetime | None = None) -> AgentsChecked:
    """One run of the watch at `now` (default: the clock); see the module's docstring."""
    now = now or timezone.now()
    if timezone.is_naive(now):
        raise ValueError("The agents check needs an aware datetime.")
    up_since = agent_monitor_tick(now=now)
    threshold = timedelta(seconds=settings.AGENT_UNREACHABLE_SECONDS)
    judged = now - up_since >= threshold
    unreachable = []
    if judged:
        unreachable = [
            silent.server_id for silent in servers_gone_silent(heard_before=now - threshold)
            if _judged(_server_unreachable, silent=silent, heard_before=now - threshold, now=now)
        ]
    gpu_failed = [
        failure.rental_id for failure in rental_gpus_failed(heard_since=now - threshold)
        if _judged(_rental_gpus_failed, failure=failure, now=now)
    ]
    isolation_lost = [
        rental_id for rental_id in rentals_isolation_lost()
        if _judged(_rental_isolation_lost, rental_id=rental_id, now=now)
    ]
    deadline = timedelta(seconds=settings.RENTAL_DELIVERY_SECONDS)
    not_delivered = []
    if now - up_since >= deadline:
        not_delivered = [
            rental_id for rental_id in rentals_undelivered(started_before=now - deadline)
            if _judged(rental_not_delivered_end, rental_id=rental_id, at=now)
        ]
    refused = [
        rental_id for rental_id in rentals_delivery_refused()
        if _judged(rental_not_delivered_end, rental_id=rental_id, at=now)
    ]
    counted = availability_count(now=now) if judged else 0
    if unreachable or gpu_failed or not_delivered or isolation_lost or refused:
        logger.warning(
            "Agents check at %s: servers unreachable %s, rentals with failed GPUs %s, not delivered %s, "
            "isolation lost %s, refused by their agent %s.",
            now.astimezone(UTC).isoformat(), unreachable, gpu_failed, not_delivered, isolation_lost, refused,
        )
    return AgentsChecked(
        up_since=up_since, judged=judged, unreachable_server_ids=unreachable,
        gpu_failed_rental_ids=gpu_failed, not_delivered_rental_ids=not_delivered,
        isolation_lost_rental_ids=isolation_lost, refused_rental_ids=refused, servers_counted=counted,
    )


def _judged(judge, **arguments) -> bool:
    """Run one judgement (its own transaction); a deadlock or a serialisation failure, which
    PostgreSQL resolves by rolling one transaction back, leaves it to the next run."""
    try:
        return bool(judge(**arguments))
    except OperationalError:
        logger.exception("Agents check: %s(%s) rolled back; the next run tries again.",
                         judge.__name__, arguments)
        return False


def _live_rentals_lock(*, server_id: int) -> list[Rental]:
    """The server's live rentals, locked in id order, then their buyers' wallets (the lock order)."""
    rentals = list(
        Rental.objects.select_for_update(of=("self",))
        .filter(server_id=server_id, state__in=LIVE)
        .order_by("pk")
    )
    list(Wallet.objects.select_for_update().filter(user_id__in={r.buyer_id for r in rentals}).order_by("pk"))
    return rentals


@transaction.atomic
def _server_unreachable(*, silent: SilentServer, heard_before: datetime, now: datetime) -> bool:
    """Judge one silent server (see the module's docstring); False when it was heard again or
    another run judged it first."""
    if silent.last_heard_at is not None and not server_unreachable_claim(
        server_id=silent.server_id, heard_before=heard_before, now=now
    ):
        return False
    rentals = _live_rentals_lock(server_id=silent.server_id)
    if silent.last_heard_at is None and not rentals:
        return False  # never heard, and its rentals ended meanwhile: nothing left to judge
    at = silent.last_heard_at or min(rental.started_at for rental in rentals)
    ended = [
        rental.pk for rental in rentals
        if rental.delivered_at is None
        and rental_not_delivered_end(rental_id=rental.pk, at=max(at, rental.started_at)) is not None
    ]
    failure = server_failure_report(server_id=silent.server_id, at=at)
    server_unreachable_record(
        server_id=silent.server_id, last_heard_at=silent.last_heard_at, now=now,
        ended_rental_ids=sorted([*ended, *failure.ended_rental_ids]),
    )
    return True


@transaction.atomic
def _rental_gpus_failed(*, failure: GpuFailure, now: datetime) -> bool:
    """End one rental whose GPUs failed (a login never delivered: "not delivered", the whole hour
    back) and write the event; False when it had ended meanwhile."""
    rental = (
        Rental.objects.select_for_update(of=("self",)).filter(pk=failure.rental_id, state__in=LIVE)
        .only("pk", "delivered_at", "started_at").first()
    )
    if rental is None:
        return False
    if rental.delivered_at is None:
        rental_not_delivered_end(rental_id=rental.pk, at=max(failure.reported_at, rental.started_at))
    else:
        gpus = ", ".join(f"{index} ({reason})" for index, reason in sorted(failure.reasons.items()))
        why = f"GPU {gpus} of server {failure.server_id} failed"
        rental_fail(rental_id=rental.pk, at=failure.reported_at, why=why)
    rental_gpu_failed_record(
        server_id=failure.server_id, rental_id=rental.pk, reasons=failure.reasons,
        reported_at=failure.reported_at, now=now,
    )
    return True


ISOLATION_LOST_EMAIL = "billing/email/rental_isolation_lost"


@transaction.atomic
def _rental_isolation_lost(*, rental_id: int, now: datetime) -> bool:
    """End one rental whose server could no longer keep it apart from the others sharing it (all
    those judged in one run end, even the last once the others have: each was exposed); False
    when it ended meanwhile or its server's level came back."""
    rental = (
        Rental.objects.select_for_update(of=("self",)).select_related("server")
        .filter(pk=rental_id, state__in=LIVE).first()
    )
    if rental is None or not level_is_lower(rental.server.isolation_level, than=rental.isolation_level):
        return False
    why = f"isolation of server {rental.server_id} lost: sold {rental.isolation_level}"
    rental_fail(rental_id=rental.pk, at=now, why=why, email_template=ISOLATION_LOST_EMAIL,
                reason=EndReason.ISOLATION_LOST)
    return True


@transaction.atomic
def rental_not_delivered_end(*, rental_id: int, at: datetime) -> Rental | None:
    """End a starting rental whose login was never delivered, as "not delivered" at `at`: each hour
    charged is reversed line by line (the buyer gets it all back in the currency paid, the seller's
    earnings and the platform's fee are taken back exactly), its GPUs go back to the book and the
    buyer is emailed. Returns None, changing nothing, when the rental was delivered or had ended."""
    rental = Rental.objects.select_for_update(of=("self",)).filter(pk=rental_id).first()
    if rental is None or rental.state != RentalState.STARTING or rental.delivered_at is not None:
        return None
    charges = list(
        RentalCharge.objects.filter(rental_id=rental.pk).select_related("ledger_transaction")
        .order_by("period_start")
    )
    # The wallet before the market lock that ending the rental takes (the lock order).
    Wallet.objects.select_for_update().filter(user_id=rental.buyer_id).first()
    back = ZERO
    currency = ""
    for number, charge in enumerate(charges):
        # Only the first hour is charged before delivery; a later one would get a key of its own.
        key = not_delivered_reversal_key(rental_id=rental.pk) + (f":{number + 1}" if number else "")
        try:
            ledger_reverse(
                transaction=charge.ledger_transaction, idempotency_key=key,
                description=f"Rental {rental.pk} not delivered: its charge from "
                            f"{charge.period_start.astimezone(UTC):%Y-%m-%d %H:%M} UTC reversed",
            )
        except AlreadyReversed:
            logger.warning("Rental %s: charge %s had been reversed already.", rental.pk, charge.pk)
            continue
        back += charge.amount
        currency = charge.currency
    ended = rental_end(rental_id=rental.pk, reason=EndReason.NOT_DELIVERED, at=at)
    _not_delivered_email(rental_id=ended.pk, amount=back, currency=currency)
    return ended


def _not_delivered_email(*, rental_id: int, amount: Decimal, currency: str) -> None:
    rental = Rental.objects.select_related("buyer__profile", "gpu_model").get(pk=rental_id)
    email_send(
        template="billing/email/rental_not_delivered", user=rental.buyer, key=f"rental-ended:{rental.pk}",
        context=lambda: {
            "number": rental.pk,
            "gpus": rental.gpus,
            "gpu": rental.gpu_model.name,
            "ended_at": formatting.datetime_long(rental.ended_at),
            "amount": formatting.money(amount, currency) if amount else "",
        },
    )
