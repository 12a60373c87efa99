"""Placing an order from the site: the exchange matches, billing charges the first hour at once.

When the buyer's own order made the match, the rental should be running (or visibly failed)
by the time the page answers; matches made later are charged by the charging run.

One database transaction holds the whole order: the buyer's wallet is locked first (the lock
order of `billing.services.charging`: wallets before the market lock), the exchange validates the
bid against that wallet and matches it, and billing charges the first hour of the rental it made
from the rows already read (`first_hour`). An order either happens whole, charge included, or
not at all.
"""

from dataclasses import dataclass

from django.db import IntegrityError, transaction

from accounts.models import User
from exchange.models import Bid, Rental
from exchange.services import BidPlaced, bid_place, bid_placed_for_form

from .charging import ChargeOutcome, rental_charge_next_hour
from .first_hour import payer_lock, rental_charge_first_hour


@dataclass(frozen=True)
class OrderPlaced:
    bid: Bid
    rental: Rental | None
    charge: ChargeOutcome | None


def order_place(*, buyer: User, **order) -> OrderPlaced:
    """Place a bid (see exchange.services.bid_place for the fields) and charge the first hour of
    the rental it made, if any. Sending the same form twice places one order and one charge."""
    try:
        with transaction.atomic():
            payer = payer_lock(buyer_id=buyer.pk)
            placed = bid_place(buyer=buyer, first_hour_payable=payer.payable, **order)
            if placed.rental is not None and not placed.earlier:
                outcome = rental_charge_first_hour(rental=placed.rental, payer=payer)
                return OrderPlaced(bid=placed.bid, rental=placed.rental, charge=outcome)
    except IntegrityError:
        # The same form at the same moment, by a buyer without a wallet to queue on (the wallet's
        # lock makes a second order wait and find the first): the first order stands.
        placed = bid_placed_for_form(buyer=buyer, form_token=order.get("form_token"))
        if placed is None:
            raise
    return _order_placed(placed)


def _order_placed(placed: BidPlaced) -> OrderPlaced:
    """The order of a bid that made no rental now, after its transaction. The rental of an earlier
    bid of the same form (a resting bid filled since, which the charging run may not have reached
    yet) has its first hour charged here, in a transaction of its own: the rental's row comes
    before the wallet's in the lock order."""
    if placed.rental is None:
        return OrderPlaced(bid=placed.bid, rental=None, charge=None)
    outcome = rental_charge_next_hour(rental_id=placed.rental.pk)
    rental = Rental.objects.select_related("server", "gpu_model").get(pk=placed.rental.pk)
    return OrderPlaced(bid=placed.bid, rental=rental, charge=outcome)
