"""Seeding the benchmark databases fast, with rows the services themselves would have written.

Sellers, servers, offers, buyers with funded wallets, bids and rentals are inserted with COPY
(`bench.common.copy_insert`); money reaches the wallets as the ledger would bring it: one
balanced top-up transaction per wallet (the database's deferred triggers check each at commit)
and the cached balance equal to the sum of the wallet's entries.
"""

import random
import uuid
from collections.abc import Sequence
from decimal import Decimal

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import User, Wallet
from billing.ledger import ledger_account_system
from billing.models import LedgerAccount, LedgerEntry, LedgerTransaction
from catalog.models import GpuModel
from exchange.models import Bid, Market, Offer
from marketplace.money import CURRENCIES
from sellers.models import Region, Seller, Server, ServerStatus

from .common import copy_insert

REGIONS = Region.values
CENT = Decimal("0.01")
EMAIL_DOMAIN = "bench.everxcloud.example"


def ssh_key() -> str:
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    text = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return f"{text} bench@everxcloud"


def price(rng: random.Random, low: str, high: str) -> Decimal:
    """A price on the cent tick between `low` and `high`, both included."""
    cents = rng.randint(int(Decimal(low) * 100), int(Decimal(high) * 100))
    return (Decimal(cents) * CENT).quantize(CENT)


def gpu_models() -> list[GpuModel]:
    return list(GpuModel.objects.order_by("position", "id"))


def market_open() -> None:
    """Open the market and bump its version: the seed wrote the book without the services, so
    pages cached before it must not be served after it."""
    Market.objects.update_or_create(
        pk=Market.SINGLETON_ID, defaults={"is_open": True, "version": F("version") + 1},
        create_defaults={"is_open": True, "version": 1},
    )


def sellers(*, count: int, prefix: str) -> list[Seller]:
    return copy_insert(
        Seller(name=f"Bench {prefix} {n} Ltd", slug=f"bench-{prefix}-{n}", country="PT") for n in range(count)
    )


def servers(
    *, seller_list: Sequence[Seller], gpu_model: GpuModel, gpu_counts: Sequence[int], prefix: str,
    rented: Sequence[int] | None = None, levels: Sequence[str] = ("shared",),
) -> list[Server]:
    """One active server per entry of `gpu_counts`, spread over the sellers, the regions and the
    isolation `levels` (shared by default: any bid size fills them, as before levels existed);
    `rented[i]` GPUs of server i held by rentals (0 by default)."""
    verified_at = timezone.now()
    return copy_insert(
        Server(
            seller=seller_list[n % len(seller_list)], gpu_model=gpu_model, name=f"{prefix}-{n}",
            gpu_count=count, gpus_rented=rented[n] if rented else 0, region=REGIONS[n % len(REGIONS)],
            status=ServerStatus.ACTIVE, host=f"{prefix}-{n}.bench.everxcloud.example",
            isolation_level=levels[n % len(levels)],
            agent_verified_at=verified_at,  # as after their agents' first heartbeat: in the book
        )
        for n, count in enumerate(gpu_counts)
    )


def offers(*, server_list: Sequence[Server], prices: Sequence[Decimal], state: str = "active") -> list[Offer]:
    """One offer of all its GPUs per server, at `prices[i]`."""
    return copy_insert(
        Offer(server=server, gpus_offered=server.gpu_count, price_usd=prices[n], state=state)
        for n, server in enumerate(server_list)
    )


@transaction.atomic
def buyers(
    *, count: int, prefix: str, balance: Decimal | None = None, currencies: Sequence[str] = CURRENCIES,
) -> list[User]:
    """`count` buyers; with `balance`, each has a wallet (currencies in turn) holding that much,
    credited by one ledger top-up (wallet account +, the bank's clearing account -)."""
    now = timezone.now()
    users = copy_insert(
        User(email=f"{prefix}-{n}@{EMAIL_DOMAIN}", password="!bench", date_joined=now)  # noqa: S106
        for n in range(count)
    )
    if balance is None:
        return users
    wallets = copy_insert(
        Wallet(user=user, currency=currencies[n % len(currencies)], balance=balance)
        for n, user in enumerate(users)
    )
    clearing = {
        currency: ledger_account_system(kind=LedgerAccount.Kind.PAYMENT_CLEARING, currency=currency,
                                        provider="bank")
        for currency in {wallet.currency for wallet in wallets}
    }
    accounts = copy_insert(
        LedgerAccount(
            code=f"wallet:{wallet.pk}", kind=LedgerAccount.Kind.WALLET, currency=wallet.currency,
            wallet=wallet,
        )
        for wallet in wallets
    )
    postings = copy_insert(
        LedgerTransaction(
            idempotency_key=f"bench:{prefix}:funds:{wallet.pk}", kind=LedgerTransaction.Kind.TOP_UP,
            description="Benchmark funds", created_at=now,
        )
        for wallet in wallets
    )
    entries = []
    for posting, wallet_account in zip(postings, accounts, strict=True):
        for account, amount in ((wallet_account, balance), (clearing[wallet_account.currency], -balance)):
            entries.append(LedgerEntry(transaction=posting, account=account, amount=amount,
                                       currency=account.currency, created_at=now))
    copy_insert(entries)
    return users


def filled_bids(*, rows: Sequence[tuple[int, int, int, Decimal]], key: str) -> list[Bid]:
    """Filled bids as the matching engine leaves them behind rentals: (buyer id, GPU model id,
    GPUs, price) each."""
    return copy_insert(
        Bid(
            buyer_id=buyer_id, gpu_model_id=gpu_model_id, gpus=gpus, max_price_usd=max_price,
            time_in_force="buy_now", ssh_public_key=key, state="filled", form_token=uuid.uuid4(),
        )
        for buyer_id, gpu_model_id, gpus, max_price in rows
    )


def analyze() -> None:
    """Refresh PostgreSQL's statistics after seeding, as a database in service has them: the
    planner picks its indexes by them."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
