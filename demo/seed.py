"""The demo data of `make run`: an order book, a buyer with a running rental, operators with
two-factor authentication and work waiting for them.

Every loader first checks `settings.DEMO_DATA_ALLOWED` (True only in the embedded and test
settings) and writes nothing when it is off. Each is safe to run again: what exists is left alone.
"""

import json
import uuid
from decimal import Decimal
from pathlib import Path

from allauth.account.models import EmailAddress
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from django.apps import apps
from django.conf import settings
from django.contrib.auth.models import Group
from django.core.management.base import CommandError
from django.db import transaction
from django.utils import timezone

from accounts.models import User
from accounts.roles import FINANCE, SUPPORT, operator_groups_sync
from accounts.services import profile_ensure, profile_update
from billing.services import order_place, top_up_create, top_up_pay_sandbox
from catalog.models import GpuModel
from exchange.models import Offer, TimeInForce
from exchange.selectors import best_asks_by_size
from exchange.services import offer_post
from sellers.models import ContainerTemplate, Server, ServerStatus, ServerTemplate
from sellers.services import application_save, application_submit, seller_ensure, server_ensure

from .agents import demo_agent_heartbeat, demo_agents_heartbeat, demo_sellers
from .totp import totp_activate, totp_code

DATA = Path(__file__).resolve().parent / "data"
DEMO_ORDERBOOK_PATH = DATA / "demo_orderbook.json"
DEMO_RATES_PATH = DATA / "demo_fx_rates.json"

DEMO_EMAIL = "demo@everxcloud.example"
# The local demo database only: the loaders refuse to run where DEMO_DATA_ALLOWED is off.
DEMO_PASSWORD = "gpu-hours-demo"  # noqa: S105
DEMO_GPU = "rtx-4090"
# A fixed TOTP secret for the demo operators only, so that someone trying `make run` can sign in to
# the admin with `manage.py demo_totp_code` instead of an authenticator app.
DEMO_TOTP_SECRET = "EVXCLOUDDEMOOPERATORS2FA"  # noqa: S105
DEMO_OPERATORS = {
    "ops@everxcloud.example": None,  # superuser: every lever, market and catalog included
    "support@everxcloud.example": SUPPORT,
    "finance@everxcloud.example": FINANCE,
}
DEMO_APPLICANT = "applicant@everxcloud.example"
DEMO_APPLICATION = {
    "legal_name": "Porto Compute Lda", "country": "PT", "registration_number": "514000000",
    "vat_id": "PT501964843", "address": "Avenida dos Aliados 1, Porto",
    "contact_name": "Rita Sousa", "contact_phone": "+351 220 000 000",
    "datacentre_locations": "Porto (PT-1)", "planned_inventory": "4 × L40S",
    "iban": "PT50 0002 0123 1234 5678 9015 4", "account_holder": "Porto Compute Lda",
    "accept_terms": True,
}
REFUSED = (
    "Demo data is only for the local demo database: these settings do not allow it "
    "(DEMO_DATA_ALLOWED is off). Nothing was written."
)


def demo_data_require() -> None:
    """Raise `CommandError` unless the settings allow demo data (embedded and test only)."""
    if not settings.DEMO_DATA_ALLOWED:
        raise CommandError(REFUSED)


# --- the order book -----------------------------------------------------------------------------


@transaction.atomic
def demo_orderbook_load(*, path: Path = DEMO_ORDERBOOK_PATH) -> int:
    """Create the demo sellers, servers and asks that are missing; returns the asks created.
    Each server's simulated agent sends its first heartbeat before the ask, so the server is
    verified and in the book (demo.agents). A server that already has an ask is left alone, so
    loading twice posts nothing new."""
    demo_data_require()
    data = json.loads(path.read_text(encoding="utf-8"))
    sellers = {entry["slug"]: seller_ensure(**entry) for entry in data["sellers"]}
    templates = {entry["slug"]: _demo_template_ensure(entry) for entry in data.get("templates", [])}
    gpus = {gpu.slug: gpu for gpu in GpuModel.objects.all()}
    posted = 0
    for entry in data["servers"]:
        gpu = gpus.get(entry["gpu"])
        if gpu is None:
            continue
        server = server_ensure(
            seller=sellers[entry["seller"]], name=entry["name"], gpu_model=gpu,
            gpu_count=entry["gpus"], region=entry["region"], status=ServerStatus.ACTIVE,
            host=f"{entry['name']}.{entry['seller']}.demo.everxcloud.example",
        )
        demo_agent_heartbeat(server=server)
        _demo_isolation_set(server, entry["isolation"], templates=templates)
        if Offer.objects.filter(server=server).exists():
            continue
        offer_post(
            server=server, gpus=entry["offer"]["gpus"],
            price_usd=Decimal(entry["offer"]["price_usd"]),
        )
        posted += 1
    return posted


def _demo_template_ensure(entry: dict) -> ContainerTemplate:
    """A published container template of the demo file (operators curate them in the admin)."""
    template, _created = ContainerTemplate.objects.get_or_create(slug=entry["slug"], defaults={
        **{f"name_{language}": text for language, text in entry["name"].items()},
        **{f"description_{language}": text for language, text in entry["description"].items()},
        "image": entry["image"], "ports": entry["ports"], "min_driver": entry["min_driver"],
        "disk_gb": entry["disk_gb"], "published": True, "is_default": entry["default"],
        "position": entry["position"], "token_env": entry.get("token_env", ""),
    })
    return template


def _demo_isolation_set(server: Server, isolation: dict, *, templates: dict) -> None:
    """The level, sellable hardware and templates held the demo file states for a server: on the
    exchange its agent's isolation report sets them (sellers.isolation); the demo's agents report
    no hardware."""
    server.isolation_level = isolation["level"]
    server.sellable_cpu_cores = isolation["cpu_cores"]
    server.sellable_memory_mib = isolation["memory_gib"] * 1024
    server.sellable_disk_gb = isolation["disk_gb"]
    server.save(update_fields=[
        "isolation_level", "sellable_cpu_cores", "sellable_memory_mib", "sellable_disk_gb",
    ])
    for slug in isolation.get("templates", []):
        ServerTemplate.objects.get_or_create(server=server, template=templates[slug],
                                             defaults={"since": timezone.now()})


# --- the buyer ----------------------------------------------------------------------------------


def _demo_ssh_key() -> str:
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    return key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def _demo_user_create(*, email: str, language: str, **fields) -> User:
    """A user with a verified address and a profile, as if they had signed up and confirmed."""
    user = User.objects.create_user(email=email, password=DEMO_PASSWORD, **fields)
    EmailAddress.objects.create(user=user, email=email, primary=True, verified=True)
    profile_ensure(user=user, language=language)
    return user


def demo_buyer_load() -> User | None:
    """Create the demo buyer once: 100 EUR from the sandbox and one RTX 4090 rented at the best
    offer. Returns None when the demo buyer exists already (running it again changes nothing)."""
    demo_data_require()
    if User.objects.filter(email=DEMO_EMAIL).exists():
        return None
    with transaction.atomic():
        user = _demo_user_create(email=DEMO_EMAIL, language="en")
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
        demo_agents_run()  # its server's simulated agent creates the login: the rental runs
    return user


def demo_agents_run() -> int:
    """A heartbeat of every demo server's simulated agent (the `demo.agents_heartbeat` task, every
    15 seconds on `make run`); returns how many servers sent one."""
    demo_data_require()
    return demo_agents_heartbeat(seller_slugs=demo_sellers(DEMO_ORDERBOOK_PATH))


# --- operators, and work waiting for them -------------------------------------------------------


def demo_operators_load() -> list[User]:
    """Create the demo operators (once) with two-factor authentication on, a pending bank transfer
    of the demo buyer to credit, and a submitted seller application to review."""
    demo_data_require()
    created = []
    operator_groups_sync(apps)
    for email, role in DEMO_OPERATORS.items():
        if User.objects.filter(email=email).exists():
            continue
        with transaction.atomic():
            user = _demo_user_create(email=email, language="en", is_staff=True, is_superuser=role is None)
            if role is not None:
                user.groups.add(Group.objects.get(name=role))
            totp_activate(user=user, secret=DEMO_TOTP_SECRET)
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
        applicant = _demo_user_create(email=DEMO_APPLICANT, language="pt")
        totp_activate(user=applicant, secret=DEMO_TOTP_SECRET)
        application_save(applicant=applicant, fields=DEMO_APPLICATION)
        application_submit(applicant=applicant)


def demo_totp_code(*, email: str) -> str:
    """The current code of a demo operator or the demo applicant (they share the fixed secret)."""
    demo_data_require()
    if email not in DEMO_OPERATORS and email != DEMO_APPLICANT:
        raise CommandError(f"{email} is not a demo operator.")
    return totp_code(secret=DEMO_TOTP_SECRET)
