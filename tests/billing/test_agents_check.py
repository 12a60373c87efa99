"""The exchange's watch over the host agents: a silent server's rentals end with the refund of
their unused minutes, a failed GPU ends the rental holding it, a login never delivered gives the
whole first hour back; once each, and never for an outage of the exchange itself."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.models import LedgerTransaction
from billing.services import agents_check, ledger_reconcile, rental_charge_next_hour
from exchange.models import EndReason, Offer, OfferState, Rental, RentalState
from exchange.services import rental_login_probe
from marketplace.models import OutboxEmail
from sellers.models import AgentMonitor, Server, ServerAgent, ServerEvent, ServerEventKind
from tests.billing.support import (
    START,
    assert_books_consistent,
    balance,
    books,
    buyer_with,
    charged_rental,
    member,
    rental_for,
)
from tests.exchange.agents_support import closed_port
from tests.factories import ExchangeRateFactory, OfferFactory, ProfileFactory, RentalFactory, ServerFactory
from tests.threads import run_together

pytestmark = pytest.mark.django_db

NOW = START + timedelta(minutes=30)
THRESHOLD = timedelta(seconds=180)
# 20 minutes and 30 seconds into the first hour: 39 whole minutes of it are unused.
LAST_HEARD = START + timedelta(minutes=20, seconds=30)


@pytest.fixture(autouse=True)
def _setup(time_machine):
    time_machine.move_to(NOW, tick=False)
    ExchangeRateFactory(currency="EUR", rate=Decimal("0.92000000"))
    yield
    assert_books_consistent()


def watch_running(*, now=NOW, since=START - timedelta(days=1)) -> AgentMonitor:
    """The watch has run every minute until a minute before `now`, since `since`."""
    return AgentMonitor.objects.create(last_run_at=now - timedelta(minutes=1), up_since=since)


def gpus_seen(count: int, **by_index) -> list[dict]:
    gpus = [
        {"index": index, "uuid": f"GPU-{index}", "name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559,
         "temperature_c": 34, "utilization_percent": 0, "ecc_uncorrected": 0}
        for index in range(count)
    ]
    for key, fields in by_index.items():
        gpus[int(key.removeprefix("gpu"))].update(fields)
    return gpus


def agent(server: Server, *, heard_at, gpus=None) -> ServerAgent:
    return ServerAgent.objects.create(
        server=server, enrolled_at=heard_at - timedelta(days=20), last_heartbeat_at=heard_at,
        agent_version="1.0.0", gpus=gpus_seen(server.gpu_count) if gpus is None else gpus,
    )


def outbox_keys() -> list[str]:
    return sorted(OutboxEmail.objects.values_list("key", flat=True))


def test_a_silent_servers_rentals_end_with_the_unused_minutes_refunded_and_the_books_reconcile():
    watch_running()
    rental = charged_rental("USD")  # 2.88 charged: 2.59 to the seller, 0.29 fee
    server = rental.server
    owner = member(server.seller)
    agent(server, heard_at=LAST_HEARD)
    seller_code = f"seller_earnings:{server.seller_id}:USD"

    checked = agents_check(now=NOW)

    assert checked.judged and checked.unreachable_server_ids == [server.pk]
    rental.refresh_from_db()
    assert (rental.state, rental.end_reason, rental.ended_at) == (
        RentalState.ENDED, EndReason.SERVER_FAILURE, LAST_HEARD
    )
    refund = LedgerTransaction.objects.get(idempotency_key=f"rental:{rental.pk}:server-failure-refund")
    assert refund.kind == LedgerTransaction.Kind.REFUND
    rental.buyer.wallet.refresh_from_db()
    assert rental.buyer.wallet.balance == Decimal("98.99")  # 100 - 2.88 + 39/60 of it, 1.87
    assert balance(seller_code) == Decimal("0.91")  # 2.59 - 1.68
    assert balance("platform_revenue:USD") == Decimal("0.10")  # 0.29 - 0.19
    server.refresh_from_db()
    assert server.agent_verified_at is None and server.gpus_rented == 0
    assert Offer.objects.get(pk=rental.offer_id).state == OfferState.WITHDRAWN
    assert ServerAgent.objects.get(pk=server.pk).unreachable_since == NOW
    [event] = ServerEvent.objects.filter(server=server)
    assert event.kind == ServerEventKind.UNREACHABLE and event.at == NOW
    assert event.detail == {"last_heard_at": LAST_HEARD.isoformat(), "ended_rental_ids": [rental.pk]}
    assert outbox_keys() == sorted(
        [f"rental-ended:{rental.pk}", f"server-unreachable:{server.pk}:{event.pk}:{owner.pk}"]
    )
    seller_email = OutboxEmail.objects.get(recipient=owner.email)
    assert seller_email.subject == f"Your server {server.name} is unreachable"
    assert "1 rental on it ended" in seller_email.body
    assert ledger_reconcile(now=NOW).ok

    # The next run (and the next) finds nothing left to judge.
    before = (books(), outbox_keys(), ServerEvent.objects.count())
    again = agents_check(now=NOW + timedelta(minutes=1))
    assert again.unreachable_server_ids == [] and again.gpu_failed_rental_ids == []
    assert (books(), outbox_keys(), ServerEvent.objects.count()) == before


def test_a_server_heard_within_the_threshold_is_untouched():
    watch_running()
    rental = charged_rental("USD")
    agent(rental.server, heard_at=NOW - THRESHOLD + timedelta(seconds=1))
    before = books()

    checked = agents_check(now=NOW)

    assert checked.unreachable_server_ids == []
    rental.refresh_from_db()
    assert rental.state == RentalState.RUNNING
    assert books() == before and not ServerEvent.objects.exists()


def test_a_silent_server_without_rentals_is_withdrawn_unverified_and_its_seller_told():
    watch_running()
    offer = OfferFactory()
    server = offer.server
    owner = member(server.seller)
    ProfileFactory(user=owner, preferred_language="fr")
    agent(server, heard_at=NOW - timedelta(minutes=5))

    assert agents_check(now=NOW).unreachable_server_ids == [server.pk]

    offer.refresh_from_db()
    server.refresh_from_db()
    assert offer.state == OfferState.WITHDRAWN and server.agent_verified_at is None
    assert ServerEvent.objects.get(server=server).kind == ServerEventKind.UNREACHABLE
    email = OutboxEmail.objects.get()  # in the owner's language
    assert (email.recipient, email.subject) == (owner.email, f"Votre serveur {server.name} est injoignable")
    assert "Son offre a été retirée du carnet d'ordres." in email.body
    assert "depuis le " in email.body and "(UTC)\u00a0: EverXCloud considère donc" in email.body
    assert f"/seller/servers/{server.pk}/" in email.body


def test_an_unverified_idle_server_that_goes_quiet_is_not_judged():
    watch_running()
    server = ServerFactory(agent_verified_at=None)
    agent(server, heard_at=NOW - timedelta(hours=2))

    assert agents_check(now=NOW).unreachable_server_ids == []
    assert not ServerEvent.objects.exists()


def test_a_server_never_heard_counts_its_silence_from_its_oldest_rentals_start():
    watch_running()
    rental = charged_rental("USD")  # started at START, 30 minutes ago, and no agent ever reported

    assert agents_check(now=NOW).unreachable_server_ids == [rental.server_id]

    rental.refresh_from_db()
    assert (rental.end_reason, rental.ended_at) == (EndReason.SERVER_FAILURE, START)
    rental.buyer.wallet.refresh_from_db()
    assert rental.buyer.wallet.balance == Decimal("100.00")  # the whole hour: none of it was used
    assert ServerEvent.objects.get().detail["last_heard_at"] is None
    assert agents_check(now=NOW + timedelta(minutes=1)).unreachable_server_ids == []
    assert ServerEvent.objects.count() == 1


def test_after_an_outage_of_the_exchange_every_server_gets_the_threshold_again():
    AgentMonitor.objects.create(last_run_at=NOW - timedelta(hours=1), up_since=START - timedelta(days=1))
    rental = charged_rental("USD")
    agent(rental.server, heard_at=NOW - timedelta(hours=1))  # silent since the exchange went down
    undelivered = rental_for(buyer_with("USD", "10.00"), delivered_at=None, username="",
                             started_at=NOW - timedelta(minutes=20))
    heard = agent(undelivered.server, heard_at=NOW)  # this agent reports, but not the login

    def check(at):
        ServerAgent.objects.filter(pk=heard.pk).update(last_heartbeat_at=at - timedelta(seconds=5))
        return agents_check(now=at)

    # The watch runs every minute again from NOW; the agent stays silent.
    for seconds in (0, 60, 120, 179):
        run = check(NOW + timedelta(seconds=seconds))
        assert (run.judged, run.up_since, run.unreachable_server_ids) == (False, NOW, [])
    rental.refresh_from_db()
    assert rental.state == RentalState.RUNNING

    # The threshold has passed since the exchange came back and the agent is still silent.
    third = check(NOW + THRESHOLD)
    assert third.judged and third.unreachable_server_ids == [rental.server_id]
    # The login's deadline counts from the exchange's return too: not before 10 minutes after it.
    undelivered.refresh_from_db()
    assert undelivered.state == RentalState.STARTING
    for minutes in range(4, 10):
        check(NOW + timedelta(minutes=minutes))
    check(NOW + timedelta(minutes=9, seconds=59))
    assert Rental.objects.get(pk=undelivered.pk).state == RentalState.STARTING
    assert check(NOW + timedelta(minutes=10, seconds=1)).not_delivered_rental_ids == [undelivered.pk]


# --- GPUs --------------------------------------------------------------------------------------


def two_rentals_on_one_server():
    """Two charged rentals of one GPU each on an 8-GPU server: GPU 0 and GPU 1."""
    first = charged_rental("USD")
    second = RentalFactory(buyer=buyer_with("USD", "100.00"), offer=first.offer, started_at=START)
    rental_charge_next_hour(rental_id=second.pk, now=START)
    assert [slot.index for slot in first.gpu_slots.all()] == [0]
    assert [slot.index for slot in second.gpu_slots.all()] == [1]
    return first, second


def test_a_gpu_missing_from_a_fresh_report_ends_only_the_rental_holding_it():
    watch_running()
    first, second = two_rentals_on_one_server()
    reported_at = NOW - timedelta(seconds=20)
    agent(first.server, heard_at=reported_at, gpus=[gpu for gpu in gpus_seen(8) if gpu["index"] != 1])

    checked = agents_check(now=NOW)

    assert (checked.unreachable_server_ids, checked.gpu_failed_rental_ids) == ([], [second.pk])
    second.refresh_from_db()
    assert (second.state, second.end_reason, second.ended_at) == (
        RentalState.ENDED, EndReason.SERVER_FAILURE, reported_at
    )
    # 30 minutes 20 seconds of the hour left: 30 whole minutes back, 30/60 of 2.88 = 1.44.
    second.buyer.wallet.refresh_from_db()
    assert second.buyer.wallet.balance == Decimal("98.56")
    first.refresh_from_db()
    assert first.state == RentalState.RUNNING
    [event] = ServerEvent.objects.all()
    assert (event.kind, event.detail["rental_id"], event.detail["gpus"]) == (
        ServerEventKind.GPU_FAILED, second.pk, {"1": "missing"}
    )
    assert outbox_keys() == [f"rental-ended:{second.pk}"]
    # In the buyer's language (Portuguese), with the refund.
    body = OutboxEmail.objects.get().body
    assert "terminou em" in body and "porque uma GPU que usava falhou." in body and "US$" in body
    assert Server.objects.get(pk=first.server_id).gpus_rented == 1

    before = (books(), ServerEvent.objects.count())
    assert agents_check(now=NOW + timedelta(seconds=30)).gpu_failed_rental_ids == []
    assert (books(), ServerEvent.objects.count()) == before


def test_uncorrected_ecc_errors_end_the_rental_and_an_unknown_count_does_not():
    watch_running()
    first, second = two_rentals_on_one_server()
    agent(first.server, heard_at=NOW - timedelta(seconds=5),
          gpus=gpus_seen(8, gpu0={"ecc_uncorrected": 2}, gpu1={"ecc_uncorrected": None}))

    assert agents_check(now=NOW).gpu_failed_rental_ids == [first.pk]

    assert ServerEvent.objects.get().detail["gpus"] == {"0": "ecc"}
    second.refresh_from_db()
    assert second.state == RentalState.RUNNING


def test_gpus_are_judged_only_on_a_fresh_report():
    watch_running(since=NOW - timedelta(minutes=1))  # in the grace: the silence is not judged either
    first, _ = two_rentals_on_one_server()
    agent(first.server, heard_at=NOW - THRESHOLD - timedelta(seconds=1), gpus=[])

    checked = agents_check(now=NOW)

    assert (checked.unreachable_server_ids, checked.gpu_failed_rental_ids) == ([], [])
    assert Rental.objects.filter(state=RentalState.RUNNING).count() == 2


def test_a_report_whose_nvidia_smi_failed_ends_no_rental():
    watch_running()
    first, second = two_rentals_on_one_server()
    heard = NOW - timedelta(seconds=5)
    agent(first.server, heard_at=heard, gpus=[])
    ServerAgent.objects.filter(server=first.server).update(gpu_error="nvidia-smi timed out after 10 s")

    assert agents_check(now=NOW).gpu_failed_rental_ids == []

    assert Rental.objects.filter(pk__in=[first.pk, second.pk], state=RentalState.RUNNING).count() == 2


# --- delivery ----------------------------------------------------------------------------------


def undelivered_rental(currency: str, *, started_at=START):
    buyer = buyer_with(currency, "100.00")
    rental = rental_for(buyer, delivered_at=None, username="", started_at=started_at)
    rental_charge_next_hour(rental_id=rental.pk, now=started_at)
    rental.refresh_from_db()
    assert (rental.state, rental.paid_through) == (RentalState.STARTING, started_at + timedelta(hours=1))
    return rental


@pytest.mark.parametrize(("currency", "charged"), [("USD", "2.88"), ("EUR", "2.65")])
def test_a_login_not_ready_in_time_gives_the_whole_first_hour_back_and_the_seller_earns_nothing(
    currency, charged
):
    watch_running()
    rental = undelivered_rental(currency, started_at=NOW - timedelta(minutes=10, seconds=1))
    agent(rental.server, heard_at=NOW - timedelta(seconds=10))
    seller_code = f"seller_earnings:{rental.server.seller_id}:USD"
    rental.buyer.wallet.refresh_from_db()
    assert rental.buyer.wallet.balance == Decimal("100.00") - Decimal(charged)
    charge = rental.charges.get().ledger_transaction

    assert agents_check(now=NOW).not_delivered_rental_ids == [rental.pk]

    rental.refresh_from_db()
    assert (rental.state, rental.end_reason, rental.ended_at) == (
        RentalState.ENDED, EndReason.NOT_DELIVERED, NOW
    )
    reversal = LedgerTransaction.objects.get(idempotency_key=f"rental:{rental.pk}:not-delivered-reversal")
    assert (reversal.kind, reversal.reverses_id, reversal.fx_rate_id) == (
        LedgerTransaction.Kind.REVERSAL, charge.pk, charge.fx_rate_id
    )
    lines = sorted((e.account.code, e.amount.amount) for e in charge.entries.select_related("account"))
    reversed_lines = sorted(
        (e.account.code, -e.amount.amount) for e in reversal.entries.select_related("account")
    )
    assert reversed_lines == lines  # every line of the charge, exactly
    rental.buyer.wallet.refresh_from_db()
    assert rental.buyer.wallet.balance == Decimal("100.00")
    assert balance(seller_code) == Decimal("0.00")  # as before the charge
    assert balance("platform_revenue:USD") == Decimal("0.00")  # the fee reversed too
    email = OutboxEmail.objects.get()
    assert email.key == f"rental-ended:{rental.pk}"
    assert "porque o servidor do vendedor não preparou o seu acesso a tempo." in email.body
    assert "Devolvemos ao seu saldo a primeira hora completa: " in email.body
    assert Server.objects.get(pk=rental.server_id).gpus_rented == 0
    assert ledger_reconcile(now=NOW).ok

    before = (books(), outbox_keys())
    assert agents_check(now=NOW + timedelta(minutes=1)).not_delivered_rental_ids == []
    assert (books(), outbox_keys()) == before


def test_a_rentals_own_sshd_that_never_answers_ends_not_delivered_with_the_first_hour_back():
    """The agent reported the login ready on its own port, but nothing answers there (a closed
    port of 127.0.0.1): every probe delivers nothing, and the deadline ends it as any login not
    ready in time."""
    watch_running()
    rental = undelivered_rental("USD", started_at=NOW - timedelta(minutes=10, seconds=1))
    Server.objects.filter(pk=rental.server_id).update(host="127.0.0.1")
    Rental.objects.filter(pk=rental.pk).update(ssh_port=closed_port())
    agent(rental.server, heard_at=NOW - timedelta(seconds=10))

    assert rental_login_probe(rental_id=rental.pk) is None
    assert agents_check(now=NOW).not_delivered_rental_ids == [rental.pk]

    rental.refresh_from_db()
    assert (rental.state, rental.end_reason, rental.delivered_at) == (
        RentalState.ENDED, EndReason.NOT_DELIVERED, None)
    rental.buyer.wallet.refresh_from_db()
    assert rental.buyer.wallet.balance == Decimal("100.00")
    assert rental_login_probe(rental_id=rental.pk) is None  # ended: nothing to probe


def test_a_rental_its_agent_refused_ends_at_the_next_run_with_the_whole_first_hour_back():
    """No port or loop device left, a limit the kernel refused: waiting would not deliver it, so
    it ends a minute after its start, not at the deadline, and during the exchange's grace too."""
    watch_running(since=NOW - timedelta(seconds=30))  # the exchange itself just came back
    refused = undelivered_rental("EUR", started_at=NOW - timedelta(minutes=1))
    waiting = undelivered_rental("EUR", started_at=NOW - timedelta(minutes=1))
    Rental.objects.filter(pk=refused.pk).update(delivery_refused_at=NOW - timedelta(seconds=20))
    refused.buyer.wallet.refresh_from_db()
    assert refused.buyer.wallet.balance == Decimal("97.35")  # 2.65 EUR charged for the first hour

    checked = agents_check(now=NOW)

    assert (checked.refused_rental_ids, checked.not_delivered_rental_ids) == ([refused.pk], [])
    refused.refresh_from_db()
    assert (refused.state, refused.end_reason, refused.ended_at) == (
        RentalState.ENDED, EndReason.NOT_DELIVERED, NOW)
    refused.buyer.wallet.refresh_from_db()
    assert refused.buyer.wallet.balance == Decimal("100.00")
    assert LedgerTransaction.objects.filter(
        idempotency_key=f"rental:{refused.pk}:not-delivered-reversal").count() == 1
    assert Rental.objects.get(pk=waiting.pk).state == RentalState.STARTING  # its deadline is not here
    assert outbox_keys() == [f"rental-ended:{refused.pk}"]
    assert ledger_reconcile(now=NOW).ok

    before = (books(), outbox_keys())
    assert agents_check(now=NOW + timedelta(minutes=1)).refused_rental_ids == []
    assert (books(), outbox_keys()) == before


def test_a_rental_delivered_in_time_or_still_within_its_deadline_is_untouched():
    watch_running()
    delivered = rental_for(buyer_with("USD", "100.00"), delivered_at=START + timedelta(minutes=4),
                           started_at=START)
    rental_charge_next_hour(rental_id=delivered.pk, now=START)
    waiting = undelivered_rental("USD", started_at=NOW - timedelta(minutes=10))  # exactly at its deadline
    for server in (delivered.server, waiting.server):
        agent(server, heard_at=NOW - timedelta(seconds=10))
    before = books()

    assert agents_check(now=NOW).not_delivered_rental_ids == []

    assert Rental.objects.get(pk=delivered.pk).state == RentalState.RUNNING
    assert Rental.objects.get(pk=waiting.pk).state == RentalState.STARTING
    assert books() == before


def test_a_rental_never_charged_and_never_delivered_just_ends():
    watch_running()
    rental = rental_for(buyer_with("USD", "1.00"), delivered_at=None, username="",
                        started_at=NOW - timedelta(minutes=11))
    agent(rental.server, heard_at=NOW - timedelta(seconds=10))
    before = LedgerTransaction.objects.count()

    assert agents_check(now=NOW).not_delivered_rental_ids == [rental.pk]

    assert Rental.objects.get(pk=rental.pk).end_reason == EndReason.NOT_DELIVERED
    assert LedgerTransaction.objects.count() == before
    body = OutboxEmail.objects.get().body
    assert "não preparou o seu acesso a tempo" in body and "Devolvemos" not in body


def test_a_silent_servers_rental_never_delivered_gets_the_whole_hour_back():
    watch_running()
    rental = undelivered_rental("USD", started_at=START)
    agent(rental.server, heard_at=LAST_HEARD)  # heard after the start, but the login never came

    assert agents_check(now=NOW).unreachable_server_ids == [rental.server_id]

    rental.refresh_from_db()
    assert (rental.end_reason, rental.ended_at) == (EndReason.NOT_DELIVERED, LAST_HEARD)
    rental.buyer.wallet.refresh_from_db()
    assert rental.buyer.wallet.balance == Decimal("100.00")
    assert not LedgerTransaction.objects.filter(kind=LedgerTransaction.Kind.REFUND).exists()
    assert ServerEvent.objects.get().detail["ended_rental_ids"] == [rental.pk]


# --- cost --------------------------------------------------------------------------------------


def quiet_run_queries(servers: int) -> int:
    AgentMonitor.objects.all().delete()
    watch_running()
    for _ in range(servers):
        rental = RentalFactory(started_at=START, delivered_at=START, paid_through=START + timedelta(hours=1),
                               state="running")
        agent(rental.server, heard_at=NOW - timedelta(seconds=10))
    with CaptureQueriesContext(connection) as queries:
        checked = agents_check(now=NOW)
    assert checked.judged and checked.servers_counted == Server.objects.count()
    assert not (checked.unreachable_server_ids or checked.gpu_failed_rental_ids)
    assert not checked.not_delivered_rental_ids
    return len(queries)


def test_the_quiet_run_is_a_handful_of_queries_whatever_the_number_of_servers():
    few = quiet_run_queries(2)
    many = quiet_run_queries(25)
    assert few == many
    assert many <= 15  # one of them the rentals their agents refused


def test_a_judged_server_costs_a_bounded_number_of_queries():
    watch_running()
    counts = []
    for rentals in (1, 4):
        offer = OfferFactory(gpus_offered=8)
        for _ in range(rentals):
            rental = RentalFactory(offer=offer, buyer=buyer_with("USD", "100.00"), started_at=START)
            rental_charge_next_hour(rental_id=rental.pk, now=START)
        agent(offer.server, heard_at=LAST_HEARD)
        with CaptureQueriesContext(connection) as queries:
            assert agents_check(now=NOW).unreachable_server_ids == [offer.server_id]
        counts.append(len(queries))
    # A server with one rental costs a few dozen queries; each more rental its refund, its email,
    # its end and the matching pass its freed GPUs run: whatever the number of other servers.
    assert counts[0] <= 61
    assert counts[1] - counts[0] <= 3 * 25


# --- two beats at once -------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_runs_at_the_same_moment_judge_everything_once():
    watch_running()
    silent = charged_rental("USD")
    agent(silent.server, heard_at=LAST_HEARD)
    first, second = two_rentals_on_one_server()
    agent(first.server, heard_at=NOW - timedelta(seconds=10), gpus=gpus_seen(8, gpu1={"ecc_uncorrected": 1}))
    late = undelivered_rental("EUR", started_at=NOW - timedelta(minutes=12))
    agent(late.server, heard_at=NOW - timedelta(seconds=10))

    results, errors = run_together(4, lambda _: agents_check(now=NOW))

    assert errors == []
    assert sorted(server for run in results for server in run.unreachable_server_ids) == [silent.server_id]
    assert sorted(rental for run in results for rental in run.gpu_failed_rental_ids) == [second.pk]
    assert sorted(rental for run in results for rental in run.not_delivered_rental_ids) == [late.pk]
    assert sum(run.servers_counted > 0 for run in results) <= 1
    assert list(ServerEvent.objects.order_by("kind").values_list("kind", flat=True)) == [
        ServerEventKind.GPU_FAILED, ServerEventKind.UNREACHABLE
    ]
    assert LedgerTransaction.objects.filter(kind=LedgerTransaction.Kind.REFUND).count() == 2
    assert LedgerTransaction.objects.filter(kind=LedgerTransaction.Kind.REVERSAL).count() == 1
    assert outbox_keys() == sorted(
        [f"rental-ended:{silent.pk}", f"rental-ended:{second.pk}", f"rental-ended:{late.pk}"]
    )
    for wallet_owner, expected in ((silent.buyer, "98.99"), (second.buyer, "98.56"), (late.buyer, "100.00")):
        wallet_owner.wallet.refresh_from_db()
        assert wallet_owner.wallet.balance == Decimal(expected)
    assert Rental.objects.get(pk=first.pk).state == RentalState.RUNNING
    assert ledger_reconcile(now=NOW).ok


# --- isolation lost ----------------------------------------------------------------------------------


def test_a_level_drop_ends_only_the_rentals_sharing_the_server_with_the_failure_refund():
    watch_running()
    first, second = two_rentals_on_one_server()
    Rental.objects.filter(pk__in=[first.pk, second.pk]).update(isolation_level="shared")
    alone = charged_rental("USD", isolation_level="shared")
    Server.objects.filter(pk__in=[first.server_id, alone.server_id]).update(isolation_level="whole")
    for rental in (first, alone):
        agent(rental.server, heard_at=NOW - timedelta(seconds=10))

    checked = agents_check(now=NOW)

    assert checked.isolation_lost_rental_ids == [first.pk, second.pk]
    for rental in (first, second):
        rental.refresh_from_db()
        assert (rental.state, rental.end_reason, rental.ended_at) == (
            RentalState.ENDED, EndReason.ISOLATION_LOST, NOW)
        refund = LedgerTransaction.objects.get(idempotency_key=f"rental:{rental.pk}:server-failure-refund")
        assert refund.kind == LedgerTransaction.Kind.REFUND
    # 30 whole minutes of the hour left: half of 2.88 back.
    first.buyer.wallet.refresh_from_db()
    assert first.buyer.wallet.balance == Decimal("98.56")
    alone.refresh_from_db()
    assert alone.state == RentalState.RUNNING
    assert outbox_keys() == sorted([f"rental-ended:{first.pk}", f"rental-ended:{second.pk}"])
    # In the buyer's language (Portuguese), with the refund.
    body = OutboxEmail.objects.get(key=f"rental-ended:{first.pk}").body
    assert "porque o servidor deixou de o conseguir separar de outro aluguer que partilha o servidor" in body
    assert "US$" in body
    assert ledger_reconcile(now=NOW).ok
    assert agents_check(now=NOW + timedelta(minutes=1)).isolation_lost_rental_ids == []
