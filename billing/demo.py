"""A demo buyer for `make run`: an account with a topped-up wallet and one running rental, so the
embedded worker has something to charge every hour without anyone acting."""

import uuid
from decimal import Decimal

from allauth.account.models import EmailAddress
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from django.db import transaction

from accounts.models import User
from accounts.services import profile_ensure, profile_update
from catalog.models import GpuModel
from exchange.models import TimeInForce
from exchange.selectors import best_asks_by_size

from .orders import order_place
from .services import top_up_create, top_up_pay_sandbox

DEMO_EMAIL = "demo@everxcloud.example"
# The embedded default only (a local demo database); production never runs this command.
DEMO_PASSWORD = "gpu-hours-demo"  # noqa: S105
DEMO_GPU = "rtx-4090"


def _demo_ssh_key() -> str:
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    return key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def demo_buyer_load() -> User | None:
    """Create the demo buyer once: 100 EUR from the sandbox and one RTX 4090 rented at the best
    offer. Returns None when the demo buyer exists already (running it again changes nothing)."""
    if User.objects.filter(email=DEMO_EMAIL).exists():
        return None
    with transaction.atomic():
        user = User.objects.create_user(email=DEMO_EMAIL, password=DEMO_PASSWORD)
        EmailAddress.objects.create(user=user, email=DEMO_EMAIL, primary=True, verified=True)
        profile_ensure(user=user, language="en")
        profile_update(user=user, fields={
            "name": "Demo Buyer", "billing_country": "PT", "address": "Rua Augusta 1, Lisboa",
        })
    top_up = top_up_create(
        user=user, amount_text="100", currency="EUR", provider="sandbox", form_token=uuid.uuid4()
    )
    top_up_pay_sandbox(user=user, top_up_id=top_up.pk)
    gpu = GpuModel.objects.filter(slug=DEMO_GPU).first()
    price = best_asks_by_size(gpu_model_id=gpu.pk).get(1) if gpu else None
    if price is not None:
        order_place(
            buyer=user, gpu_model_id=gpu.pk, gpus=1, max_price_usd=Decimal(price),
            time_in_force=TimeInForce.BUY_NOW, ssh_public_key=_demo_ssh_key(), form_token=uuid.uuid4(),
        )
    return user
