"""Helpers of the exchange tests: a stand-in for billing's first-hour check, placing bids, keys,
funded buyers signed in, the bid form as a page sends it, and a server's agent delivering a login."""

import uuid
from decimal import Decimal

from cryptography.hazmat.primitives import serialization
from django.test import Client
from django.utils import timezone

from accounts.models import Wallet
from billing.models import LedgerEntry
from billing.services import top_up_create, top_up_pay_sandbox
from catalog.selectors import gpu_nvidia_smi_names
from exchange.models import Bid, Market, Rental, RentalState, TimeInForce
from exchange.services import agent_heartbeat_receive, bid_place
from exchange.services.agents import GpuReport, HeartbeatReport, LoginReport
from sellers.services import agent_token_create
from tests.factories import ProfileFactory


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


def buyer_with(amount="100", currency="EUR"):
    profile = ProfileFactory(billing_country="US" if currency == "USD" else "PT")
    top_up = top_up_create(user=profile.user, amount_text=amount, currency=currency, provider="sandbox",
                           form_token=uuid.uuid4())
    top_up_pay_sandbox(user=profile.user, top_up_id=top_up.pk)
    return profile.user


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def bid_form(key, **overrides):
    data = {"gpus": "1", "max_price_usd": "2.50", "hours": "", "region": "", "expires_in": "",
            "ssh_public_key": key, "form_token": str(uuid.uuid4())}
    data.update(overrides)
    return data


# A key made with ssh-keygen, and the fingerprint `ssh-keygen -lf` printed for it.
VECTOR_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFrXkXBRUA+dKBjOE4u2cWO/jfw4b44Exy8A93yf490V test@vector"
VECTOR_FINGERPRINT = "SHA256:xv3GIuUInXDBrWh+xKjGhUvId9hZWAYoxo/gut09oAA"


def login_ready(rental) -> None:
    """The server's agent reported the rental's login ready, as its heartbeat records it: the
    rental is delivered, and runs once its first hour is paid."""
    username = f"evx-{rental.pk}"
    Rental.objects.filter(pk=rental.pk).update(delivered_at=timezone.now(), username=username)
    Rental.objects.filter(pk=rental.pk, paid_through__isnull=False, state=RentalState.STARTING).update(
        state=RentalState.RUNNING
    )
    rental.refresh_from_db()


_AGENT_SECRETS: dict[int, str] = {}


def agent_heartbeat(server, *, isolation: dict | None = None) -> None:
    """The server's agent, as the real one behaves: it reports the GPUs as registered (and the
    `isolation` report when given), is told which logins must exist, makes them and reports them
    ready (two heartbeats through the service)."""
    if server.pk not in _AGENT_SECRETS:
        created = agent_token_create(seller=server.seller, server_id=server.pk, user=None)
        _AGENT_SECRETS[server.pk] = created.secret
    gpu = server.gpu_model
    name = next(iter(gpu_nvidia_smi_names(slug=gpu.slug)), f"NVIDIA {gpu.name}")
    gpus = tuple(
        GpuReport(index=index, name=name, memory_total_mib=gpu.memory_gb * 1024, ecc_uncorrected=0)
        for index in range(server.gpu_count)
    )
    logins = ()
    for _ in range(2):
        desired = agent_heartbeat_receive(
            secret=_AGENT_SECRETS[server.pk], address="127.0.0.1",
            report=HeartbeatReport(
                agent_version="1.0.0", sent_at=timezone.now(), gpus=gpus, logins=logins, isolation=isolation
            ),
        )
        logins = tuple(
            LoginReport(rental_id=login.rental_id, username=login.username, state="ready",
                        gpu_indices=tuple(login.gpu_indices))
            for login in desired.logins
        )
    server.refresh_from_db()


def orders_state(*bid_fields: str) -> tuple:
    """What an order may move: bids (with `bid_fields`), rentals, ledger rows and balances."""
    return (
        list(Bid.objects.order_by("pk").values_list("pk", "state", *bid_fields)),
        list(Rental.objects.order_by("pk").values_list("pk", "state")),
        LedgerEntry.objects.count(),
        list(Wallet.objects.order_by("pk").values_list("pk", "balance")),
    )
