"""Tests: real PostgreSQL and Redis on their standard local ports, as on the CI machine."""

import os

import dj_database_url

from .base import *  # noqa: F403
from .base import BASE_DIR, INSTALLED_APPS, PREPARE_THRESHOLD

SECRET_KEY = "tests-only-not-a-secret"  # noqa: S105
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/everxcloud")
    )
}
DATABASES["default"]["OPTIONS"] = {"prepare_threshold": PREPARE_THRESHOLD}
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
CACHES = {
    "default": {
        "BACKEND": "marketplace.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "everxcloud-test",
    }
}
CELERY_BROKER_URL = REDIS_URL
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
VIES_URL = ""  # tests never leave this machine
RENTAL_SSH_PROBE_PRIVATE_ADDRESSES = True  # the rentals' sshds of the tests listen on 127.0.0.1
CELERY_TASK_ALWAYS_EAGER = True

PAYMENT_SANDBOX_ENABLED = True
# The tests load the demo data too (the demo app's loaders, the demo rates for `load_fx_rates`).
INSTALLED_APPS = [*INSTALLED_APPS, "demo"]
DEMO_DATA_ALLOWED = True
FX_RATES_DEFAULT_FILE = BASE_DIR / "demo" / "data" / "demo_fx_rates.json"
SITE_URL = "http://testserver"
MFA_TOTP_TOLERANCE = 1  # browser tests type a code computed a moment earlier
