"""The exchange's side of the heartbeat (exchange.services.agents): who may call, what is refused
and recorded, verification of a server's GPUs, delivery of logins, and the desired state."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from exchange.exceptions import AgentServerRetired, AgentTokenInvalid, HeartbeatInvalid
from exchange.models import Offer, OfferState, Rental, RentalGpu
from exchange.selectors import (
    DesiredRental,
    _heartbeat_caller_portable,
    heartbeat_caller,
    rentals_delivery_refused,
)
from exchange.services import (
    GpuReport,
    LoginReport,
    agent_heartbeat_receive,
    offer_post,
    rental_deliver,
    rental_end,
)
from sellers.agents import gpus_compare
from sellers.models import (
    AgentToken,
    ServerAgent,
    ServerEvent,
    ServerEventKind,
    ServerHeartbeat,
)
from sellers.services import agent_token_revoke
from tests.factories import (
    GpuModelFactory,
    OfferFactory,
    ProfileFactory,
    RentalFactory,
    ServerFactory,
    UserFactory,
)

from .agents_support import enrolled, gpus_of, ready, report_for
from .support import market_set, place

pytestmark = pytest.mark.django_db


def receive(secret, report, **extra):
    return agent_heartbeat_receive(secret=secret, report=report, address="192.0.2.7", **extra)


def kinds(server) -> list[str]:
    return list(ServerEvent.objects.filter(server=server).order_by("at", "id").values_list("kind", flat=True))


def agent_events(server) -> list[str]:
    tokens = {ServerEventKind.TOKEN_CREATED, ServerEventKind.TOKEN_REVOKED}
    return [kind for kind in kinds(server) if kind not in tokens]


@pytest.fixture
def h100(gpu_catalog):
    return gpu_catalog["h100-sxm"]


def paid_starting(server, *, gpus=1, **fields):
    """A rental whose first hour is paid and whose login the agent has not reported yet."""
    now = timezone.now()
    offer = Offer.objects.filter(server=server).first()
    offer = offer or OfferFactory(server=server, gpus_offered=server.gpu_count)
    return RentalFactory(offer=offer, gpus=gpus, state="starting", started_at=now,
                         paid_through=now + timedelta(hours=1), delivered_at=None, username="", **fields)


# --- the first heartbeat, verification ------------------------------------------------------------


def test_a_first_matching_heartbeat_enrolls_and_verifies_the_server(h100):
    server, secret = enrolled(h100, agent_verified_at=None)

    desired = receive(secret, report_for(server))

    assert desired.server_id == server.pk
    assert desired.heartbeat_seconds == 30
    assert desired.remove_home is False
    assert desired.logins == []
    server.refresh_from_db()
    assert server.agent_verified_at is not None
    assert agent_events(server) == [ServerEventKind.ENROLLED, ServerEventKind.VERIFIED]
    agent = ServerAgent.objects.get(server=server)
    assert agent.agent_version == "1.0.0"
    assert agent.disk_free_gb == Decimal("812.5")
    assert [gpu["name"] for gpu in agent.gpus] == ["NVIDIA H100 80GB HBM3"] * 8
    assert agent.mismatch == []
    assert ServerHeartbeat.objects.filter(server=server, accepted=True).count() == 1


def test_verification_lets_a_resting_bid_fill(h100, balances, ssh_key):
    market_set(True)
    server, secret = enrolled(h100, agent_verified_at=None, isolation_level="shared")
    offer_post(server=server, gpus=8, price_usd=Decimal("2.00"))
    placed = place(UserFactory(), h100, ssh_key, gpus=2, price="2.50")
    assert placed.rental is None  # an unverified server is not in the book

    receive(secret, report_for(server))

    rental = Rental.objects.get(bid=placed.bid)
    assert rental.server_id == server.pk
    assert sorted(RentalGpu.objects.filter(rental=rental).values_list("index", flat=True)) == [0, 1]


@pytest.mark.parametrize(("change", "expected"), [
    ({"count": 7}, [{"code": "count", "expected": 8, "seen": 7}]),
    ({"name": "NVIDIA H100 PCIe"},
     [{"code": "model", "index": 0, "expected": "H100 SXM", "seen": "NVIDIA H100 PCIe"}]),
    ({"memory": 40960}, [{"code": "memory", "index": 0, "expected": 81920, "seen": 40960}]),
])
def test_a_mismatch_withdraws_the_offer_until_it_matches(h100, change, expected):
    server, secret = enrolled(h100)
    offer = OfferFactory(server=server)
    receive(secret, report_for(server))  # verified and listed

    receive(secret, report_for(server, gpus=gpus_of(server, **change)))

    server.refresh_from_db()
    assert server.agent_verified_at is None
    offer.refresh_from_db()
    assert offer.state == OfferState.WITHDRAWN
    mismatch = ServerAgent.objects.get(server=server).mismatch
    assert mismatch[: len(expected)] == expected
    if "count" not in change:
        assert {item["index"] for item in mismatch} == set(range(8))
    assert agent_events(server) == [ServerEventKind.ENROLLED, ServerEventKind.MISMATCH]
    told = ServerEvent.objects.get(server=server, kind=ServerEventKind.MISMATCH)
    assert told.detail == {"mismatch": mismatch}

    receive(secret, report_for(server, gpus=gpus_of(server, **change)))  # the same: told once
    assert agent_events(server) == [ServerEventKind.ENROLLED, ServerEventKind.MISMATCH]

    receive(secret, report_for(server))
    server.refresh_from_db()
    assert server.agent_verified_at is not None
    assert ServerAgent.objects.get(server=server).mismatch == []
    assert agent_events(server) == [
        ServerEventKind.ENROLLED, ServerEventKind.MISMATCH, ServerEventKind.VERIFIED
    ]


def test_uncorrected_ecc_errors_and_a_new_mismatch_are_each_told(h100):
    server, secret = enrolled(h100)
    gpus = list(gpus_of(server))
    gpus[3] = replace(gpus[3], ecc_uncorrected=2)

    receive(secret, report_for(server, gpus=tuple(gpus)))
    unread = "1 line of nvidia-smi output could not be read"
    receive(secret, report_for(server, gpus=tuple(gpus[:7]), gpu_error=unread))

    details = [event.detail["mismatch"] for event in
               ServerEvent.objects.filter(server=server, kind=ServerEventKind.MISMATCH).order_by("id")]
    assert details == [
        [{"code": "ecc", "index": 3, "seen": 2}],
        [{"code": "count", "expected": 8, "seen": 7, "error": unread},
         {"code": "ecc", "index": 3, "seen": 2}],
    ]


@pytest.mark.parametrize(("slug", "name", "memory", "matches"), [
    ("h100-sxm", "NVIDIA H100 80GB HBM3", 81559, True),
    ("h100-sxm", "NVIDIA H100 PCIe", 81559, False),
    ("h100-sxm", "NVIDIA H100 NVL", 95830, False),
    ("a100-sxm", "NVIDIA A100-SXM4-80GB", 81920, True),
    ("a100-sxm", "NVIDIA A100-SXM4-40GB", 40960, False),
    ("a100-sxm", "NVIDIA A100 80GB PCIe", 81920, False),
    ("l40s", "NVIDIA L40S", 46068, True),  # ECC on: 1/16 reserved
    ("l40s", "NVIDIA L40S", 49140, True),
    ("l40s", "NVIDIA L40", 46068, False),
    ("rtx-4090", "NVIDIA GeForce RTX 4090", 24564, True),
    ("rtx-4090", "NVIDIA GeForce RTX 4090 D", 24564, False),
    ("rtx-6000-ada", "NVIDIA RTX 6000 Ada Generation", 49140, True),
    ("h200", "NVIDIA H200", 143771, True),
    ("h200", "NVIDIA H200", 81559, False),
])
def test_gpus_compare_knows_what_nvidia_smi_calls_each_model(gpu_catalog, slug, name, memory, matches):
    server = ServerFactory.build(gpu_model=gpu_catalog[slug], gpu_count=1)
    gpus = [{"index": 0, "name": name, "memory_total_mib": memory, "ecc_uncorrected": 0}]

    assert (gpus_compare(server=server, gpus=gpus, gpu_error=None) == []) is matches


def test_a_model_the_catalog_data_does_not_list_is_recognised_by_its_name(db):
    gpu = GpuModelFactory(name="A10", slug="a10", memory_gb=24, memory_type="GDDR6")
    server = ServerFactory.build(gpu_model=gpu, gpu_count=1)

    def compare(name):
        return gpus_compare(server=server, gpus=[{"index": 0, "name": name, "memory_total_mib": 23028,
                                                  "ecc_uncorrected": None}], gpu_error=None)

    assert compare("NVIDIA A10") == []
    assert compare("NVIDIA A100-SXM4-80GB")[0]["code"] == "model"
    assert compare("")[0]["code"] == "model"


def test_no_gpus_readable_is_a_count_mismatch_with_the_error(h100):
    server = ServerFactory.build(gpu_model=h100, gpu_count=8)

    assert gpus_compare(server=server, gpus=[], gpu_error="nvidia-smi was not found") == [
        {"code": "count", "expected": 8, "seen": 0, "error": "nvidia-smi was not found"}
    ]


# --- refusals: recorded, nothing else changes -----------------------------------------------------


def snapshot(server):
    return (
        list(ServerEvent.objects.filter(server=server).values_list("kind", flat=True)),
        list(ServerAgent.objects.filter(server=server).values()),
        list(Offer.objects.filter(server=server).values_list("state", flat=True)),
        ServerHeartbeat.objects.filter(server=server, accepted=True).count(),
        type(server).objects.filter(pk=server.pk).values_list("agent_verified_at", flat=True).get(),
    )


def refusals(server) -> list[str]:
    refused = ServerHeartbeat.objects.filter(server=server, accepted=False)
    return list(refused.values_list("problem", flat=True))


def test_an_unknown_token_is_refused_and_names_no_server(h100):
    server, _secret = enrolled(h100)
    before = snapshot(server)

    for secret in ("evxa_" + "x" * 40, "evx_notanagenttoken", "", "evxa_" + "y" * 200):
        with pytest.raises(AgentTokenInvalid):
            receive(secret, report_for(server))

    assert snapshot(server) == before
    assert ServerHeartbeat.objects.count() == 0


def test_a_revoked_token_is_refused_and_recorded_on_its_server(h100):
    server, secret = enrolled(h100)
    receive(secret, report_for(server))
    agent_token_revoke(seller=server.seller, server_id=server.pk)
    before = snapshot(server)

    with pytest.raises(AgentTokenInvalid) as refused:
        receive(secret, report_for(server))

    assert refused.value.code == "token_invalid"
    assert snapshot(server) == before
    assert refusals(server) == ["token_revoked"]


def test_a_retired_server_is_refused_and_recorded(h100):
    server, secret = enrolled(h100)
    type(server).objects.filter(pk=server.pk).update(status="retired")
    before = snapshot(server)

    with pytest.raises(AgentServerRetired) as refused:
        receive(secret, report_for(server))

    assert refused.value.code == "server_retired"
    assert snapshot(server) == before
    assert refusals(server) == ["server_retired"]


def gpu_with(**fields):
    return lambda server: tuple(replace(gpu, **fields) if gpu.index == 0 else gpu for gpu in gpus_of(server))


LOGIN = LoginReport(rental_id=12, username="evx-12", state="ready", gpu_indices=(0,))

ABSURD = {
    "gpus.0.memory_total_mib": {"gpus": gpu_with(memory_total_mib=3_000_000)},
    "gpus.0.memory_total_mib ": {"gpus": gpu_with(memory_total_mib=0)},
    "gpus.0.index": {"gpus": gpu_with(index=16)},
    "gpus.1.index": {"gpus": gpu_with(index=1)},  # two GPUs with index 1
    "gpus.0.temperature_c": {"gpus": gpu_with(temperature_c=151)},
    "gpus.0.temperature_c ": {"gpus": gpu_with(temperature_c=-51)},
    "gpus.0.utilization_percent": {"gpus": gpu_with(utilization_percent=101)},
    "gpus.0.ecc_uncorrected": {"gpus": gpu_with(ecc_uncorrected=-1)},
    "gpus.0.name": {"gpus": gpu_with(name="x" * 201)},
    "gpus": {"gpus": lambda server: tuple(
        GpuReport(index=i % 16, name="x", memory_total_mib=1) for i in range(17)
    )},
    "uptime_seconds": {"uptime_seconds": -1},
    "disk_free_gb": {"disk_free_gb": 10**7 + 1},
    "agent_version": {"agent_version": "1" * 21},
    "hostname": {"hostname": "gpu\x0001"},  # PostgreSQL's text refuses NUL
    "gpus.0.uuid": {"gpus": gpu_with(uuid="GPU-\x1b[31m")},
    "gpu_error": {"gpu_error": "x" * 2001},
    "agent_version ": {"agent_version": " "},
    "sent_at": {"sent_at": "yesterday"},
    "sent_at ": {"sent_at": "2026-12-02T01:00:00"},  # no zone
    "logins": {"logins": (LOGIN,) * 65},
    "logins.0.username": {"logins": (replace(LOGIN, username="root"),)},
    "logins.0.username ": {"logins": (replace(LOGIN, username="evx-1;rm"),)},
    "logins.0.state": {"logins": (replace(LOGIN, state="done"),)},
    "logins.0.gpu_indices.0": {"logins": (replace(LOGIN, gpu_indices=(64,)),)},
    "logins.0.rental_id": {"logins": (replace(LOGIN, rental_id=0),)},
}


@pytest.mark.parametrize("field", list(ABSURD))
def test_absurd_values_are_refused_with_their_field_and_recorded(h100, field):
    server, secret = enrolled(h100)
    receive(secret, report_for(server))
    changes = {name: value(server) if callable(value) else value for name, value in ABSURD[field].items()}
    before = snapshot(server)

    with pytest.raises(HeartbeatInvalid) as refused:
        receive(secret, replace(report_for(server), **changes))

    assert refused.value.code == "invalid_input"
    assert field.strip() in [error["field"] for error in refused.value.field_errors]
    assert snapshot(server) == before
    assert refusals(server) == [f"invalid_input:{refused.value.field_errors[0]['field']}"]


def test_another_servers_token_only_ever_reaches_its_own_server(h100):
    mine, my_secret = enrolled(h100)
    theirs, _their_secret = enrolled(h100)
    their_rental = paid_starting(theirs)

    desired = receive(my_secret, report_for(mine, logins=[(their_rental, [0])]))

    assert desired.server_id == mine.pk
    assert desired.logins == []
    their_rental.refresh_from_db()
    assert their_rental.delivered_at is None
    assert not ServerAgent.objects.filter(server=theirs).exists()


# --- delivery and the desired state ---------------------------------------------------------------


def test_a_ready_login_delivers_the_paid_rental_once(h100, outbox_sent):
    server, secret = enrolled(h100, host="gpu-7.lisbon.example", ssh_port=2222)
    rental = paid_starting(server, gpus=2)
    [login] = receive(secret, report_for(server)).logins
    assert (login.rental_id, login.username, login.gpu_indices) == (rental.pk, f"evx-{rental.pk}", [0, 1])
    assert login.ssh_public_key == rental.ssh_public_key

    receive(secret, report_for(server, logins=[(rental, [0, 1])]))

    rental.refresh_from_db()
    assert rental.state == "running"
    assert rental.username == f"evx-{rental.pk}"
    assert rental.delivered_at is not None
    delivered_at = rental.delivered_at
    sent = outbox_sent()
    assert len(sent) == 1
    assert sent[0].to == [rental.buyer.email]
    assert f"ssh -p 2222 evx-{rental.pk}@gpu-7.lisbon.example" in sent[0].body

    receive(secret, report_for(server, logins=[(rental, [0, 1])]))  # the same report again

    rental.refresh_from_db()
    assert rental.delivered_at == delivered_at
    assert len(outbox_sent()) == 1
    assert ServerAgent.objects.get(server=server).logins[0]["state"] == "ready"


def test_logins_not_ready_or_not_as_asked_deliver_nothing(h100):
    server, secret = enrolled(h100)
    rental = paid_starting(server, gpus=2)

    receive(secret, report_for(server, logins=()))
    receive(secret, replace(report_for(server), logins=(ready(rental, [0, 1], state="failed"),)))
    receive(secret, replace(report_for(server), logins=(ready(rental, [0, 5]),)))

    rental.refresh_from_db()
    assert (rental.state, rental.delivered_at, mail.outbox) == ("starting", None, [])


def test_a_login_the_agent_refuses_is_recorded_once_for_the_agents_check_to_end(h100):
    server, secret = enrolled(h100)
    rental = paid_starting(server, gpus=2)
    other = paid_starting(server, gpus=1)
    detail = "no free SSH port is left in 41000-41001 (1 used by rentals, 1 held by other processes)"
    refused = replace(ready(rental, [1, 0], state="refused"), detail=detail)
    wrong_gpus = replace(ready(other, [5], state="refused"), detail=detail)  # not the rental's GPUs

    receive(secret, replace(report_for(server), logins=(refused, wrong_gpus)))
    receive(secret, replace(report_for(server), logins=(refused, wrong_gpus)))  # said at every heartbeat

    rental.refresh_from_db()
    assert (rental.state, rental.delivered_at, rental.delivery_refused_at is not None) == (
        "starting", None, True)
    assert Rental.objects.get(pk=other.pk).delivery_refused_at is None
    [event] = ServerEvent.objects.filter(server=server, kind=ServerEventKind.DELIVERY_REFUSED)
    assert event.detail == {"rental_id": rental.pk, "detail": detail}
    assert rentals_delivery_refused() == [rental.pk]
    assert mail.outbox == []


def test_a_delivered_rental_is_never_marked_refused(h100):
    server, secret = enrolled(h100)
    rental = paid_starting(server)
    receive(secret, report_for(server, logins=[(rental, [0])]))
    receive(secret, replace(report_for(server), logins=(ready(rental, [0], state="refused"),)))
    rental.refresh_from_db()
    assert rental.delivered_at is not None and rental.delivery_refused_at is None
    assert not ServerEvent.objects.filter(kind=ServerEventKind.DELIVERY_REFUSED).exists()


def test_unpaid_and_ended_rentals_are_not_desired_and_reports_of_them_are_ignored(h100):
    server, secret = enrolled(h100)
    unpaid = RentalFactory(offer=OfferFactory(server=server), state="starting", delivered_at=None,
                           username="")
    ended = paid_starting(server)
    rental_end(rental_id=ended.pk, reason="stopped_by_buyer")

    desired = receive(secret, report_for(server, logins=[(unpaid, [0]), (ended, [1])]))

    assert desired.logins == []
    unpaid.refresh_from_db()
    ended.refresh_from_db()
    assert (unpaid.delivered_at, ended.delivered_at) == (None, None)


def test_a_delivered_rental_that_is_not_paid_yet_waits_to_run(h100):
    """Billing may not have charged the first hour when the login is ready: delivered, still
    starting; its charge makes it run (exchange.services.rental_mark_paid)."""
    server, secret = enrolled(h100)
    rental = paid_starting(server)
    Rental.objects.filter(pk=rental.pk).update(paid_through=None)

    rental_deliver(rental_id=rental.pk, server_id=server.pk)

    rental.refresh_from_db()
    assert (rental.state, rental.username) == ("starting", f"evx-{rental.pk}")
    assert rental.delivered_at is not None


def test_two_rentals_on_one_server_get_disjoint_indices(h100, balances, ssh_key):
    market_set(True)
    server, secret = enrolled(h100, isolation_level="shared")
    offer_post(server=server, gpus=8, price_usd=Decimal("2.00"))
    first = place(UserFactory(), h100, ssh_key, gpus=4, price="2.00").rental
    second = place(UserFactory(), h100, ssh_key, gpus=2, price="2.00").rental
    paid = timezone.now() + timedelta(hours=1)
    Rental.objects.filter(pk__in=[first.pk, second.pk]).update(paid_through=paid)

    logins = {login.rental_id: login.gpu_indices for login in receive(secret, report_for(server)).logins}

    assert logins == {first.pk: [0, 1, 2, 3], second.pk: [4, 5]}


def test_the_desired_state_costs_the_same_queries_for_one_rental_or_eight(h100):
    counts = []
    for rentals in (1, 8):
        server, secret = enrolled(h100)
        made = [paid_starting(server) for _ in range(rentals)]
        report = report_for(server, logins=[(rental, [index]) for index, rental in enumerate(made)])
        receive(secret, report)  # enrolled, delivered
        with CaptureQueriesContext(connection) as queries:
            desired = receive(secret, report)
        assert len(desired.logins) == rentals
        counts.append(len(queries))
    assert counts[0] == counts[1]
    assert counts[0] <= 6


def test_an_unchanged_heartbeat_is_three_queries(h100, django_assert_max_num_queries):
    server, secret = enrolled(h100)
    rental = paid_starting(server)
    report = report_for(server, logins=[(rental, [0])])
    receive(secret, report)

    with django_assert_max_num_queries(3):
        receive(secret, report)


# --- the agent's row: history, skew, back after silence -------------------------------------------


def test_history_is_kept_every_few_minutes_or_on_a_change(h100, settings):
    settings.AGENT_HISTORY_SECONDS = 300
    server, secret = enrolled(h100)
    start = timezone.now()

    for seconds in (0, 30, 60):
        receive(secret, report_for(server), now=start + timedelta(seconds=seconds))
    assert ServerHeartbeat.objects.filter(server=server, accepted=True).count() == 1

    hot = tuple(replace(gpu, temperature_c=80, utilization_percent=100) for gpu in gpus_of(server))
    receive(secret, report_for(server, gpus=hot), now=start + timedelta(seconds=90))  # load is no change
    assert ServerHeartbeat.objects.filter(server=server, accepted=True).count() == 1

    receive(secret, report_for(server, agent_version="1.0.1"), now=start + timedelta(seconds=120))
    receive(secret, report_for(server, agent_version="1.0.1"), now=start + timedelta(seconds=420))
    rows = ServerHeartbeat.objects.filter(server=server, accepted=True).order_by("received_at")
    assert [(row.received_at - start).total_seconds() for row in rows] == [0, 120, 420]
    assert rows[0].address == "192.0.2.7"


def test_clock_skew_is_the_agents_clock_minus_ours(h100):
    server, secret = enrolled(h100)
    now = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)

    receive(secret, report_for(server, sent_at="2026-12-02T01:01:30Z"), now=now)
    assert ServerAgent.objects.get(server=server).clock_skew_seconds == 90

    receive(secret, report_for(server, sent_at="1970-01-01T00:00:00Z"), now=now)  # a dead clock battery
    skew = datetime(1970, 1, 1, tzinfo=UTC) - now
    assert ServerAgent.objects.get(server=server).clock_skew_seconds == skew.total_seconds()


def test_a_server_judged_unreachable_is_back_with_its_next_heartbeat(h100):
    server, secret = enrolled(h100)
    receive(secret, report_for(server))
    silent_since = timezone.now() - timedelta(minutes=5)
    ServerAgent.objects.filter(server=server).update(unreachable_since=silent_since)

    receive(secret, report_for(server))

    assert ServerAgent.objects.get(server=server).unreachable_since is None
    back = ServerEvent.objects.get(server=server, kind=ServerEventKind.BACK)
    assert back.detail == {"unreachable_since": silent_since.isoformat()}
    receive(secret, report_for(server))
    assert ServerEvent.objects.filter(server=server, kind=ServerEventKind.BACK).count() == 1


def test_the_token_remembers_its_use_at_most_once_a_minute(h100):
    server, secret = enrolled(h100)
    start = timezone.now()

    receive(secret, report_for(server), now=start)
    receive(secret, report_for(server), now=start + timedelta(seconds=30))
    assert AgentToken.objects.get(server=server, revoked_at__isnull=True).last_used_at == start

    receive(secret, report_for(server), now=start + timedelta(seconds=61))
    token = AgentToken.objects.get(server=server, revoked_at__isnull=True)
    assert token.last_used_at == start + timedelta(seconds=61)


@pytest.mark.parametrize(("language", "ready"), [
    ("pt", "O seu aluguer EverXCloud está pronto"), ("fr", "Votre location EverXCloud est prête"),
])
def test_the_ready_email_speaks_the_buyers_language(h100, outbox_sent, language, ready):
    server, secret = enrolled(h100)
    buyer = ProfileFactory(preferred_language=language).user
    rental = paid_starting(server, buyer=buyer)

    receive(secret, report_for(server, logins=[(rental, [0])]))

    [email] = outbox_sent()
    assert email.subject == ready
    assert f"evx-{rental.pk}@{server.host}" in email.body


def test_the_heartbeats_read_makes_the_models_the_orm_would(gpu_catalog):
    """exchange.selectors.heartbeat_caller writes its SQL by hand (marketplace.sql): the token,
    server, GPU model and agent row it makes hold, field for field, what the ORM reads (JSON
    decoded, decimals and aware times), and the desired logins are the live paid rentals."""
    server, secret = enrolled(gpu_catalog["h100-sxm"])
    now = timezone.now()
    rental = RentalFactory(offer=OfferFactory(server=server), gpus=2, state="starting", started_at=now,
                           paid_through=now + timedelta(hours=1), delivered_at=None, username="")
    RentalFactory(offer=Offer.objects.get(server=server), gpus=2, state="starting", started_at=now,
                  paid_through=None, delivered_at=None, username="")  # not paid: no login yet
    receive(secret, report_for(server, logins=[(rental, [0, 1])]))

    caller = heartbeat_caller(secret=secret)

    token = AgentToken.objects.select_related("server__gpu_model", "server__agent").get(pk=caller.token.pk)
    for made, read in ((caller.token, token), (caller.token.server, token.server),
                       (caller.token.server.gpu_model, token.server.gpu_model),
                       (caller.token.server.agent, token.server.agent)):
        for field in type(read)._meta.concrete_fields:
            assert getattr(made, field.attname) == getattr(read, field.attname), field.name
    assert caller.token.server.agent.gpus[0]["index"] == 0
    assert caller.desired == [DesiredRental(rental_id=rental.pk, ssh_public_key=rental.ssh_public_key,
                                            delivered=True, gpu_indices=[0, 1])]
    assert heartbeat_caller(secret=secret + "x") is None
    # The ORM's version, for the embedded default's SQLite, reads the same.
    portable = _heartbeat_caller_portable(secret=secret)
    assert (portable.token, portable.token.server.agent, portable.desired) == (
        caller.token, caller.token.server.agent, caller.desired)


def test_the_heartbeats_read_of_a_server_without_an_agent_says_so_without_a_query(gpu_catalog):
    _server, secret = enrolled(gpu_catalog["h100-sxm"])

    with CaptureQueriesContext(connection) as captured:
        caller = heartbeat_caller(secret=secret)
        with pytest.raises(ServerAgent.DoesNotExist):
            caller.token.server.agent  # noqa: B018 - the access is the test

    assert len(captured.captured_queries) == 1
    assert caller.desired == []
