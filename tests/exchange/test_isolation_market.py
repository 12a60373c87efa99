"""Isolation levels on the market: a "whole server" offers all its GPUs and rents them to one bid,
bids name the levels they accept, rentals keep the level they were sold with."""

from decimal import Decimal

import pytest

from exchange.exceptions import BidRejected, OfferRejected
from exchange.models import Bid, Offer, Rental
from exchange.services import isolation_levels_parse, offer_post, offer_update
from sellers.isolation import ANY_LEVEL
from tests.factories import GpuModelFactory, ServerFactory, UserFactory

from .support import place

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("balances")]

D = Decimal
WHOLE_REFUSAL = "This server is sold as a whole server, one rental at a time: offer all its 8 GPUs."


@pytest.fixture
def gpu():
    return GpuModelFactory()


def whole(gpu, **extra):
    return ServerFactory(gpu_model=gpu, gpu_count=8, isolation_level="whole", **extra)


def offers_state():
    return list(Offer.objects.order_by("id").values_list("server_id", "gpus_offered", "price_usd", "state"))


# --- a whole server offers all its GPUs -------------------------------------------------------


@pytest.mark.parametrize("gpus", [1, 4, 7])
def test_a_whole_server_refuses_an_offer_of_fewer_gpus(gpu, gpus):
    server = whole(gpu)

    with pytest.raises(OfferRejected) as refused:
        offer_post(server=server, gpus=gpus, price_usd=D("2.00"))

    assert (refused.value.code, str(refused.value.message)) == ("whole_server_all_gpus", WHOLE_REFUSAL)
    assert offers_state() == []


def test_a_whole_server_of_one_gpu_offers_it(gpu):
    server = ServerFactory(gpu_model=gpu, gpu_count=1, isolation_level="whole")
    offer = offer_post(server=server, gpus=1, price_usd=D("2.00"))
    assert offer.gpus_offered == 1


def test_a_whole_server_offers_all_its_gpus_and_cannot_shrink_the_offer(gpu):
    server = whole(gpu)
    offer = offer_post(server=server, gpus=8, price_usd=D("2.00"))

    with pytest.raises(OfferRejected) as refused:
        offer_update(offer_id=offer.pk, gpus=4)

    assert refused.value.code == "whole_server_all_gpus"
    assert offers_state() == [(server.pk, 8, D("2.00"), "active")]
    offer_update(offer_id=offer.pk, price_usd=D("1.50"))
    assert offers_state() == [(server.pk, 8, D("1.50"), "active")]


@pytest.mark.parametrize("level", ["shared", "container"])
def test_shared_and_container_servers_offer_part_of_their_gpus(gpu, level):
    server = ServerFactory(gpu_model=gpu, gpu_count=8, isolation_level=level)
    assert offer_post(server=server, gpus=3, price_usd=D("2.00")).gpus_offered == 3


# --- matching --------------------------------------------------------------------------------


def test_a_whole_server_fills_only_a_bid_of_all_its_gpus(open_market, gpu, ssh_key):
    server = whole(gpu)
    offer_post(server=server, gpus=8, price_usd=D("2.00"))

    small = [place(UserFactory(), gpu, ssh_key, gpus=gpus, price="3.00") for gpus in (1, 2, 4)]
    assert [placed.rental for placed in small] == [None, None, None]
    assert [placed.bid.state for placed in small] == ["open", "open", "open"]

    placed = place(UserFactory(), gpu, ssh_key, gpus=8, price="3.00")

    rental = placed.rental
    assert (rental.gpus, rental.server_id, rental.isolation_level) == (8, server.pk, "whole")
    assert sorted(rental.gpu_slots.values_list("index", flat=True)) == list(range(8))
    assert Rental.objects.count() == 1


def test_a_rental_keeps_the_level_its_server_was_sold_at(open_market, gpu, ssh_key):
    server = ServerFactory(gpu_model=gpu, gpu_count=8, isolation_level="container")
    offer_post(server=server, gpus=8, price_usd=D("2.00"))

    rental = place(UserFactory(), gpu, ssh_key, gpus=2, price="3.00").rental

    assert Rental.objects.get(pk=rental.pk).isolation_level == "container"


def test_a_bid_fills_only_from_servers_at_a_level_it_accepts(open_market, gpu, ssh_key):
    cheap_shared = ServerFactory(gpu_model=gpu, gpu_count=8, isolation_level="shared")
    dear_container = ServerFactory(gpu_model=gpu, gpu_count=8, isolation_level="container")
    offer_post(server=cheap_shared, gpus=8, price_usd=D("1.00"))
    offer_post(server=dear_container, gpus=8, price_usd=D("2.00"))

    placed = place(UserFactory(), gpu, ssh_key, gpus=1, price="3.00", isolation_levels="container")

    assert (placed.rental.server_id, placed.rental.price_usd) == (dear_container.pk, D("2.00"))
    assert Bid.objects.get(pk=placed.bid.pk).isolation_levels == "container"


def test_a_bid_accepting_no_level_there_is_rests(open_market, gpu, ssh_key):
    offer_post(server=ServerFactory(gpu_model=gpu, gpu_count=8, isolation_level="shared"), gpus=8,
               price_usd=D("1.00"))

    placed = place(UserFactory(), gpu, ssh_key, gpus=8, price="3.00", isolation_levels="container,whole")

    assert (placed.rental, placed.bid.state) == (None, "open")


def test_bids_accept_every_level_unless_they_say_otherwise(open_market, gpu, ssh_key):
    ServerFactory(gpu_model=gpu)
    placed = place(UserFactory(), gpu, ssh_key, gpus=1, price="3.00")
    assert Bid.objects.get(pk=placed.bid.pk).isolation_levels == ANY_LEVEL == "container,shared,whole"


@pytest.mark.parametrize("stored", ["", "all", "whole,shared", "shared,shared", "x" * 40, "shared\x00"])
def test_a_bid_refuses_levels_that_are_no_set_of_levels(open_market, gpu, ssh_key, stored):
    ServerFactory(gpu_model=gpu)
    with pytest.raises(BidRejected) as refused:
        place(UserFactory(), gpu, ssh_key, isolation_levels=stored)
    assert refused.value.code == "isolation_levels_invalid"
    assert not Bid.objects.exists()


def test_levels_are_parsed_from_a_list_of_values():
    assert isolation_levels_parse(None) == "container,shared,whole"
    assert isolation_levels_parse(["whole", "container"]) == "container,whole"
    assert isolation_levels_parse(("shared",)) == "shared"
    assert isolation_levels_parse(["whole", "whole"]) == "whole"


@pytest.mark.parametrize("values", [
    [], ["any"], ["Whole"], [""], ["shared\x00"], ["x" * 10_000], "shared", [1], [None], {"shared": True},
    ["shared"] * 4,
])
def test_levels_refuse_anything_else(values):
    with pytest.raises(BidRejected) as refused:
        isolation_levels_parse(values)
    assert refused.value.code == "isolation_levels_invalid"
    assert str(refused.value.message) == (
        "Choose at least one isolation level: container, shared server or whole server."
    )
