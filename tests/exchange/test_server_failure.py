"""The market side of a server failure (`server_failure_apply`): the server's offer leaves the book
before its rentals end, so the GPUs they free are not sold again on the failed server; money is
billing's (tests/billing/test_refunds.py)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import LedgerTransaction
from exchange.models import EndReason, Offer, OfferState, Rental, RentalState
from exchange.services import ServerFailed, server_failure_apply
from sellers.models import Server, ServerStatus
from tests.factories import OfferFactory, RentalFactory

pytestmark = pytest.mark.django_db


def test_the_offer_is_withdrawn_and_every_live_rental_ends_at_the_failure():
    offer = OfferFactory()
    started = timezone.now() - timedelta(minutes=30)
    rentals = [
        RentalFactory(offer=offer, started_at=started, state=RentalState.RUNNING,
                      paid_through=started + timedelta(hours=1))
        for _ in range(2)
    ]
    at = timezone.now() - timedelta(minutes=5)

    failed = server_failure_apply(server_id=offer.server_id, rentals=rentals, at=at)

    assert failed == ServerFailed(withdrawn_offer_id=offer.pk, ended_rental_ids=[r.pk for r in rentals])
    assert Offer.objects.get(pk=offer.pk).state == OfferState.WITHDRAWN
    for rental in Rental.objects.filter(pk__in=failed.ended_rental_ids):
        assert (rental.state, rental.end_reason, rental.ended_at) == (
            RentalState.ENDED, EndReason.SERVER_FAILURE, at
        )
    assert Server.objects.get(pk=offer.server_id).status == ServerStatus.ACTIVE  # operators decide
    assert LedgerTransaction.objects.count() == 0  # the exchange never moves money


def test_a_rental_that_started_after_the_reported_time_ends_when_it_started():
    offer = OfferFactory()
    started = timezone.now() - timedelta(minutes=2)
    rental = RentalFactory(offer=offer, started_at=started, state=RentalState.STARTING)

    server_failure_apply(server_id=offer.server_id, rentals=[rental], at=started - timedelta(minutes=10))

    rental.refresh_from_db()
    assert (rental.state, rental.ended_at) == (RentalState.ENDED, started)


def test_a_server_without_an_offer_or_rentals_changes_nothing():
    offer = OfferFactory(state=OfferState.WITHDRAWN)
    assert server_failure_apply(server_id=offer.server_id, rentals=[], at=timezone.now()) == ServerFailed(
        withdrawn_offer_id=None, ended_rental_ids=[]
    )
