"""Helpers of the exchange tests: a stand-in for billing's first-hour check, placing bids, keys."""

import uuid
from decimal import Decimal

from cryptography.hazmat.primitives import serialization

from exchange.models import Market, TimeInForce
from exchange.services import bid_place


def openssh(public_key) -> str:
    return public_key.public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode()


class Balances:
    """Billing's first-hour check, played by a dict of balances in US dollars per buyer id.
    Buyers not in the dict have `default` (plenty, unless a test says otherwise)."""

    def __init__(self, default: Decimal = Decimal("1000000")):
        self.usd: dict[int, Decimal] = {}
        self.default = default
        self.calls: list[tuple[int, Decimal, int]] = []

    def set(self, user, amount: str | Decimal) -> None:
        self.usd[user.pk] = Decimal(amount)

    def __call__(self, *, buyer_id: int, price_usd: Decimal, gpus: int) -> bool:
        self.calls.append((buyer_id, price_usd, gpus))
        return self.usd.get(buyer_id, self.default) >= price_usd * gpus


def market_set(is_open: bool) -> None:
    Market.objects.update_or_create(pk=Market.SINGLETON_ID, defaults={"is_open": is_open})


def place(buyer, gpu, key, *, gpus=1, price="2.00", tif=TimeInForce.BID, token=None, **extra):
    """bid_place with the usual arguments of these tests."""
    return bid_place(
        buyer=buyer, gpu_model_id=gpu.pk, gpus=gpus, max_price_usd=Decimal(price), time_in_force=tif,
        ssh_public_key=key, form_token=token or uuid.uuid4(), **extra,
    )
