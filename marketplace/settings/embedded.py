"""The embedded default: SQLite, local-memory cache, filesystem broker. Nothing to install."""

import os
import secrets

from .base import *  # noqa: F403
from .base import BASE_DIR, DATABASES, INSTALLED_APPS


def _local_secret_key() -> str:
    """A secret generated once per checkout and kept out of git (see .gitignore)."""
    path = BASE_DIR / ".secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = os.environ.get("SECRET_KEY") or _local_secret_key()

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # SQLite serialises writers; IMMEDIATE takes the write lock at BEGIN so that two
    # writers queue up instead of failing half-way with "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }

BROKER_DIR = BASE_DIR / ".broker"
if not os.environ.get("CELERY_BROKER_URL") and not os.environ.get("REDIS_URL"):
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        # Broadcast tables (worker control) too, rather than a `control/` folder in the checkout.
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
    }
    for folder in ("queue", "processed", "control"):
        (BROKER_DIR / folder).mkdir(parents=True, exist_ok=True)

PAYMENT_SANDBOX_ENABLED = True
# The local demo database: the demo app's loaders, and the demo rates for `load_fx_rates`.
INSTALLED_APPS = [*INSTALLED_APPS, "demo"]
DEMO_DATA_ALLOWED = True
RENTAL_SSH_PROBE_PRIVATE_ADDRESSES = True  # one machine: a local agent's rentals listen on 127.0.0.1
FX_RATES_DEFAULT_FILE = BASE_DIR / "demo" / "data" / "demo_fx_rates.json"
SITE_URL = os.environ.get("SITE_URL", "http://127.0.0.1:8000").rstrip("/")
