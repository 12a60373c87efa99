"""Reliability: the minutes each listed server was heard, counted once a minute, and the scores
computed from them and from the rentals delivered, exactly as the market rules publish them."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from exchange.models import EndReason, OfferState
from exchange.selectors import server_reliability_history
from exchange.services import availability_count, reliability_refresh, reliability_score
from sellers.models import AgentMonitor, Seller, Server, ServerAgent, ServerAvailabilityDay
from tests.factories import GpuModelFactory, OfferFactory, RentalFactory, SellerFactory, ServerFactory
from tests.threads import run_together

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 1, 10, 0, 30, tzinfo=UTC)
TODAY = NOW.date()


@pytest.fixture(autouse=True)
def _now(time_machine):
    time_machine.move_to(NOW, tick=False)


def agent(server: Server, *, heard_at=NOW, enrolled_at=None) -> ServerAgent:
    return ServerAgent.objects.create(
        server=server, enrolled_at=enrolled_at or heard_at - timedelta(days=20), last_heartbeat_at=heard_at,
        agent_version="1.0.0",
    )


def listed(*, heard_at=NOW, **server) -> Server:
    offer = OfferFactory(server=ServerFactory(**server))
    agent(offer.server, heard_at=heard_at)
    return offer.server


def minutes(server: Server) -> list[tuple]:
    return list(
        ServerAvailabilityDay.objects.filter(server=server).order_by("day")
        .values_list("day", "listed_minutes", "heard_minutes")
    )


# --- counting the minutes ----------------------------------------------------------------------


def test_each_listed_server_gets_a_listed_minute_and_a_heard_one_if_its_agent_reported_within_90_seconds():
    heard = listed(heard_at=NOW - timedelta(seconds=90))
    quiet = listed(heard_at=NOW - timedelta(seconds=91))

    assert availability_count(now=NOW) == 2

    assert minutes(heard) == [(TODAY, 1, 1)]
    assert minutes(quiet) == [(TODAY, 1, 0)]


def test_servers_out_of_the_book_are_not_counted():
    unverified = listed(agent_verified_at=None)
    pending = listed(status="pending")
    withdrawn = listed()
    withdrawn.offers.update(state=OfferState.WITHDRAWN)
    without_offer = ServerFactory()
    agent(without_offer)

    assert availability_count(now=NOW) == 0
    assert not ServerAvailabilityDay.objects.filter(
        server__in=[unverified, pending, withdrawn, without_offer]
    ).exists()


def test_a_minute_is_counted_once_whoever_counts_it_and_the_next_one_adds_to_the_day():
    server = listed()

    assert availability_count(now=NOW) == 1
    assert availability_count(now=NOW + timedelta(seconds=20)) == 0  # the same minute
    assert minutes(server) == [(TODAY, 1, 1)]
    assert availability_count(now=NOW + timedelta(minutes=1)) == 1
    assert minutes(server) == [(TODAY, 2, 2)]
    assert AgentMonitor.objects.get().counted_minute == datetime(2026, 12, 1, 10, 1, tzinfo=UTC)


def test_minutes_go_to_their_own_utc_day():
    evening = datetime(2026, 12, 1, 23, 59, 30, tzinfo=UTC)
    server = listed(heard_at=evening)

    availability_count(now=evening)
    ServerAgent.objects.filter(pk=server.pk).update(last_heartbeat_at=evening + timedelta(seconds=40))
    availability_count(now=evening + timedelta(seconds=40))

    assert minutes(server) == [(TODAY, 1, 1), (TODAY + timedelta(days=1), 1, 1)]


def test_counting_costs_the_same_few_statements_for_any_number_of_servers():
    def statements(servers: int, at: datetime) -> int:
        for _ in range(servers):
            listed(heard_at=at)
        with CaptureQueriesContext(connection) as queries:
            assert availability_count(now=at) == Server.objects.count()
        return len(queries)

    assert statements(2, NOW) == statements(30, NOW + timedelta(minutes=1)) <= 6


@pytest.mark.django_db(transaction=True)
def test_counters_at_the_same_moment_count_the_minute_once():
    server = listed()

    results, errors = run_together(4, lambda _: availability_count(now=NOW))

    assert errors == []
    assert sorted(results) == [0, 0, 0, 1]
    assert minutes(server) == [(TODAY, 1, 1)]


# --- the scores --------------------------------------------------------------------------------


def day(server: Server, days_ago: int, listed_minutes: int, heard_minutes: int) -> None:
    ServerAvailabilityDay.objects.create(
        server=server, day=TODAY - timedelta(days=days_ago), listed_minutes=listed_minutes,
        heard_minutes=heard_minutes,
    )


def rental(server: Server, *, days_ago: float = 1, **fields):
    started = NOW - timedelta(days=days_ago)
    fields.setdefault("state", "ended")
    if fields["state"] == "ended":
        fields.setdefault("ended_at", started + timedelta(hours=1))
        fields.setdefault("end_reason", EndReason.STOPPED_BY_BUYER)
    offer = server.offers.filter(state=OfferState.ACTIVE).first() or OfferFactory(server=server)
    return RentalFactory(offer=offer, started_at=started, **fields)


def test_the_rule_rounds_each_share_and_scores_from_the_exact_ones():
    assert reliability_score(listed=1440, heard=1430, delivered=3, undelivered=1) == (
        Decimal("0.745"), Decimal("0.993"), Decimal("0.750")
    )
    # 2/3 × 2/3 = 0.4444...; from the rounded shares it would have been 0.667 × 0.667 -> 0.445.
    # 1999/2000 = 0.9995 rounds half-up.
    assert reliability_score(listed=3, heard=2, delivered=2, undelivered=1).reliability == Decimal("0.444")
    assert reliability_score(listed=2000, heard=1999, delivered=0, undelivered=0) == (
        Decimal("1.000"), Decimal("1.000"), Decimal("1.000")
    )
    assert reliability_score(listed=0, heard=0, delivered=0, undelivered=5) == (
        Decimal("0.000"), Decimal("1.000"), Decimal("0.000")
    )


def test_a_servers_reliability_over_the_last_30_days_exactly():
    server = ServerFactory()
    agent(server, enrolled_at=NOW - timedelta(days=40))
    day(server, 0, 1000, 990)
    day(server, 29, 440, 440)  # the oldest day of the window
    day(server, 30, 1440, 0)  # before it: not counted
    for _ in range(3):
        rental(server)  # delivered
    rental(server, delivered_at=None, username="", end_reason=EndReason.NOT_DELIVERED)
    rental(server, delivered_at=None, username="", state="starting", days_ago=0.001)  # not due yet
    rental(server, delivered_at=None, username="", end_reason=EndReason.STOPPED_BY_BUYER)  # not counted
    rental(server, days_ago=31)  # before the window
    rental(server, days_ago=31, delivered_at=None, username="", end_reason=EndReason.NOT_DELIVERED)

    reliability_refresh(now=NOW)

    server.refresh_from_db()
    # uptime 1430/1440 = 0.99305..., delivery 3/4, reliability 0.74479... -> 0.745.
    assert (server.reliability_uptime, server.reliability_delivery, server.reliability) == (
        Decimal("0.993"), Decimal("0.750"), Decimal("0.745")
    )


def test_a_sellers_reliability_is_the_rule_over_all_its_servers():
    seller = SellerFactory()
    first = ServerFactory(seller=seller)
    agent(first, enrolled_at=NOW - timedelta(days=10))
    day(first, 1, 1440, 1430)
    rental(first)
    rental(first, delivered_at=None, username="", end_reason=EndReason.NOT_DELIVERED)
    second = ServerFactory(seller=seller)
    agent(second, enrolled_at=NOW - timedelta(days=8))
    day(second, 2, 100, 50)
    newcomer = ServerFactory(seller=seller)  # new: no score of its own, but its minutes count
    agent(newcomer, enrolled_at=NOW - timedelta(days=2))
    day(newcomer, 0, 60, 60)

    reliability_refresh(now=NOW)

    seller.refresh_from_db()
    # (1430 + 50 + 60) / (1440 + 100 + 60) = 1540/1600 = 0.9625; delivery 1/2: 0.48125 -> 0.481.
    assert seller.reliability == Decimal("0.481")
    second.refresh_from_db()
    assert (second.reliability_uptime, second.reliability_delivery, second.reliability) == (
        Decimal("0.500"), Decimal("1.000"), Decimal("0.500")
    )
    newcomer.refresh_from_db()
    assert newcomer.reliability is None


def test_a_server_is_new_for_its_first_7_days():
    young = ServerFactory(reliability=Decimal("0.900"), reliability_uptime=Decimal("0.900"),
                          reliability_delivery=Decimal("1.000"))
    agent(young, enrolled_at=NOW - timedelta(days=7) + timedelta(seconds=1))
    day(young, 0, 600, 600)
    of_age = ServerFactory()
    agent(of_age, enrolled_at=NOW - timedelta(days=7))
    never_heard = ServerFactory()
    lone_seller = young.seller

    reliability_refresh(now=NOW)

    young.refresh_from_db()
    assert (young.reliability, young.reliability_uptime, young.reliability_delivery) == (None, None, None)
    of_age.refresh_from_db()
    # Never listed and no rentals: nothing against it.
    assert (of_age.reliability, of_age.reliability_uptime, of_age.reliability_delivery) == (
        Decimal("1.000"), Decimal("1.000"), Decimal("1.000")
    )
    never_heard.refresh_from_db()
    assert never_heard.reliability is None
    assert Seller.objects.get(pk=lone_seller.pk).reliability is None


def test_refreshing_costs_the_same_queries_for_any_number_of_servers_and_writes_only_changes():
    # One GPU model: after the scores, each changed model's book runs a matching pass (the catalog
    # has a dozen models, whatever the number of servers).
    gpu = GpuModelFactory()

    def queries(servers: int) -> int:
        for _ in range(servers):
            server = ServerFactory(gpu_model=gpu)
            agent(server, enrolled_at=NOW - timedelta(days=9))
            day(server, 1, 100, 99)
            rental(server)
        with CaptureQueriesContext(connection) as captured:
            refreshed = reliability_refresh(now=NOW)
        assert refreshed.servers_changed == servers
        return len(captured)

    assert queries(2) == queries(20)
    again = reliability_refresh(now=NOW)
    assert (again.servers_changed, again.sellers_changed) == (0, 0)
    assert set(Server.objects.values_list("reliability", flat=True)) == {Decimal("0.990")}


def test_the_history_lists_the_last_30_days_newest_first_in_one_query(django_assert_num_queries):
    server = ServerFactory()
    day(server, 0, 600, 597)
    day(server, 3, 1440, 1440)
    day(server, 30, 1440, 0)

    with django_assert_num_queries(1):
        history = server_reliability_history(server=server)

    assert len(history) == 30
    assert (history[0].day, history[0].listed_minutes, history[0].heard_minutes, history[0].share) == (
        TODAY, 600, 597, Decimal("0.995")
    )
    assert (history[3].listed_minutes, history[3].share) == (1440, Decimal("1.000"))
    assert (history[1].listed_minutes, history[1].heard_minutes, history[1].share) == (0, 0, None)
    assert history[-1].day == TODAY - timedelta(days=29)


# --- the published rule ------------------------------------------------------------------------


@pytest.mark.parametrize(("language", "phrases"), [
    ("en", ["<h2>Reliability</h2>", "over the last 30 days:", "less than 7 days ago", "10 minutes after"]),
    ("pt", ["<h2>Fiabilidade</h2>", "os últimos 30 dias:", "há menos de 7 dias", "10 minutos após"]),
    ("fr", ["<h2>Fiabilité</h2>", "les 30 derniers jours\u00a0:", "moins de 7 jours", "10 minutes après"]),
])
def test_the_market_rules_publish_how_reliability_is_computed(client, language, phrases):
    html = client.get(f"/{language}/market-rules/").content.decode()
    for phrase in phrases:
        assert phrase.replace('"', "&quot;") in html
