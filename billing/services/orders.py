"""Placing an order from the site: the exchange matches, billing charges the first hour at once.

When the buyer's own order made the match, the rental should be running (or visibly failed)
by the time the page answers; matches made later are charged by the charging run.
"""

from dataclasses import dataclass

from accounts.models import User
from exchange.models import Bid, Rental
from exchange.services import bid_place

from .charging import ChargeOutcome, rental_charge_next_hour


@dataclass(frozen=True)
class OrderPlaced:
    bid: Bid
    rental: Rental | None
    charge: ChargeOutcome | None


def order_place(*, buyer: User, **order) -> OrderPlaced:
    """Place a bid (see exchange.services.bid_place for the fields) and charge the first hour of
    the rental it made, if any. Sending the same form twice places one order and one charge."""
    placed = bid_place(buyer=buyer, **order)
    if placed.rental is None:
        return OrderPlaced(bid=placed.bid, rental=None, charge=None)
    outcome = rental_charge_next_hour(rental_id=placed.rental.pk)
    rental = Rental.objects.select_related("server", "gpu_model").get(pk=placed.rental.pk)
    return OrderPlaced(bid=placed.bid, rental=rental, charge=outcome)
