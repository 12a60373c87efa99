"""Real threads, real commits: buyers racing for one 8-GPU server each get GPU indices of their
own, and the database refuses an index held twice."""

from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction

from exchange.models import Rental, RentalGpu, TimeInForce
from exchange.services import offer_post
from sellers.models import Server
from tests.factories import GpuModelFactory, ServerFactory, UserFactory
from tests.threads import run_together

from .support import market_set, place

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("balances")]

THREADS = 50


@pytest.fixture
def server():
    market_set(True)
    server = ServerFactory(gpu_model=GpuModelFactory(), gpu_count=8)
    offer_post(server=server, gpus=8, price_usd=Decimal("1.00"))
    return server


@pytest.mark.parametrize("tif", [TimeInForce.BUY_NOW, TimeInForce.BID])
def test_fifty_buyers_on_one_server_never_share_a_gpu_index(server, ssh_key, tif):
    buyers = [UserFactory() for _ in range(THREADS)]
    sizes = [1, 2, 1, 4]

    results, errors = run_together(
        THREADS,
        lambda i: place(buyers[i], server.gpu_model, ssh_key, gpus=sizes[i % 4], price="2.00", tif=tif),
    )

    assert errors == []
    slots = RentalGpu.objects.filter(server=server, released_at__isnull=True)
    live = list(slots.values_list("rental_id", "index"))
    indices = [index for _rental, index in live]
    assert len(indices) == len(set(indices)) <= 8
    server.refresh_from_db()
    assert server.gpus_rented == len(indices)
    for rental in Rental.objects.filter(server=server):
        assert sum(1 for rental_id, _index in live if rental_id == rental.pk) == rental.gpus
    assert server.gpus_rented >= 8 - max(sizes) + 1  # the book filled what it could


def test_the_database_refuses_a_second_live_holder_of_an_index(server, ssh_key):
    first = place(UserFactory(), server.gpu_model, ssh_key, gpus=1, price="2.00").rental
    second = place(UserFactory(), server.gpu_model, ssh_key, gpus=1, price="2.00").rental
    assert Server.objects.get(pk=server.pk).gpus_rented == 2

    with pytest.raises(IntegrityError), transaction.atomic():
        RentalGpu.objects.filter(rental=second).update(index=RentalGpu.objects.get(rental=first).index)
