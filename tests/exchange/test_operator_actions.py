"""Operators acting on the exchange: suspending and reinstating a seller, opening and closing the
market (superusers only), and the opening preview that shows what opening would match."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.utils import timezone

from accounts.exceptions import OperatorNotAllowed, ReasonRequired
from accounts.models import AuditAction, AuditEntry
from exchange.exceptions import OfferRejected
from exchange.models import Bid, BidCancelReason, BidState, Market, Offer, OfferState, Rental, RentalState
from exchange.selectors import market_is_open
from exchange.services import (
    OpeningTrade,
    market_close,
    market_open,
    market_open_preview,
    offer_post,
    offer_update,
    seller_reinstate,
    seller_suspend,
)
from sellers.exceptions import SellerStateInvalid
from sellers.models import Seller, Server
from tests.accounts.support import audit_log
from tests.billing.support import buyer_with
from tests.factories import (
    BidFactory,
    GpuModelFactory,
    OfferFactory,
    RentalFactory,
    SellerFactory,
    ServerFactory,
    operator_make,
)

from .support import market_set, place

pytestmark = pytest.mark.django_db

D = Decimal


@pytest.fixture
def support():
    return operator_make("support")


def book() -> tuple:
    """The order book, the rentals and the sellers' suspensions, and the audit log."""
    return (
        list(Offer.objects.order_by("pk").values_list("pk", "state", "gpus_offered", "price_usd")),
        list(Bid.objects.order_by("pk").values_list("pk", "state", "cancel_reason")),
        list(Rental.objects.order_by("pk").values_list("pk", "state", "price_usd")),
        list(Server.objects.order_by("pk").values_list("pk", "gpus_rented", "status")),
        list(Seller.objects.order_by("pk").values_list("pk", "suspended_at")),
        list(Market.objects.values_list("is_open")),
        audit_log(),
    )


# --- suspending a seller ----------------------------------------------------------------------------


@pytest.fixture
def seller_book():
    """A seller with offers on servers of two GPU models (one with a running rental) and an offer
    already withdrawn; another seller with an offer of the same model."""
    seller = SellerFactory(name="Alpha GPU Lda")
    h100, a100 = GpuModelFactory(), GpuModelFactory()
    busy = OfferFactory(server=ServerFactory(seller=seller, gpu_model=h100), gpus_offered=8)
    other_model = OfferFactory(server=ServerFactory(seller=seller, gpu_model=a100), gpus_offered=4)
    OfferFactory(server=ServerFactory(seller=seller, gpu_model=h100), state=OfferState.WITHDRAWN)
    rental = RentalFactory(
        offer=busy, gpus=2, state=RentalState.RUNNING, paid_through=timezone.now() + timedelta(hours=1)
    )
    someone_else = OfferFactory(server=ServerFactory(gpu_model=h100))
    return {"seller": seller, "active": [busy, other_model], "rental": rental, "other": someone_else}


def test_suspending_withdraws_every_active_offer_and_rentals_run_on(support, seller_book):
    seller = seller_book["seller"]
    busy, other_model = seller_book["active"]

    suspended = seller_suspend(seller_id=seller.pk, operator=support, reason=" Fraud report #3 ")

    assert suspended.suspended_at is not None
    assert Seller.objects.get(pk=seller.pk).suspended_at == suspended.suspended_at
    assert set(Offer.objects.filter(server__seller=seller).values_list("state", flat=True)) == {
        OfferState.WITHDRAWN
    }
    assert Offer.objects.get(pk=seller_book["other"].pk).state == OfferState.ACTIVE
    rental = Rental.objects.get(pk=seller_book["rental"].pk)
    assert rental.state == RentalState.RUNNING
    assert Server.objects.get(pk=busy.server_id).gpus_rented == 2
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action, entry.reason) == (
        support, AuditAction.SELLER_SUSPEND, "Fraud report #3"
    )
    assert (entry.target_type.model, entry.target_id, entry.target_repr) == (
        "seller", str(seller.pk), "Alpha GPU Lda"
    )
    withdrawn = sorted([busy.pk, other_model.pk])
    assert entry.before == {"suspended": False, "active_offers": withdrawn}
    assert entry.after == {"suspended": True, "active_offers": [], "withdrawn_offers": withdrawn}


def test_a_seller_without_offers_can_be_suspended(support):
    seller = SellerFactory()
    seller_suspend(seller_id=seller.pk, operator=support, reason="Dormant")
    assert AuditEntry.objects.get().after == {"suspended": True, "active_offers": [], "withdrawn_offers": []}


def test_a_suspended_seller_cannot_post_an_offer(support, seller_book):
    seller = seller_book["seller"]
    seller_suspend(seller_id=seller.pk, operator=support, reason="Fraud")
    idle = ServerFactory(seller=seller, gpu_count=8)
    before = book()

    with pytest.raises(OfferRejected) as refused:
        offer_post(server=idle, gpus=8, price_usd=D("2.00"))

    assert refused.value.code == "seller_suspended"
    assert book() == before


def test_a_suspended_seller_cannot_change_an_offer(support, seller_book):
    seller = seller_book["seller"]
    seller_suspend(seller_id=seller.pk, operator=support, reason="Fraud")
    # An offer that is active all the same (written behind the services' back): it stays as it is.
    stray = OfferFactory(server=ServerFactory(seller=seller), gpus_offered=4, price_usd=D("2.00"))
    before = book()

    for change in ({"price_usd": D("1.50")}, {"gpus": 8}, {"price_usd": D("2.50")}):
        with pytest.raises(OfferRejected) as refused:
            offer_update(offer_id=stray.pk, **change)
        assert refused.value.code == "seller_suspended"

    assert book() == before


def test_suspending_twice_is_refused(support):
    seller = SellerFactory()
    seller_suspend(seller_id=seller.pk, operator=support, reason="Fraud")
    before = book()

    with pytest.raises(SellerStateInvalid) as refused:
        seller_suspend(seller_id=seller.pk, operator=support, reason="Fraud, again")

    assert refused.value.code == "already_suspended"
    assert book() == before


def test_reinstating_lets_the_seller_post_again(support, seller_book, time_machine):
    time_machine.move_to(datetime(2026, 12, 1, 10, 0, tzinfo=UTC), tick=False)
    seller = seller_book["seller"]
    busy = seller_book["active"][0]
    seller_suspend(seller_id=seller.pk, operator=support, reason="Fraud")

    seller_reinstate(seller_id=seller.pk, operator=support, reason=" Cleared by compliance ")

    assert Seller.objects.get(pk=seller.pk).suspended_at is None
    # Withdrawn offers stay withdrawn; the seller posts anew.
    assert Offer.objects.get(pk=busy.pk).state == OfferState.WITHDRAWN
    offer = offer_post(server=ServerFactory(seller=seller, gpu_count=4), gpus=4, price_usd=D("2.00"))
    assert offer.state == OfferState.ACTIVE
    entry = AuditEntry.objects.filter(action=AuditAction.SELLER_REINSTATE).get()
    assert (entry.actor, entry.reason, entry.target_id) == (support, "Cleared by compliance", str(seller.pk))
    assert entry.before == {"suspended": True, "suspended_at": "2026-12-01T10:00:00Z"}
    assert entry.after == {"suspended": False}


def test_reinstating_a_seller_that_is_not_suspended_is_refused(support):
    seller = SellerFactory()
    with pytest.raises(SellerStateInvalid) as refused:
        seller_reinstate(seller_id=seller.pk, operator=support, reason="Why not")
    assert refused.value.code == "not_suspended"
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize("reason", ["", "   ", None])
def test_suspending_or_reinstating_needs_a_reason(support, seller_book, reason):
    seller = seller_book["seller"]
    before = book()
    with pytest.raises(ReasonRequired):
        seller_suspend(seller_id=seller.pk, operator=support, reason=reason)
    assert book() == before

    seller_suspend(seller_id=seller.pk, operator=support, reason="Fraud")
    before = book()
    with pytest.raises(ReasonRequired):
        seller_reinstate(seller_id=seller.pk, operator=support, reason=reason)
    assert book() == before


def test_finance_may_not_suspend_or_reinstate(support, seller_book):
    seller = seller_book["seller"]
    finance = operator_make("finance")
    before = book()
    with pytest.raises(OperatorNotAllowed):
        seller_suspend(seller_id=seller.pk, operator=finance, reason="Fraud")
    assert book() == before

    seller_suspend(seller_id=seller.pk, operator=support, reason="Fraud")
    before = book()
    with pytest.raises(OperatorNotAllowed):
        seller_reinstate(seller_id=seller.pk, operator=finance, reason="Cleared")
    assert book() == before


# --- opening and closing the market -----------------------------------------------------------------


def test_a_superuser_opens_and_closes_the_market_and_both_are_audited():
    market_set(False)
    operator = operator_make()

    market_open(operator=operator, reason=" Launch day ")
    assert market_is_open()
    market_close(operator=operator, reason="Maintenance")
    assert not market_is_open()

    opened, closed = AuditEntry.objects.order_by("pk")
    assert (opened.actor, opened.action, opened.reason) == (operator, AuditAction.MARKET_OPEN, "Launch day")
    assert (opened.before, opened.after) == ({"is_open": False}, {"is_open": True})
    assert opened.target_type.model == "market"
    assert (closed.actor, closed.action, closed.reason) == (operator, AuditAction.MARKET_CLOSE, "Maintenance")
    assert (closed.before, closed.after) == ({"is_open": True}, {"is_open": False})


def test_opening_an_open_market_records_nothing():
    market_set(True)
    market_open(operator=operator_make(), reason="Again")
    assert market_is_open()
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize("role", ["support", "finance"])
def test_support_and_finance_may_not_open_or_close_the_market(role):
    operator = operator_make(role)
    for is_open, action in ((False, market_open), (True, market_close)):
        market_set(is_open)
        before = book()
        with pytest.raises(OperatorNotAllowed):
            action(operator=operator, reason="Launch")
        assert book() == before
        assert market_is_open() is is_open


def test_the_command_opens_and_closes_without_an_operator_or_audit_entry(ssh_key):
    market_set(False)
    gpu = GpuModelFactory()
    offer = OfferFactory(
        server=ServerFactory(gpu_model=gpu, gpu_count=8), gpus_offered=8, price_usd=D("1.50")
    )
    placed = place(buyer_with("USD", "100.00"), gpu, ssh_key, gpus=2, price="2.00")

    made = market_open(by="manage.py market open")

    assert market_is_open()
    assert [(rental.bid_id, rental.offer_id, rental.gpus) for rental in made] == [
        (placed.bid.pk, offer.pk, 2)
    ]
    market_close(by="manage.py market close")
    assert not market_is_open()
    assert not AuditEntry.objects.exists()


# --- the opening preview ----------------------------------------------------------------------------


@pytest.fixture
def closed_book(ssh_key):
    """A closed market with crossing resting bids of funded buyers on two GPU models, a bid that
    cannot cross, a GPU model with nothing to trade, and a crossing bid whose buyer cannot pay."""
    market_set(False)
    h100 = GpuModelFactory(name="H100 preview", position=1)
    a100 = GpuModelFactory(name="A100 preview", position=2)
    GpuModelFactory(name="L4 preview", position=3)
    OfferFactory(server=ServerFactory(gpu_model=h100, gpu_count=8), gpus_offered=8, price_usd=D("1.50"))
    OfferFactory(server=ServerFactory(gpu_model=h100, gpu_count=4), gpus_offered=4, price_usd=D("1.70"))
    OfferFactory(server=ServerFactory(gpu_model=a100, gpu_count=4), gpus_offered=4, price_usd=D("3.00"))
    rich = buyer_with("USD", "500.00")
    for gpu, gpus, price in ((h100, 4, "2.00"), (h100, 2, "1.80"), (h100, 4, "1.75"), (a100, 2, "3.50"),
                             (a100, 1, "2.00")):
        place(rich, gpu, ssh_key, gpus=gpus, price=price)
    broke = BidFactory(buyer=buyer_with("USD", "1.00"), gpu_model=h100, gpus=1, max_price_usd=D("2.50"),
                       state=BidState.OPEN, time_in_force="bid")
    return {"h100": h100, "a100": a100, "broke": broke}


def test_the_preview_shows_what_opening_would_match_and_changes_nothing(
    closed_book, django_capture_on_commit_callbacks
):
    before = book()

    with django_capture_on_commit_callbacks() as callbacks:
        preview = market_open_preview()

    # H100: 4 GPUs at 1.50 and 2 more at 1.50 fill the 8-GPU server's offer but for 2; the 4 at
    # 1.75 take the 4-GPU server at 1.70. A100: 2 GPUs at 3.00; the 2.00 bid does not cross.
    assert preview.trades == [
        OpeningTrade(gpu_model="H100 preview", rentals=3, gpus=10, hourly_usd=D("15.80")),
        OpeningTrade(gpu_model="A100 preview", rentals=1, gpus=2, hourly_usd=D("6.00")),
    ]
    assert preview.bids_cancelled == 1
    assert book() == before
    assert not market_is_open()
    assert not Rental.objects.exists()
    assert Bid.objects.get(pk=closed_book["broke"].pk).state == BidState.OPEN
    assert callbacks == [] and mail.outbox == []


def test_opening_makes_exactly_what_the_preview_showed(closed_book):
    preview = market_open_preview()

    made = market_open(operator=operator_make(), reason="Launch")

    by_model: dict[str, list[Rental]] = {}
    for rental in made:
        by_model.setdefault(rental.gpu_model.name, []).append(rental)
    assert {trade.gpu_model for trade in preview.trades} == set(by_model)
    for trade in preview.trades:
        rentals = by_model[trade.gpu_model]
        assert trade.rentals == len(rentals)
        assert trade.gpus == sum(rental.gpus for rental in rentals)
        assert trade.hourly_usd == sum(rental.price_usd * rental.gpus for rental in rentals)
    assert Rental.objects.count() == len(made) == 4
    broke = Bid.objects.get(pk=closed_book["broke"].pk)
    assert (broke.state, broke.cancel_reason) == (BidState.CANCELLED, BidCancelReason.INSUFFICIENT_BALANCE)
    assert Bid.objects.filter(state=BidState.CANCELLED).count() == preview.bids_cancelled


def test_the_preview_of_an_empty_book_is_empty():
    market_set(False)
    GpuModelFactory()
    preview = market_open_preview()
    assert (preview.trades, preview.bids_cancelled) == ([], 0)
    assert not market_is_open()
