"""A demo buyer for `make run`: an account with a topped-up wallet and one running rental, so the
embedded worker has something to charge every hour without anyone acting."""

import uuid
from decimal import Decimal

from allauth.account.models import EmailAddress
from allauth.mfa.totp.internal.auth import TOTP, format_hotp_value, hotp_value, yield_hotp_counters_from_time
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from django.db import transaction

from accounts.models import User
from accounts.roles import FINANCE, SUPPORT, operator_groups_sync
from accounts.services import profile_ensure, profile_update
from catalog.models import GpuModel
from exchange.models import TimeInForce
from exchange.selectors import best_asks_by_size
from sellers.services import application_save, application_submit

from .services import order_place, top_up_create, top_up_pay_sandbox

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


# --- operators, and work waiting for them -------------------------------------------------------

# A fixed TOTP secret for the demo operators only, so that someone trying `make run` can sign in to
# the admin with `manage.py demo_totp_code` instead of an authenticator app. Never in production:
# the command refuses to run there.
DEMO_TOTP_SECRET = "EVXCLOUDDEMOOPERATORS2FA"  # noqa: S105
DEMO_OPERATORS = {
    "ops@everxcloud.example": None,  # superuser: every lever, market and catalog included
    "support@everxcloud.example": SUPPORT,
    "finance@everxcloud.example": FINANCE,
}
DEMO_APPLICANT = "applicant@everxcloud.example"


def demo_operators_load() -> list[User]:
    """Create the demo operators (once) with two-factor authentication on, a pending bank transfer
    of the demo buyer to credit, and a submitted seller application to review."""
    from django.apps import apps
    from django.contrib.auth.models import Group

    created = []
    operator_groups_sync(apps)
    for email, role in DEMO_OPERATORS.items():
        if User.objects.filter(email=email).exists():
            continue
        with transaction.atomic():
            user = User.objects.create_user(
                email=email, password=DEMO_PASSWORD, is_staff=True, is_superuser=role is None
            )
            EmailAddress.objects.create(user=user, email=email, primary=True, verified=True)
            profile_ensure(user=user, language="en")
            if role is not None:
                user.groups.add(Group.objects.get(name=role))
            TOTP.activate(user, DEMO_TOTP_SECRET)
        created.append(user)
    if created:
        _demo_work_load()
    return created


def _demo_work_load() -> None:
    buyer = User.objects.filter(email=DEMO_EMAIL).first()
    if buyer is not None:
        top_up_create(user=buyer, amount_text="250", currency="EUR", provider="bank", form_token=uuid.uuid4())
    if User.objects.filter(email=DEMO_APPLICANT).exists():
        return
    with transaction.atomic():
        applicant = User.objects.create_user(email=DEMO_APPLICANT, password=DEMO_PASSWORD)
        EmailAddress.objects.create(user=applicant, email=DEMO_APPLICANT, primary=True, verified=True)
        profile_ensure(user=applicant, language="pt")
        TOTP.activate(applicant, DEMO_TOTP_SECRET)
        application_save(applicant=applicant, fields={
            "legal_name": "Porto Compute Lda", "country": "PT", "registration_number": "514000000",
            "vat_id": "PT501964843", "address": "Avenida dos Aliados 1, Porto",
            "contact_name": "Rita Sousa", "contact_phone": "+351 220 000 000",
            "datacentre_locations": "Porto (PT-1)", "planned_inventory": "4 × L40S",
            "iban": "PT50 0002 0123 1234 5678 9015 4", "account_holder": "Porto Compute Lda",
            "accept_terms": True,
        })
        application_submit(applicant=applicant)


def demo_totp_code(*, email: str) -> str:
    """The current code of a demo operator (their secret is the fixed demo one)."""
    if email not in DEMO_OPERATORS and email != DEMO_APPLICANT:
        raise ValueError(f"{email} is not a demo operator.")
    return format_hotp_value(hotp_value(DEMO_TOTP_SECRET, next(yield_hotp_counters_from_time())))
