"""Offers changing, rentals ending, and what billing reads of rentals."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection, transaction

from exchange.exceptions import OfferNotFound, OfferRejected, RentalEnded, RentalNotFound
from exchange.matching import MARKET_LOCK_NAMESPACE
from exchange.models import Bid, BidState, Offer, Rental, RentalState
from exchange.services import (
    offer_post,
    offer_update,
    offer_withdraw,
    rental_end,
    rental_hours_used,
    rental_mark_paid,
    rental_stop,
    rentals_due,
    rentals_mark_paid,
)
from sellers.models import Server
from tests.factories import GpuModelFactory, ServerFactory, UserFactory

from .support import login_ready, place

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("balances", "open_market")]

D = Decimal


@pytest.fixture
def gpu():
    return GpuModelFactory()


def rented(server: Server) -> int:
    server.refresh_from_db()
    return server.gpus_rented


def prices():
    return list(Rental.objects.order_by("id").values_list("bid_id", "price_usd"))


# --- offers -----------------------------------------------------------------------------------


def test_a_server_has_one_active_offer(gpu):
    server = ServerFactory(gpu_model=gpu, gpu_count=8)
    offer_post(server=server, gpus=4, price_usd=D("2.00"))
    with pytest.raises(OfferRejected) as refused:
        offer_post(server=server, gpus=2, price_usd=D("1.00"))
    assert refused.value.code == "offer_exists"
    assert Offer.objects.count() == 1


def test_a_cheaper_offer_matches_resting_bids_at_their_price(gpu, ssh_key):
    server = ServerFactory(gpu_model=gpu, gpu_count=8)
    offer = offer_post(server=server, gpus=8, price_usd=D("3.00"))
    bid = place(UserFactory(), gpu, ssh_key, gpus=2, price="2.50").bid
    assert not Rental.objects.exists()

    offer_update(offer_id=offer.pk, price_usd=D("3.10"))  # dearer: nothing to match
    assert not Rental.objects.exists()
    updated = offer_update(offer_id=offer.pk, price_usd=D("2.40"))

    assert updated.price_usd == D("2.40")
    assert prices() == [(bid.pk, D("2.50"))]
    assert rented(server) == 2


def test_a_grown_offer_matches_resting_bids(gpu, ssh_key):
    server = ServerFactory(gpu_model=gpu, gpu_count=8)
    offer = offer_post(server=server, gpus=2, price_usd=D("1.00"))
    bid = place(UserFactory(), gpu, ssh_key, gpus=4, price="1.50").bid
    assert not Rental.objects.exists()
    offer_update(offer_id=offer.pk, gpus=4)
    assert prices() == [(bid.pk, D("1.50"))]


def test_offer_update_validates_and_refuses_withdrawn_offers(gpu):
    server = ServerFactory(gpu_model=gpu, gpu_count=4)
    offer = offer_post(server=server, gpus=2, price_usd=D("1.00"))
    for changes, code in [
        ({"gpus": 5}, "gpus_out_of_range"), ({"gpus": 0}, "gpus_out_of_range"),
        ({"price_usd": D("1.001")}, "price_off_tick"), ({"price_usd": D("0")}, "price_out_of_range"),
        ({"price_usd": D("100.01")}, "price_out_of_range"),
    ]:
        with pytest.raises(OfferRejected) as refused:
            offer_update(offer_id=offer.pk, **changes)
        assert refused.value.code == code
    offer.refresh_from_db()
    assert (offer.gpus_offered, offer.price_usd) == (2, D("1.00"))
    offer_withdraw(offer_id=offer.pk)
    with pytest.raises(OfferRejected) as refused:
        offer_update(offer_id=offer.pk, gpus=1)
    assert refused.value.code == "offer_not_active"
    with pytest.raises(OfferNotFound):
        offer_update(offer_id=offer.pk + 1000, gpus=1)


def test_withdrawn_offers_stop_trading_and_running_rentals_keep_their_price(gpu, ssh_key):
    server = ServerFactory(gpu_model=gpu, gpu_count=4)
    offer = offer_post(server=server, gpus=4, price_usd=D("1.00"))
    rental = place(UserFactory(), gpu, ssh_key, price="2.00").rental
    withdrawn = offer_withdraw(offer_id=offer.pk)
    assert withdrawn.state == "withdrawn"
    assert offer_withdraw(offer_id=offer.pk).state == "withdrawn"  # again: nothing changes

    assert place(UserFactory(), gpu, ssh_key, price="5.00").rental is None
    rental.refresh_from_db()
    assert (rental.state, rental.price_usd) == (RentalState.STARTING, D("1.00"))
    # A new offer on the same server counts the GPUs the old one's rental still holds.
    offer_post(server=server, gpus=4, price_usd=D("4.00"))
    assert rented(server) == 2  # 1 from before, 1 for the bid at 5.00 just now


# --- rentals ----------------------------------------------------------------------------------


def test_stopping_a_rental_frees_its_gpus_and_matches_the_next_bid(gpu, ssh_key):
    server = ServerFactory(gpu_model=gpu, gpu_count=1)
    offer_post(server=server, gpus=1, price_usd=D("1.00"))
    first = place(UserFactory(), gpu, ssh_key, price="2.00")
    waiting = place(UserFactory(), gpu, ssh_key, price="3.00").bid
    assert waiting.state == BidState.OPEN and rented(server) == 1

    stopped = rental_stop(buyer=first.bid.buyer, rental_id=first.rental.pk)

    assert (stopped.state, stopped.end_reason) == (RentalState.ENDED, "stopped_by_buyer")
    assert stopped.ended_at is not None
    # Both orders were resting; the offer is older than the bid, so its price.
    assert prices() == [(first.bid.pk, D("1.00")), (waiting.pk, D("1.00"))]
    assert rented(server) == 1
    assert Bid.objects.get(pk=waiting.pk).state == BidState.FILLED


def test_someone_elses_or_an_ended_rental_cannot_be_stopped(gpu, ssh_key):
    server = ServerFactory(gpu_model=gpu, gpu_count=2)
    offer_post(server=server, gpus=2, price_usd=D("1.00"))
    placed = place(UserFactory(), gpu, ssh_key)
    with pytest.raises(RentalNotFound):
        rental_stop(buyer=UserFactory(), rental_id=placed.rental.pk)
    with pytest.raises(RentalNotFound):
        rental_stop(buyer=placed.bid.buyer, rental_id=placed.rental.pk + 1000)
    assert rented(server) == 1
    rental_stop(buyer=placed.bid.buyer, rental_id=placed.rental.pk)
    with pytest.raises(RentalNotFound):
        rental_stop(buyer=placed.bid.buyer, rental_id=placed.rental.pk)
    assert rented(server) == 0


def test_rental_end_is_once_and_refuses_unknown_reasons(gpu, ssh_key):
    server = ServerFactory(gpu_model=gpu, gpu_count=2)
    offer_post(server=server, gpus=2, price_usd=D("1.00"))
    rental = place(UserFactory(), gpu, ssh_key, gpus=2).rental
    with pytest.raises(ValueError):
        rental_end(rental_id=rental.pk, reason="bored")
    at = datetime(2030, 1, 1, tzinfo=UTC)
    ended = rental_end(rental_id=rental.pk, reason="server_failure", at=at)
    again = rental_end(rental_id=rental.pk, reason="operator")
    assert (again.end_reason, again.ended_at) == ("server_failure", at) == (ended.end_reason, ended.ended_at)
    assert rented(server) == 0
    with pytest.raises(RentalEnded):
        rental_mark_paid(rental_id=rental.pk, paid_through=at)


def test_rentals_marked_paid_hours_further_together_all_or_none(gpu, ssh_key):
    offer_post(server=ServerFactory(gpu_model=gpu, gpu_count=8), gpus=8, price_usd=D("1.00"))
    first, second, ended = (place(UserFactory(), gpu, ssh_key).rental for _ in range(3))
    at = first.started_at + timedelta(hours=1)
    rental_end(rental_id=ended.pk, reason="operator")

    with pytest.raises(RentalEnded):
        rentals_mark_paid(hours={first.pk: 1, ended.pk: 1})
    first.refresh_from_db()
    assert (first.state, first.paid_through) == (RentalState.STARTING, None)

    login_ready(second)  # a paid rental runs once its login is ready, not before
    rentals_mark_paid(hours={first.pk: 1, second.pk: 2})
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.state, first.paid_through) == (RentalState.STARTING, at)
    assert (second.state, second.paid_through) == (
        RentalState.RUNNING, second.started_at + timedelta(hours=2)
    )


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite serialises writers instead")
def test_rental_end_takes_the_market_lock_of_its_gpu_model(gpu, ssh_key):
    server = ServerFactory(gpu_model=gpu, gpu_count=2)
    offer_post(server=server, gpus=2, price_usd=D("1.00"))
    rental = place(UserFactory(), gpu, ssh_key).rental
    with transaction.atomic(), connection.cursor() as cursor:
        rental_end(rental_id=rental.pk, reason="operator")
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
            "AND classid = %s AND objid = %s AND objsubid = 2",
            [MARKET_LOCK_NAMESPACE, gpu.pk],
        )
        assert cursor.fetchone()[0] == 1


def test_rentals_due_and_hours_used(gpu, ssh_key):
    server = ServerFactory(gpu_model=gpu, gpu_count=8)
    offer_post(server=server, gpus=8, price_usd=D("1.00"))
    starting, running, paid_ahead, ended, undelivered = (
        place(UserFactory(), gpu, ssh_key).rental for _ in range(5)
    )
    now = starting.started_at + timedelta(minutes=90)
    login_ready(running)
    login_ready(paid_ahead)
    # Paid but its login never reported ready: no second hour (it ends "not delivered" first).
    rental_mark_paid(rental_id=undelivered.pk, paid_through=undelivered.started_at + timedelta(hours=1))
    rental_mark_paid(rental_id=running.pk, paid_through=running.started_at + timedelta(hours=1))
    rental_mark_paid(rental_id=paid_ahead.pk, paid_through=paid_ahead.started_at + timedelta(hours=2))
    rental_end(rental_id=ended.pk, reason="operator")

    assert list(rentals_due(now=now)) == [starting, running]

    start = starting.started_at
    assert rental_hours_used(starting, start - timedelta(seconds=1)) == 0
    assert rental_hours_used(starting, start) == 1
    assert rental_hours_used(starting, start + timedelta(minutes=59)) == 1
    assert rental_hours_used(starting, start + timedelta(hours=1)) == 2
    starting.ended_at = start + timedelta(hours=2)
    assert rental_hours_used(starting, start + timedelta(hours=5)) == 2
