"""Real threads, real commits: nothing sells a GPU twice, and different GPU models match in parallel."""

import threading
import uuid
from decimal import Decimal

import pytest
from django.db import transaction

from exchange.matching import market_lock
from exchange.models import Bid, BidState, Rental, TimeInForce
from exchange.services import offer_post
from sellers.models import Server
from tests.factories import GpuModelFactory, ServerFactory, UserFactory
from tests.threads import run_together

from .support import market_set, place

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("balances")]

THREADS = 50


@pytest.fixture
def last_gpu(ssh_key):
    """A GPU model whose only server has one GPU left, and an open market."""
    market_set(True)
    gpu = GpuModelFactory()
    server = ServerFactory(gpu_model=gpu, gpu_count=2)
    offer_post(server=server, gpus=2, price_usd=Decimal("1.00"))
    assert place(UserFactory(), gpu, ssh_key).rental is not None
    return gpu, server


@pytest.mark.parametrize("tif", [TimeInForce.BID, TimeInForce.BUY_NOW])
def test_fifty_buyers_race_for_the_last_gpu(last_gpu, ssh_key, tif):
    gpu, server = last_gpu
    buyers = [UserFactory() for _ in range(THREADS)]

    results, errors = run_together(THREADS, lambda i: place(buyers[i], gpu, ssh_key, price="2.00", tif=tif))

    assert errors == []
    winners = [placed for placed in results if placed.rental is not None]
    assert len(winners) == 1
    server.refresh_from_db()
    assert server.gpus_rented == server.gpu_count == 2
    assert Rental.objects.count() == 2
    losers = Bid.objects.filter(buyer__in=buyers).exclude(pk=winners[0].bid.pk)
    if tif == TimeInForce.BID:
        assert set(losers.values_list("state", flat=True)) == {BidState.OPEN}
    else:
        assert set(losers.values_list("state", "cancel_reason")) == {(BidState.CANCELLED, "not_filled")}
    assert losers.count() == THREADS - 1


def test_the_same_form_sent_at_once_places_one_bid(last_gpu, ssh_key):
    gpu, _server = last_gpu
    buyer, token = UserFactory(), uuid.uuid4()

    results, errors = run_together(10, lambda i: place(buyer, gpu, ssh_key, price="2.00", token=token))

    assert errors == []
    assert Bid.objects.filter(buyer=buyer).count() == 1
    assert {placed.bid.pk for placed in results} == {Bid.objects.get(buyer=buyer).pk}
    assert {placed.rental.pk for placed in results} == {Rental.objects.get(buyer=buyer).pk}


def test_two_gpu_models_match_in_parallel(ssh_key):
    market_set(True)
    first, second = GpuModelFactory(), GpuModelFactory()
    for gpu in (first, second):
        offer_post(server=ServerFactory(gpu_model=gpu, gpu_count=1), gpus=1, price_usd=Decimal("1.00"))
    buyers = [UserFactory(), UserFactory()]
    first_locked, second_done = threading.Event(), threading.Event()

    def work(index: int):
        if index == 0:
            # Holds the first model's market lock until the second model has matched: with one
            # global lock the second thread would wait here and this one would time out.
            with transaction.atomic():
                market_lock(gpu_model_id=first.pk)
                first_locked.set()
                assert second_done.wait(timeout=15), "the second model waited for the first"
                return place(buyers[0], first, ssh_key, price="2.00")
        assert first_locked.wait(timeout=15)
        placed = place(buyers[1], second, ssh_key, price="2.00")
        second_done.set()
        return placed

    results, errors = run_together(2, work)

    assert errors == []
    assert len(results) == 2 and all(placed.rental is not None for placed in results)
    assert sorted(Rental.objects.values_list("gpu_model_id", flat=True)) == sorted([first.pk, second.pk])
    assert all(server.gpus_rented == 1 for server in Server.objects.all())


@pytest.mark.parametrize("tif", [TimeInForce.BID, TimeInForce.BUY_NOW])
def test_fifty_buyers_never_get_two_rentals_on_one_whole_server(ssh_key, tif):
    """Bids of every size at once on a "whole server": one of all its GPUs fills, nothing else."""
    market_set(True)
    gpu = GpuModelFactory()
    server = ServerFactory(gpu_model=gpu, gpu_count=8, isolation_level="whole")
    offer_post(server=server, gpus=8, price_usd=Decimal("1.00"))
    buyers = [UserFactory() for _ in range(THREADS)]

    results, errors = run_together(
        THREADS, lambda i: place(buyers[i], gpu, ssh_key, gpus=(1, 2, 4, 8)[i % 4], price="2.00", tif=tif)
    )

    assert errors == []
    winners = [placed for placed in results if placed.rental is not None]
    assert len(winners) == 1
    rental = Rental.objects.get()
    assert (rental.gpus, rental.isolation_level, rental.bid.gpus) == (8, "whole", 8)
    assert sorted(rental.gpu_slots.values_list("index", flat=True)) == list(range(8))
    server.refresh_from_db()
    assert server.gpus_rented == 8
