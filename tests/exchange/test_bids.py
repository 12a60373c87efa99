"""Placing and cancelling bids: validation (nothing written), idempotency, ownership."""

import uuid
import warnings
from datetime import timedelta
from decimal import Decimal

import pytest
from cryptography.hazmat.primitives.asymmetric import dsa
from django.utils import timezone

from exchange.exceptions import BidNotFound, BidNotOpen, BidRejected
from exchange.models import Bid, BidState, Rental, TimeInForce
from exchange.services import bid_cancel, bid_place, offer_post
from tests.factories import GpuModelFactory, ServerFactory, UserFactory

from .support import market_set, openssh, place

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("balances")]

D = Decimal


@pytest.fixture
def gpu():
    gpu = GpuModelFactory()
    ServerFactory(gpu_model=gpu, gpu_count=4)
    ServerFactory(gpu_model=gpu, gpu_count=16, status="retired")  # not counted: not active
    return gpu


def _dsa_key() -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return openssh(dsa.generate_private_key(key_size=1024).public_key())  # noqa: S505 - SSH's only DSA size


def _placed_nothing():
    return not Bid.objects.exists() and not Rental.objects.exists()


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"price": "2.005"}, "price_off_tick"),
        ({"price": "0"}, "price_out_of_range"),
        ({"price": "0.00"}, "price_out_of_range"),
        ({"price": "-1.00"}, "price_out_of_range"),
        ({"price": "100.01"}, "price_out_of_range"),
        ({"price": "NaN"}, "price_out_of_range"),
        ({"gpus": 3}, "gpus_not_allowed"),
        ({"gpus": 0}, "gpus_not_allowed"),
        ({"gpus": 16}, "gpus_not_allowed"),
        ({"gpus": 8}, "gpus_unavailable"),  # the largest active server has 4
        ({"hours": 0}, "hours_invalid"),
        ({"hours": -3}, "hours_invalid"),
        ({"region": "mars"}, "region_unknown"),
        ({"tif": "good_till_forever"}, "time_in_force_unknown"),
        ({"expires_at": "past"}, "expiry_in_past"),
        ({"expires_at": "future", "tif": TimeInForce.BUY_NOW}, "expiry_not_allowed"),
        ({"gpu": "unknown"}, "gpu_model_unknown"),
        ({"key": "garbage"}, "ssh_key_invalid"),
        ({"key": "dsa"}, "ssh_key_type"),
        ({"key": "rsa1024"}, "ssh_key_too_weak"),
    ],
)
def test_bad_bids_are_refused_and_write_nothing(gpu, ssh_key, ssh_keys, changes, code):
    market_set(True)
    offer_post(server=gpu.servers.get(gpu_count=4), gpus=4, price_usd=D("1.00"))
    expiries = {"past": timezone.now() - timedelta(minutes=1), "future": timezone.now() + timedelta(days=1)}
    keys = {"garbage": "ssh-ed25519 garbage", "dsa": _dsa_key(), "rsa1024": ssh_keys["rsa1024"]}
    arguments = {
        "buyer": UserFactory(), "gpu_model_id": gpu.pk, "gpus": changes.get("gpus", 1),
        "max_price_usd": D(changes.get("price", "2.00")), "region": changes.get("region", ""),
        "hours": changes.get("hours"), "time_in_force": changes.get("tif", TimeInForce.BID),
        "expires_at": expiries.get(changes.get("expires_at")),
        "ssh_public_key": keys.get(changes.get("key"), ssh_key), "form_token": uuid.uuid4(),
    }
    if changes.get("gpu") == "unknown":
        arguments["gpu_model_id"] = gpu.pk + 1000
    with pytest.raises(BidRejected) as refused:
        bid_place(**arguments)
    assert refused.value.code == code
    assert str(refused.value.message)
    assert _placed_nothing()


def test_a_gpu_without_any_active_server_takes_no_bids(ssh_key):
    gpu = GpuModelFactory()
    with pytest.raises(BidRejected) as refused:
        place(UserFactory(), gpu, ssh_key)
    assert refused.value.code == "gpus_unavailable"
    assert _placed_nothing()


def test_float_prices_are_a_programming_error(gpu, ssh_key):
    with pytest.raises(TypeError):
        bid_place(buyer=UserFactory(), gpu_model_id=gpu.pk, gpus=1, max_price_usd=2.0,
                  time_in_force=TimeInForce.BID, ssh_public_key=ssh_key, form_token=uuid.uuid4())
    assert _placed_nothing()


def test_the_bid_keeps_what_was_asked(gpu, ssh_key):
    expires = timezone.now() + timedelta(days=2)
    buyer = UserFactory()
    bid = place(buyer, gpu, f"  {ssh_key}  \n", gpus=4, price="12.34", hours=10, region="europe",
                expires_at=expires).bid
    bid.refresh_from_db()
    assert (bid.buyer_id, bid.gpu_model_id, bid.gpus, bid.max_price_usd, bid.hours, bid.region) == (
        buyer.pk, gpu.pk, 4, D("12.34"), 10, "europe"
    )
    assert (bid.state, bid.time_in_force, bid.expires_at, bid.ssh_public_key) == (
        "open", "bid", expires, ssh_key
    )


def test_the_same_form_token_places_one_bid(gpu, ssh_key):
    market_set(True)
    offer_post(server=gpu.servers.get(gpu_count=4), gpus=4, price_usd=D("1.00"))
    buyer, token = UserFactory(), uuid.uuid4()
    first = place(buyer, gpu, ssh_key, token=token, tif=TimeInForce.BUY_NOW)
    again = place(buyer, gpu, ssh_key, token=token, tif=TimeInForce.BUY_NOW, price="3.00")
    assert again.bid.pk == first.bid.pk and again.rental.pk == first.rental.pk
    assert Bid.objects.count() == 1 and Rental.objects.count() == 1
    # Another buyer may send the same token: tokens are per buyer.
    assert place(UserFactory(), gpu, ssh_key, token=token).bid.pk != first.bid.pk


def test_cancel_own_open_bid(gpu, ssh_key):
    buyer = UserFactory()
    bid = place(buyer, gpu, ssh_key).bid
    cancelled = bid_cancel(buyer=buyer, bid_id=bid.pk)
    assert (cancelled.state, cancelled.cancel_reason) == ("cancelled", "buyer")
    with pytest.raises(BidNotOpen):
        bid_cancel(buyer=buyer, bid_id=bid.pk)


def test_someone_elses_or_unknown_bid_is_not_found(gpu, ssh_key):
    bid = place(UserFactory(), gpu, ssh_key).bid
    with pytest.raises(BidNotFound):
        bid_cancel(buyer=UserFactory(), bid_id=bid.pk)
    with pytest.raises(BidNotFound):
        bid_cancel(buyer=bid.buyer, bid_id=bid.pk + 1000)
    assert Bid.objects.get(pk=bid.pk).state == BidState.OPEN


def test_a_filled_bid_cannot_be_cancelled(gpu, ssh_key):
    market_set(True)
    offer_post(server=gpu.servers.get(gpu_count=4), gpus=4, price_usd=D("1.00"))
    placed = place(UserFactory(), gpu, ssh_key)
    with pytest.raises(BidNotOpen):
        bid_cancel(buyer=placed.bid.buyer, bid_id=placed.bid.pk)
    assert Bid.objects.get(pk=placed.bid.pk).state == BidState.FILLED
