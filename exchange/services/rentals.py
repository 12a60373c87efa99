"""The life of a rental, as billing drives it.

Lock order everywhere: rental row, then wallets (billing), then the market lock of the GPU model,
then server rows by id, then offers and bids. Keeping one order means no deadlocks.
"""

from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Case, F, Q, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from marketplace.sql import prepared_cursor
from sellers.models import SERVICE_TOKEN_PATH, Server

from ..exceptions import RentalEnded, RentalNotFound, ServiceTokenUnavailable
from ..matching import market_lock
from ..models import EndReason, Rental, RentalGpu, RentalState
from ..selectors import rental_takes_service_token
from .market import market_match_notify

HOUR = timedelta(hours=1)


def rental_mark_paid(*, rental_id: int, paid_through) -> Rental:
    """Billing charged an hour: the rental is paid up to `paid_through`, and runs if its login was
    delivered (else it stays starting until the agent reports it ready). Called inside billing's
    transaction, which holds the rental's row lock."""
    rental = Rental.objects.select_for_update().get(pk=rental_id)
    if rental.state == RentalState.ENDED:
        raise RentalEnded(_("This rental has ended."), code="rental_ended")
    rental.paid_through = paid_through
    if rental.delivered_at is not None:
        rental.state = RentalState.RUNNING
    rental.save(update_fields=["paid_through", "state"])
    return rental


def rentals_mark_paid(*, hours: dict[int, int], savepoint: bool = True) -> None:
    """Billing charged `hours[rental_id]` more hours of each of these rentals, in one transaction
    holding their row locks (the charging run's batches): each is paid that many hours further
    than it was (than its start, the first time) and runs if delivered. One statement per number of hours,
    whatever the number of rentals. Raises `RentalEnded` (nothing marked) when one of them has
    ended or does not exist. `savepoint=False`: in the caller's transaction alone, which then rolls
    back whole when this raises (a first hour, charged in the transaction that made the rental)."""
    by_count: dict[int, list[int]] = {}
    for rental_id, count in hours.items():
        by_count.setdefault(count, []).append(rental_id)
    marked = 0
    with transaction.atomic(savepoint=savepoint):
        for count, rental_ids in sorted(by_count.items()):
            marked += _rentals_paid_further(rental_ids=rental_ids, hours=count)
        if marked != len(hours):
            raise RentalEnded(_("This rental has ended."), code="rental_ended")


# `_rentals_paid_further` on PostgreSQL: one prepared statement, the same for any rentals and hours.
_PAID_FURTHER_POSTGRESQL = """
    UPDATE exchange_rental SET
        paid_through = coalesce(paid_through, started_at) + %s * interval '1 hour',
        state = CASE WHEN delivered_at IS NOT NULL THEN %s ELSE state END
    WHERE id = ANY(%s::bigint[]) AND state <> %s
"""


def _rentals_paid_further(*, rental_ids: list[int], hours: int) -> int:
    """Pay these rentals `hours` hours further (running if delivered); how many were not ended."""
    if connection.vendor == "postgresql":
        with prepared_cursor() as cursor:
            cursor.execute(
                _PAID_FURTHER_POSTGRESQL, [hours, RentalState.RUNNING, rental_ids, RentalState.ENDED]
            )
            return cursor.rowcount
    return Rental.objects.filter(pk__in=rental_ids).exclude(state=RentalState.ENDED).update(
        paid_through=Coalesce("paid_through", "started_at") + hours * HOUR,
        state=Case(When(delivered_at__isnull=False, then=Value(RentalState.RUNNING)), default=F("state")),
    )


@transaction.atomic
def rental_end(*, rental_id: int, reason: str, at=None) -> Rental:
    """End a rental (once), give its GPUs back to its server and match the freed GPUs against
    resting bids, in one transaction. Ending again changes nothing."""
    if reason not in EndReason.values:
        raise ValueError(f"Unknown end reason {reason!r}.")
    rental = Rental.objects.select_for_update().get(pk=rental_id)
    if rental.state == RentalState.ENDED:
        return rental
    market_lock(gpu_model_id=rental.gpu_model_id)
    rental.state = RentalState.ENDED
    rental.end_reason = reason
    rental.ended_at = at or timezone.now()
    rental.save(update_fields=["state", "end_reason", "ended_at"])
    Server.objects.filter(pk=rental.server_id).update(gpus_rented=F("gpus_rented") - rental.gpus)
    RentalGpu.objects.filter(rental_id=rental.pk, released_at__isnull=True).update(
        released_at=rental.ended_at
    )
    market_match_notify(gpu_model_id=rental.gpu_model_id)
    return rental


@transaction.atomic
def rental_stop(*, buyer, rental_id: int) -> Rental:
    """The buyer stops their own rental now: it ends STOPPED_BY_BUYER and its GPUs go back to the
    book at once (the hour already paid is not refunded). Raises `RentalNotFound` when the rental
    is unknown, someone else's or already ended."""
    owned = Rental.objects.filter(pk=rental_id, buyer=buyer).exclude(state=RentalState.ENDED).exists()
    if not owned:
        raise RentalNotFound(_("We could not find this rental."), code="rental_not_found")
    return rental_end(rental_id=rental_id, reason=EndReason.STOPPED_BY_BUYER)


def rental_service_token_reveal(*, buyer, rental_id: int, now: datetime | None = None) -> Rental:
    """The buyer's live container rental with its service token, marked shown: it is given once,
    and after that only the container has it (TOKEN_PATH of the agent). Raises `RentalNotFound`
    (unknown, someone else's, ended) and `ServiceTokenUnavailable` (its template takes no token,
    or it was shown already); nothing changes then."""
    now = now or timezone.now()
    with transaction.atomic():
        rental = (
            Rental.objects.select_for_update(of=("self",)).select_related("container_template")
            .filter(pk=rental_id, buyer=buyer).exclude(state=RentalState.ENDED).first()
        )
        if rental is None:
            raise RentalNotFound(_("We could not find this rental."), code="rental_not_found")
        if not rental_takes_service_token(rental):
            raise ServiceTokenUnavailable(
                _("This rental has no service token: only a container whose template asks for one "
                  "has it."), code="service_token_none"
            )
        if rental.service_token_shown_at is not None:
            raise ServiceTokenUnavailable(
                _("This rental's token was already shown. Sign in over SSH and read it in %(path)s.")
                % {"path": SERVICE_TOKEN_PATH}, code="service_token_shown",
            )
        rental.service_token_shown_at = now
        rental.save(update_fields=["service_token_shown_at"])
    return rental


def rentals_due(*, now: datetime):
    """Rentals billing must charge at `now`: unpaid starting ones (first hour) and running ones paid
    up to `now` or before, in id order. A paid rental still starting waits for its login: it is
    delivered (and runs) or ends "not delivered" well within its first hour."""
    return Rental.objects.filter(
        Q(state=RentalState.STARTING, paid_through__isnull=True)
        | Q(state=RentalState.RUNNING, paid_through__lte=now)
    ).order_by("id")


def rental_hours_used(rental: Rental, now: datetime) -> int:
    """Hours of the rental begun by `now` (a begun hour counts in full): 1 from its start, 2 one
    hour later...; for an ended rental, those begun before it ended; 0 before it starts."""
    until = min(now, rental.ended_at) if rental.ended_at else now
    if until < rental.started_at:
        return 0
    used = (until - rental.started_at) // HOUR + 1
    if rental.ended_at and until == rental.ended_at and (until - rental.started_at) % HOUR == timedelta(0):
        used -= 1  # ended exactly on an hour boundary: the next hour never began
    return max(used, 0)
