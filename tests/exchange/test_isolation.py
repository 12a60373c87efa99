"""The agents' isolation reports on the exchange (exchange.services.isolation): stored only when
they change, the level and share derived from them, what a fall to "whole server" does to the
book and the seller, device drifts and the operator's trust, and the rentals whose isolation is
lost (exchange.selectors.rentals_isolation_lost)."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.exceptions import OperatorNotAllowed
from exchange.exceptions import DevicesNotHeld
from exchange.models import Offer, OfferState
from exchange.selectors import rentals_isolation_lost
from exchange.services import agent_heartbeat_receive, server_devices_trust
from marketplace.models import OutboxEmail
from sellers.isolation import isolation_report_digest
from sellers.models import (
    MemberRole,
    SellerMembership,
    Server,
    ServerAgent,
    ServerEvent,
    ServerIsolationReport,
)
from tests.factories import OfferFactory, ProfileFactory, RentalFactory, UserFactory, operator_make
from tests.threads import run_together

from .agents_support import drift, enrolled, isolation_of, report_for

pytestmark = pytest.mark.django_db

NBSP = "\u00a0"


def receive(secret, report):
    return agent_heartbeat_receive(secret=secret, report=report, address="192.0.2.7")


@pytest.fixture
def h100(gpu_catalog):
    return gpu_catalog["h100-sxm"]


def isolation_events(server) -> list[tuple[str, dict]]:
    kinds = ("isolation_changed", "isolation_refused", "device_drift", "devices_held", "devices_cleared")
    return list(server.events.filter(kind__in=kinds).order_by("id").values_list("kind", "detail"))


def level_of(server) -> tuple:
    server.refresh_from_db()
    return (server.isolation_level, server.sellable_cpu_cores, server.sellable_memory_mib,
            server.sellable_disk_gb, server.devices_held_at is not None)


def test_a_changed_report_is_stored_with_its_level_and_the_server_s_share(h100):
    server, secret = enrolled(h100)
    report = isolation_of(server)

    receive(secret, report_for(server, isolation=report))

    [stored] = ServerIsolationReport.objects.filter(server=server)
    assert (stored.report, stored.digest, stored.level) == (report, isolation_report_digest(report), "shared")
    assert level_of(server) == ("shared", 62, 504 * 1024, 3450, False)
    assert ServerAgent.objects.get(server=server).isolation_digest == isolation_report_digest(report)
    assert isolation_events(server) == [("isolation_changed", {"from": "whole", "to": "shared"})]


def test_an_unchanged_report_in_another_key_order_writes_nothing(h100):
    server, secret = enrolled(h100)
    report = isolation_of(server)
    receive(secret, report_for(server, isolation=report))
    reordered = dict(reversed(list(report.items())))

    with CaptureQueriesContext(connection) as queries:
        receive(secret, report_for(server, isolation=reordered))

    assert ServerIsolationReport.objects.filter(server=server).count() == 1
    assert len(queries.captured_queries) == 2  # the read and the agent row's write, as without a report


def test_an_unchanged_heartbeat_with_a_report_is_three_queries(h100, django_assert_max_num_queries):
    server, secret = enrolled(h100)
    report = report_for(server, isolation=isolation_of(server))
    receive(secret, report)

    with django_assert_max_num_queries(3):
        receive(secret, report)


def test_the_desired_state_costs_the_same_queries_for_one_rental_or_eight_with_a_report(h100):
    counts = []
    for rentals in (1, 8):
        server, secret = enrolled(h100)
        offer = OfferFactory(server=server, gpus_offered=8)
        now = timezone.now()
        made = [RentalFactory(offer=offer, gpus=1, state="starting", started_at=now, isolation_level="shared",
                              paid_through=now + timedelta(hours=1), delivered_at=None, username="")
                for _ in range(rentals)]
        report = report_for(server, logins=[(rental, [index]) for index, rental in enumerate(made)],
                            isolation=isolation_of(server))
        receive(secret, report)
        with CaptureQueriesContext(connection) as queries:
            desired = receive(secret, report)
        assert [(login.isolation, login.limits) for login in desired.logins] == [
            ("shared", {"cpu_cores": 7, "memory_mib": 64512, "disk_gb": 431, "processes": 4096})] * rentals
        counts.append(len(queries))
    assert counts[0] == counts[1] <= 3


def test_a_report_gone_from_an_agent_that_sent_one_makes_the_server_whole(h100):
    server, secret = enrolled(h100)
    receive(secret, report_for(server, isolation=isolation_of(server)))

    desired = receive(secret, report_for(server))

    assert level_of(server) == ("whole", None, None, None, False)
    assert ServerAgent.objects.get(server=server).isolation_digest == ""
    assert ServerIsolationReport.objects.filter(server=server).count() == 1
    assert isolation_events(server)[-1] == ("isolation_changed", {"from": "shared", "to": "whole"})
    assert desired.logins == []


def owner_of(server):
    user = UserFactory()
    SellerMembership.objects.create(seller=server.seller, user=user, role=MemberRole.OWNER)
    return user


def test_a_fall_to_whole_withdraws_the_offers_of_fewer_gpus_and_tells_the_seller(h100):
    server, secret = enrolled(h100)
    owner = owner_of(server)
    receive(secret, report_for(server, isolation=isolation_of(server)))
    partial = OfferFactory(server=server, gpus_offered=2)

    receive(secret, report_for(server, isolation=isolation_of(server, tmp_private=False)))

    assert level_of(server)[0] == "whole"
    assert Offer.objects.get(pk=partial.pk).state == OfferState.WITHDRAWN
    [email] = OutboxEmail.objects.filter(recipient=owner.email)
    assert email.subject == f"Your server {server.name} is now sold as “Whole server”"
    assert "no longer reaches the level “Shared server”" in email.body
    assert "1 offer of fewer GPUs was withdrawn" in email.body
    assert f"/servers/{server.pk}" in email.body
    assert "What it lacks:\n- Private /tmp and /dev/shm\n" in email.body


def test_the_seller_reads_why_a_container_server_fell_in_french(h100):
    server, secret = enrolled(h100)
    owner = owner_of(server)
    ProfileFactory(user=owner, preferred_language="fr")
    held = {"runtime": "podman", "runtime_version": "4.3.1", "toolkit_version": "1.17.8",
            "gpus_by_uuid": True, "self_test": True, "disk_limited": True, "templates": []}
    receive(secret, report_for(server, isolation=isolation_of(server, container=held)))
    assert level_of(server)[0] == "container"

    receive(secret, report_for(server, isolation=isolation_of(
        server, container={**held, "self_test": False, "toolkit_version": "1.17.7"})))

    [email] = OutboxEmail.objects.filter(recipient=owner.email)
    assert f"Ce qui manque{NBSP}:\n- L'autotest des conteneurs a échoué.\n" in email.body
    assert "- Le NVIDIA Container Toolkit est antérieur à la version 1.17.8.\n" in email.body


def test_a_whole_server_keeps_its_offer_of_all_its_gpus(h100):
    server, secret = enrolled(h100)
    receive(secret, report_for(server, isolation=isolation_of(server)))
    whole = OfferFactory(server=server, gpus_offered=server.gpu_count)

    receive(secret, report_for(server, isolation=isolation_of(server, mig_enabled=True)))

    assert level_of(server)[0] == "whole"
    assert Offer.objects.get(pk=whole.pk).state == OfferState.ACTIVE


def test_a_rise_tells_no_one(h100):
    server, secret = enrolled(h100)
    owner_of(server)

    receive(secret, report_for(server, isolation=isolation_of(server)))

    assert level_of(server)[0] == "shared"
    assert not OutboxEmail.objects.exists()


# --- device drifts ---------------------------------------------------------------------------------


def test_each_drift_is_an_event_and_the_limit_holds_the_device_locks_until_an_operator_trusts_them(
    h100, settings
):
    settings.ISOLATION_DRIFT_LIMIT, settings.ISOLATION_DRIFT_HOURS = 2, 24
    server, secret = enrolled(h100)
    receive(secret, report_for(server, isolation=isolation_of(server)))

    receive(secret, report_for(server, isolation=isolation_of(server), device_drifts=(drift("nvidia3"),)))
    assert level_of(server)[0] == "shared"
    receive(secret, report_for(server, isolation=isolation_of(server), device_drifts=(drift("nvidia5"),)))

    assert level_of(server) == ("whole", 62, 504 * 1024, 3450, True)
    assert [kind for kind, _detail in isolation_events(server)] == [
        "isolation_changed", "device_drift", "device_drift", "devices_held", "isolation_changed"]
    assert isolation_events(server)[1][1] == {
        "at": "2026-12-04T21:00:00Z", "node": "nvidia3", "found": "mode 0666 owner 0:0, no ACL"}
    # A report that changes is judged with the locks still held.
    receive(secret, report_for(server, isolation=isolation_of(server, device_cgroup=False)))
    assert level_of(server)[0] == "whole"

    operator = operator_make("support")
    trusted = server_devices_trust(server_id=server.pk, operator=operator)

    assert (trusted.server_id, trusted.level) == (server.pk, "shared")
    assert level_of(server) == ("shared", 62, 504 * 1024, 3450, False)
    assert isolation_events(server)[-2:] == [
        ("devices_cleared", {"operator_id": operator.pk}),
        ("isolation_changed", {"from": "whole", "to": "shared"}),
    ]
    with pytest.raises(DevicesNotHeld):
        server_devices_trust(server_id=server.pk, operator=operator)
    with pytest.raises(OperatorNotAllowed):
        server_devices_trust(server_id=server.pk, operator=UserFactory())


def test_drifts_older_than_the_window_do_not_count(h100, settings):
    settings.ISOLATION_DRIFT_LIMIT, settings.ISOLATION_DRIFT_HOURS = 2, 24
    server, secret = enrolled(h100)
    receive(secret, report_for(server, isolation=isolation_of(server)))
    ServerEvent.objects.create(server=server, at=timezone.now() - timedelta(hours=25), kind="device_drift")

    receive(secret, report_for(server, isolation=isolation_of(server), device_drifts=(drift(),)))

    assert level_of(server) == ("shared", 62, 504 * 1024, 3450, False)


# --- rentals whose isolation is lost -----------------------------------------------------------------


def test_only_rentals_sold_stronger_than_their_server_now_is_and_sharing_it_have_lost_isolation(h100):
    server, secret = enrolled(h100)
    receive(secret, report_for(server, isolation=isolation_of(server)))
    offer = OfferFactory(server=server, gpus_offered=8)
    now = timezone.now()
    shared = [RentalFactory(offer=offer, gpus=1, state="running", started_at=now, isolation_level="shared",
                            paid_through=now + timedelta(hours=1), delivered_at=now) for _ in range(2)]
    RentalFactory(offer=offer, gpus=1, state="running", started_at=now, delivered_at=now,
                               paid_through=now + timedelta(hours=1), isolation_level="whole")
    alone_server, alone_secret = enrolled(h100)
    receive(alone_secret, report_for(alone_server, isolation=isolation_of(alone_server)))
    RentalFactory(offer=OfferFactory(server=alone_server, gpus_offered=8), gpus=1, state="running",
                  started_at=now, delivered_at=now, paid_through=now + timedelta(hours=1),
                  isolation_level="shared")
    assert rentals_isolation_lost() == []

    for which, token in ((server, secret), (alone_server, alone_secret)):
        receive(token, report_for(which, isolation=isolation_of(which, login_sandboxed=False),
                                  logins=[]))

    assert rentals_isolation_lost() == [rental.pk for rental in shared]


CONTAINER_HELD = {"runtime": "podman", "runtime_version": "4.3.1", "toolkit_version": "1.17.8",
                  "gpus_by_uuid": True, "self_test": True, "disk_limited": True, "templates": []}


def container_server_shared(h100):
    """A server sold as "container" and two container rentals running on it."""
    server, secret = enrolled(h100)
    receive(secret, report_for(server, isolation=isolation_of(server, container=CONTAINER_HELD)))
    offer = OfferFactory(server=server, gpus_offered=8)
    now = timezone.now()
    running = [RentalFactory(offer=offer, gpus=1, state="running", started_at=now, delivered_at=now,
                             paid_through=now + timedelta(hours=1), isolation_level="container")
               for _ in range(2)]
    return server, secret, running


def test_a_runtime_that_stopped_answering_sells_no_container_and_ends_no_container_rental(h100):
    server, secret, running = container_server_shared(h100)

    paused = {**CONTAINER_HELD, "paused": True}
    receive(secret, report_for(server, isolation=isolation_of(server, container=paused)))

    assert level_of(server)[0] == "shared"  # no new container is sold while it does not answer
    assert Server.objects.get(pk=server.pk).containers_paused is True
    assert rentals_isolation_lost() == []  # the containers it runs still hold

    receive(secret, report_for(server, isolation=isolation_of(server, container=None)))  # it is gone

    assert Server.objects.get(pk=server.pk).containers_paused is False
    assert rentals_isolation_lost() == [rental.pk for rental in running]


def test_a_paused_runtime_whose_containers_did_not_hold_keeps_no_rental(h100):
    server, secret, running = container_server_shared(h100)

    failed = {**CONTAINER_HELD, "self_test": False, "paused": True}
    receive(secret, report_for(server, isolation=isolation_of(server, container=failed)))

    assert Server.objects.get(pk=server.pk).containers_paused is False
    assert rentals_isolation_lost() == [rental.pk for rental in running]


def test_a_login_report_still_reaches_its_rental_with_a_report_present(h100):
    server, secret = enrolled(h100)
    now = timezone.now()
    rental = RentalFactory(offer=OfferFactory(server=server, gpus_offered=8), gpus=1, state="starting",
                           started_at=now, paid_through=now + timedelta(hours=1), delivered_at=None,
                           username="", isolation_level="shared")

    receive(secret, report_for(server, logins=[(rental, [0])], isolation=isolation_of(server)))

    rental.refresh_from_db()
    assert (rental.state, rental.username) == ("running", f"evx-{rental.pk}")


@pytest.mark.django_db(transaction=True)
def test_heartbeats_bringing_the_same_new_report_at_once_store_it_once(h100):
    server, secret = enrolled(h100)
    receive(secret, report_for(server))
    report = report_for(server, isolation=isolation_of(server))

    _results, errors = run_together(4, lambda _: receive(secret, report))

    assert errors == []
    assert ServerIsolationReport.objects.filter(server=server).count() == 1
    assert isolation_events(server) == [("isolation_changed", {"from": "whole", "to": "shared"})]
