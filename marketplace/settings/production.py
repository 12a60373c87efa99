"""Production: every setting from the environment, no default secrets, hardened transport."""

import os

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F403
from .base import BASE_DIR, PREPARE_THRESHOLD, env_bool


def required(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise ImproperlyConfigured(f"The environment variable {name} must be set in production.")
    return value


SECRET_KEY = required("SECRET_KEY")
# Links in emails sent by workers, where no request tells the address.
SITE_URL = required("SITE_URL").rstrip("/")
DEBUG = False

# PostgreSQL and Redis, never the embedded fallbacks: on SQLite the row locks, the ledger's triggers
# and its CHECKs are missing, and a per-process memory cache gives each process its own rate limits.
DATABASES = {"default": dj_database_url.parse(required("DATABASE_URL"), conn_max_age=0)}
if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
    raise ImproperlyConfigured("DATABASE_URL must name a PostgreSQL database (postgres://...) in production.")
DATABASES["default"].setdefault("OPTIONS", {}).update(
    {"pool": {"min_size": 2, "max_size": 10}, "prepare_threshold": PREPARE_THRESHOLD}
)

# base.py builds the Redis cache from the same variable.
REDIS_URL = required("REDIS_URL")
if not REDIS_URL.startswith(("redis://", "rediss://")):
    raise ImproperlyConfigured("REDIS_URL must name a Redis server (redis://...) in production.")

STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
STATIC_ROOT = BASE_DIR / "staticfiles"
WHITENOISE_USE_FINDERS = False

SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "31536000"))
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
# /healthz is probed over plain HTTP by the load balancer.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]

EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "587"))
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", True)
PAYMENT_SANDBOX_ENABLED = False  # never in production, whatever the environment says

# Celery: Redis is the broker (the cache's Redis unless CELERY_BROKER_URL names another), with the
# visibility timeout of base.py; workers per queue ("billing", "default") and exactly one beat.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or REDIS_URL
if not CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    raise ImproperlyConfigured("Production uses Redis as Celery's broker (CELERY_BROKER_URL or REDIS_URL).")
CELERY_TASK_ALWAYS_EAGER = False
