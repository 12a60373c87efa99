"""Whether a buyer can pay the first hour of a match, asked of billing without importing it.

The exchange matches a bid only if its buyer's balance covers the first hour at the trade
price, but balances belong to billing, which sits above the exchange (imports point
accounts, catalog <- sellers <- exchange <- billing). So billing registers its check here,
in its AppConfig.ready:

    from exchange.payments import first_hour_check_register
    first_hour_check_register(rental_first_hour_payable)

The check runs inside the matching transaction, while the market lock of the GPU model is
held: it must only read (never lock a wallet row, which comes before the market lock in the
lock order) and must not write. Until something is registered nothing is payable, so nothing
ever trades unpaid.
"""

from collections.abc import Callable
from decimal import Decimal

FirstHourCheck = Callable[..., bool]

# The registered check: fn(*, buyer_id: int, price_usd: Decimal, gpus: int) -> bool.
_check: FirstHourCheck | None = None


def first_hour_check_register(fn: FirstHourCheck) -> FirstHourCheck:
    """Install `fn` as the first-hour check (replacing any earlier one). Returns `fn`, so it can
    decorate."""
    global _check
    _check = fn
    return fn


def first_hour_payable(*, buyer_id: int, price_usd: Decimal, gpus: int) -> bool:
    """True when the buyer can pay one hour of `gpus` GPUs at `price_usd` per GPU-hour.
    False when no check is registered."""
    check = _check
    if check is None:
        return False
    return bool(check(buyer_id=buyer_id, price_usd=price_usd, gpus=gpus))
