"""How reliable a server (and its seller) has been: the minutes it was listed with its agent heard,
and the rentals it delivered. The rule, as the market rules page publishes it:

- uptime = minutes with heartbeats / minutes listed, over the last RELIABILITY_DAYS days (UTC, today
  included). A minute is listed while the server is active, verified by its agent and has an active
  offer; it is heard when the agent's last heartbeat is at most HEARD_WITHIN old. A server that was
  not listed at all in that time has an uptime of 1.
- delivery = rentals delivered / (rentals delivered + rentals ended "not delivered"), of the rentals
  that started in that time; a server without such rentals has a delivery of 1. Rentals still
  starting do not count yet, nor those that ended before their login was due for another reason
  (the buyer stopped it, the first hour could not be paid).
- reliability = uptime × delivery, each rounded half-up to three places (the score from the exact
  shares). No score ("new") while the server's agent first reported less than RELIABILITY_NEW_DAYS
  days ago. A seller's is the same over all its servers' minutes and rentals, "new" until its
  oldest server's history is that old.

`availability_count` counts one minute (billing's agents check calls it once a minute; a minute is
counted once, whoever calls); `reliability_refresh` recomputes every score (hourly). Both are
set-based: a constant number of statements whatever the number of servers.
"""

from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import NamedTuple

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Min, Q, Sum
from django.utils import timezone

from sellers.models import AgentMonitor, Seller, Server, ServerAgent, ServerAvailabilityDay, ServerStatus

from ..models import EndReason, Offer, OfferState, Rental
from .market import market_reliability_changed

# A listed minute counts as heard when the agent's last heartbeat (every 30 s) is this recent:
# three heartbeats, so that one lost on the way costs nothing.
HEARD_WITHIN = timedelta(seconds=90)
PLACES = Decimal("0.001")
ONE = Fraction(1)
UPDATE_BATCH = 1000
SCORE_FIELDS = ["reliability", "reliability_uptime", "reliability_delivery"]


def _minute_of(now: datetime) -> datetime:
    return now.astimezone(UTC).replace(second=0, microsecond=0)


def _listed_server_ids():
    """Servers in the book now: active, verified by their agent, with an active offer."""
    return Offer.objects.filter(
        state=OfferState.ACTIVE, server__status=ServerStatus.ACTIVE, server__agent_verified_at__isnull=False
    ).values("server_id")


@transaction.atomic
def availability_count(*, now: datetime) -> int:
    """Count the minute of `now` into today's `ServerAvailabilityDay` of every listed server: one
    listed minute, and one heard minute if its agent was heard within HEARD_WITHIN. A minute
    already counted (`AgentMonitor.counted_minute`) is not counted again: returns the number of
    servers counted, 0 then. Three statements, whatever the number of servers."""
    if timezone.is_naive(now):
        raise ValueError("Counting availability needs an aware datetime.")
    minute = _minute_of(now)
    AgentMonitor.objects.bulk_create([AgentMonitor(pk=AgentMonitor.SINGLETON_ID)], ignore_conflicts=True)
    # The claim: of two runs for one minute, the second waits for this row and then finds it counted.
    claimed = AgentMonitor.objects.filter(
        Q(counted_minute__isnull=True) | Q(counted_minute__lt=minute), pk=AgentMonitor.SINGLETON_ID
    ).update(counted_minute=minute)
    if not claimed:
        return 0
    listed_sql, listed_params = _listed_server_ids().query.sql_with_params()
    days, servers, agents = (
        ServerAvailabilityDay._meta.db_table, Server._meta.db_table, ServerAgent._meta.db_table
    )
    # One INSERT ... ON CONFLICT for every server (PostgreSQL and SQLite alike); `WHERE` before
    # `ON CONFLICT` is what SQLite needs to read the upsert of a SELECT.
    sql = f"""
        INSERT INTO {days} (server_id, day, listed_minutes, heard_minutes)
        SELECT s.id, %s, 1, CASE WHEN a.last_heartbeat_at >= %s THEN 1 ELSE 0 END
        FROM {servers} s LEFT JOIN {agents} a ON a.server_id = s.id
        WHERE s.id IN ({listed_sql})
        ON CONFLICT (server_id, day) DO UPDATE SET
            listed_minutes = {days}.listed_minutes + 1,
            heard_minutes = {days}.heard_minutes + excluded.heard_minutes
    """  # noqa: S608 (table names from the models, values as parameters)
    with connection.cursor() as cursor:
        cursor.execute(sql, [minute.date(), now - HEARD_WITHIN, *listed_params])
        return cursor.rowcount


@dataclass
class _Tally:
    """What one server (or seller) did over the window."""

    listed: int = 0
    heard: int = 0
    delivered: int = 0
    undelivered: int = 0
    history_since: datetime | None = None

    def add(self, other: "_Tally") -> None:
        self.listed += other.listed
        self.heard += other.heard
        self.delivered += other.delivered
        self.undelivered += other.undelivered
        if other.history_since is not None:
            self.history_since = min(filter(None, (self.history_since, other.history_since)))


class Score(NamedTuple):
    """A reliability and its two shares, each None for a "new" server or seller."""

    reliability: Decimal | None
    uptime: Decimal | None
    delivery: Decimal | None


NEW = Score(reliability=None, uptime=None, delivery=None)


def _rounded(share: Fraction) -> Decimal:
    return (Decimal(share.numerator) / Decimal(share.denominator)).quantize(PLACES, rounding=ROUND_HALF_UP)


def reliability_score(*, listed: int, heard: int, delivered: int, undelivered: int) -> Score:
    """The published rule (see the module's docstring) for a server or seller with history."""
    uptime = Fraction(heard, listed) if listed else ONE
    started = delivered + undelivered
    delivery = Fraction(delivered, started) if started else ONE
    return Score(
        reliability=_rounded(uptime * delivery), uptime=_rounded(uptime), delivery=_rounded(delivery)
    )


def _tallies(*, now: datetime) -> dict[int, _Tally]:
    """Every server's tally over the window, in three queries."""
    first_day = now.astimezone(UTC).date() - timedelta(days=settings.RELIABILITY_DAYS - 1)
    window_start = datetime.combine(first_day, time.min, tzinfo=UTC)
    tallies: dict[int, _Tally] = {}
    availability = ServerAvailabilityDay.objects.values("server_id").annotate(
        listed=Sum("listed_minutes", filter=Q(day__gte=first_day)),
        heard=Sum("heard_minutes", filter=Q(day__gte=first_day)),
        first=Min("day"),
    ).order_by()
    for row in availability:
        tallies[row["server_id"]] = _Tally(
            listed=row["listed"] or 0, heard=row["heard"] or 0,
            history_since=datetime.combine(row["first"], time.min, tzinfo=UTC),
        )
    # The agent's first heartbeat is when a server's history starts (the availability's first day
    # only stands in for a server whose agent row is gone).
    for server_id, enrolled_at in ServerAgent.objects.values_list("server_id", "enrolled_at"):
        tallies.setdefault(server_id, _Tally()).history_since = enrolled_at
    rentals = Rental.objects.filter(started_at__gte=window_start).values("server_id").annotate(
        delivered=Count("pk", filter=Q(delivered_at__isnull=False)),
        undelivered=Count("pk", filter=Q(delivered_at__isnull=True, end_reason=EndReason.NOT_DELIVERED)),
    ).order_by()
    for row in rentals:
        tally = tallies.setdefault(row["server_id"], _Tally())
        tally.delivered, tally.undelivered = row["delivered"], row["undelivered"]
    return tallies


def _score(tally: _Tally | None, *, now: datetime) -> Score:
    new_until = timedelta(days=settings.RELIABILITY_NEW_DAYS)
    if tally is None or tally.history_since is None or now - tally.history_since < new_until:
        return NEW
    return reliability_score(
        listed=tally.listed, heard=tally.heard, delivered=tally.delivered, undelivered=tally.undelivered
    )


@dataclass(frozen=True)
class ReliabilityRefreshed:
    servers_changed: int
    sellers_changed: int


def reliability_refresh(*, now: datetime | None = None) -> ReliabilityRefreshed:
    """Recompute the reliability of every server and seller at `now` and write those that changed
    (a constant number of reads, and one write per thousand changed rows); once committed, the
    books of the GPU models whose servers changed run a matching pass (a resting bid's minimum may
    now be met) and drop their cached pages (`market_reliability_changed`)."""
    now = now or timezone.now()
    if timezone.is_naive(now):
        raise ValueError("Reliability needs an aware datetime.")
    refreshed, gpu_model_ids = _scores_write(now=now)
    if gpu_model_ids:
        market_reliability_changed(gpu_model_ids=gpu_model_ids)
    return refreshed


@transaction.atomic
def _scores_write(*, now: datetime) -> tuple[ReliabilityRefreshed, set[int]]:
    tallies = _tallies(now=now)
    of_seller: dict[int, _Tally] = {}
    changed_servers = []
    for server in Server.objects.only("pk", "seller_id", "gpu_model_id", *SCORE_FIELDS):
        tally = tallies.get(server.pk)
        if tally is not None:
            of_seller.setdefault(server.seller_id, _Tally()).add(tally)
        score = _score(tally, now=now)
        if (server.reliability, server.reliability_uptime, server.reliability_delivery) != (
            score.reliability, score.uptime, score.delivery
        ):
            server.reliability, server.reliability_uptime, server.reliability_delivery = (
                score.reliability, score.uptime, score.delivery
            )
            changed_servers.append(server)
    Server.objects.bulk_update(changed_servers, SCORE_FIELDS, batch_size=UPDATE_BATCH)
    changed_sellers = []
    for seller in Seller.objects.only("pk", "reliability"):
        score = _score(of_seller.get(seller.pk), now=now)
        if seller.reliability != score.reliability:
            seller.reliability = score.reliability
            changed_sellers.append(seller)
    Seller.objects.bulk_update(changed_sellers, ["reliability"], batch_size=UPDATE_BATCH)
    refreshed = ReliabilityRefreshed(
        servers_changed=len(changed_servers), sellers_changed=len(changed_sellers)
    )
    return refreshed, {server.gpu_model_id for server in changed_servers}
