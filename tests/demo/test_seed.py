"""The demo data of `make run`, and the switch that keeps it out of every other database."""

import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from allauth.mfa.models import Authenticator
from django.apps import apps
from django.core.management import CommandError, call_command
from django.test import override_settings

from accounts.models import Wallet
from billing.services import fx_rates_load, fx_rates_read
from demo.seed import (
    DEMO_APPLICANT,
    DEMO_EMAIL,
    DEMO_OPERATORS,
    DEMO_RATES_PATH,
    demo_buyer_load,
    demo_operators_load,
    demo_orderbook_load,
    demo_totp_code,
)
from exchange.models import Market, Offer, Rental
from sellers.models import ApplicationStatus, SellerApplication

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
REFUSED = r"Demo data is only for the local demo database: these settings do not allow it"


@pytest.fixture
def demo_rates():
    rates = fx_rates_read(path=DEMO_RATES_PATH)
    fx_rates_load(rates=rates.rates, valid_from=rates.valid_from, source=rates.source)


def test_the_demo_order_book_loads_once(gpu_catalog):
    posted = demo_orderbook_load()
    assert posted == Offer.objects.count() > 0
    assert demo_orderbook_load() == 0
    assert Offer.objects.count() == posted


def test_demo_buyer_has_a_running_rental_once(demo_book, demo_rates):
    Market.objects.update_or_create(pk=1, defaults={"is_open": True})
    assert demo_buyer_load() is not None
    assert demo_buyer_load() is None
    rental = Rental.objects.get(buyer__email=DEMO_EMAIL)
    # Paid, and its server's simulated agent made the login at once.
    assert (rental.state, rental.price_usd) == ("running", Decimal("0.33")) and rental.username
    # 100 EUR topped up, less the first hour: 0.33 USD at the demo rate of 0.92.
    assert Wallet.objects.get(user__email=DEMO_EMAIL).balance == Decimal("99.70")


def test_demo_operators_sign_in_with_the_printed_code(demo_book, demo_rates, capsys):
    created = demo_operators_load()
    assert sorted(user.email for user in created) == sorted(DEMO_OPERATORS)
    assert demo_operators_load() == []
    application = SellerApplication.objects.get(applicant__email=DEMO_APPLICANT)
    assert application.status == ApplicationStatus.SUBMITTED
    for email in [*DEMO_OPERATORS, DEMO_APPLICANT]:
        call_command("demo_totp_code", email)
        code = capsys.readouterr().out.strip()
        authenticator = Authenticator.objects.get(user__email=email, type=Authenticator.Type.TOTP)
        assert authenticator.wrap().validate_code(code), email  # allauth's own check accepts it
    with pytest.raises(CommandError, match="buyer@example.com is not a demo operator."):
        demo_totp_code(email="buyer@example.com")


def _row_counts() -> dict[str, int]:
    return {model._meta.label: model.objects.count() for model in apps.get_models()}


@pytest.mark.parametrize(
    "command",
    [
        ["load_demo_orderbook"], ["load_demo_buyer"], ["load_demo_operators"],
        ["demo_totp_code", DEMO_APPLICANT],
    ],
)
def test_every_demo_command_refuses_and_writes_nothing_with_the_switch_off(
    gpu_catalog, demo_rates, command, capsys
):
    Market.objects.update_or_create(pk=1, defaults={"is_open": True})
    before = _row_counts()
    with override_settings(DEMO_DATA_ALLOWED=False), pytest.raises(CommandError, match=REFUSED):
        call_command(*command)
    assert _row_counts() == before
    assert capsys.readouterr().out == ""


PRODUCTION_PROBE = """
import django
from django.conf import settings
from django.core.management import CommandError, call_command

django.setup()
print("demo installed:", "demo" in settings.INSTALLED_APPS, "allowed:", settings.DEMO_DATA_ALLOWED)
for name in ("load_demo_orderbook", "load_demo_buyer", "load_demo_operators", "demo_totp_code",
             "load_fx_rates"):
    try:
        call_command(name)
    except CommandError as error:
        print(name, "->", error)
"""


@pytest.mark.django_db(databases=[])
def test_production_has_no_demo_and_no_default_rates():
    # Production runs on PostgreSQL only: a server that is not there (port 9, discard), so that any
    # command touching a database would fail the probe with a connection error.
    env = {
        **os.environ, "DJANGO_SETTINGS_MODULE": "marketplace.settings.production",
        "SECRET_KEY": "production-probe-" + "x" * 50, "SITE_URL": "https://everxcloud.example",
        "DATABASE_URL": "postgres://probe@127.0.0.1:9/production-probe", "REDIS_URL": "redis://127.0.0.1:6379/0",
    }
    result = subprocess.run(
        [sys.executable, "-c", PRODUCTION_PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120, check=True,
    )
    assert result.stdout.splitlines() == [
        "demo installed: False allowed: False",
        "load_demo_orderbook -> Unknown command: 'load_demo_orderbook'",
        "load_demo_buyer -> Unknown command: 'load_demo_buyer'",
        "load_demo_operators -> Unknown command: 'load_demo_operators'",
        "demo_totp_code -> Unknown command: 'demo_totp_code'",
        "load_fx_rates -> Give the rates file to load: manage.py load_fx_rates <file>. "
        "Only the local demo database has default rates.",
    ]
