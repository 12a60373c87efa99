"""Fixtures of the exchange tests."""

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from exchange import payments

from .support import Balances, market_set, openssh


@pytest.fixture(scope="session")
def ssh_key() -> str:
    """A fresh ed25519 public key, as a buyer pastes it."""
    return openssh(ed25519.Ed25519PrivateKey.generate().public_key()) + " buyer@laptop"


@pytest.fixture(scope="session")
def ssh_keys() -> dict[str, str]:
    """One fresh public key of each kind the tests need."""
    return {
        "ed25519": openssh(ed25519.Ed25519PrivateKey.generate().public_key()),
        "p256": openssh(ec.generate_private_key(ec.SECP256R1()).public_key()),
        "p384": openssh(ec.generate_private_key(ec.SECP384R1()).public_key()),
        "p521": openssh(ec.generate_private_key(ec.SECP521R1()).public_key()),
        "rsa2048": openssh(rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()),
        # Weak on purpose: the validator must refuse it.
        "rsa1024": openssh(rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()),  # noqa: S505
    }


@pytest.fixture
def balances(monkeypatch) -> Balances:
    """Billing's first-hour check replaced by a dict of balances (everyone rich unless set).
    Not autouse: the page tests of this folder go through real billing."""
    checker = Balances()
    monkeypatch.setattr(payments, "_check", checker)
    return checker


@pytest.fixture
def open_market(db):
    market_set(True)
