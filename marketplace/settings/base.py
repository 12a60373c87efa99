"""Settings shared by every runtime. Each value that differs between machines comes from the environment."""

import os
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext_lazy as _

BASE_DIR = Path(__file__).resolve().parent.parent.parent


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if not value:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.isascii() or not value.isdigit():
        raise ImproperlyConfigured(f"The environment variable {name} must be a whole number, not {value!r}.")
    return int(value)


DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "marketplace.admin_apps.EverXCloudAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.sitemaps",
    "django.contrib.humanize",
    "allauth",
    "allauth.account",
    "allauth.mfa",
    "csp",
    "django_htmx",
    "js_lib_htmx",
    "ninja",  # its static files: the Swagger UI bundle of the API reference page
    "marketplace",
    "accounts",
    "catalog",
    "sellers",
    "exchange",
    "billing",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "marketplace.middleware.CSPMiddleware",
    # Shared public pages answered from the cache before sessions, users and messages run.
    "marketplace.page_cache.SharedPagesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    # /api/: its own language (Accept-Language), body guards, rate limits, idempotency keys, and
    # problem details for every error answer below it.
    "marketplace.middleware.ApiMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "marketplace.middleware.PrivateResponsesMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # After sessions, language and user: its refusal is a page of the site like any other.
    "marketplace.middleware.RefuseControlCharactersMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "accounts.middleware.StaffTwoFactorMiddleware",
    # The signed-in user's time zone for every page (their profile, loaded with the user).
    "accounts.middleware.TimeZoneMiddleware",
]

ROOT_URLCONF = "marketplace.urls"
FORM_RENDERER = "marketplace.forms.FormRenderer"
CSRF_FAILURE_VIEW = "marketplace.views.csrf_failure"
WSGI_APPLICATION = "marketplace.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "marketplace.context_processors.site",
            ],
            "builtins": ["marketplace.templatetags.fmt", "django.templatetags.i18n"],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", "").strip() or f"sqlite:///{BASE_DIR / 'db.sqlite3'}",
        conn_max_age=0,
    )
}
# PostgreSQL: the statements of marketplace.sql's prepared cursors (the host agents' heartbeat)
# are parsed and planned once per connection, on their first use. Django's own cursors bind
# their parameters on the client and are never prepared, whatever this says.
PREPARE_THRESHOLD = 0
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_USER_MODEL = "accounts.User"
# Django's and allauth's, each loading the signed-in user with their profile in one query.
AUTHENTICATION_BACKENDS = [
    "accounts.backends.ProfileModelBackend",
    "accounts.backends.ProfileAuthenticationBackend",
]
LOGIN_URL = "account_login"
LOGIN_REDIRECT_URL = "accounts:overview"

# django-allauth: email is the login, and it must be verified before the account is used.
ACCOUNT_LOGIN_METHODS = {"email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "password1*", "password2*"]
ACCOUNT_USER_MODEL_USERNAME_FIELD = None
ACCOUNT_UNIQUE_EMAIL = True
ACCOUNT_EMAIL_VERIFICATION = "mandatory"
ACCOUNT_CONFIRM_EMAIL_ON_GET = False
ACCOUNT_LOGIN_ON_EMAIL_CONFIRMATION = True
ACCOUNT_CHANGE_EMAIL = True
ACCOUNT_LOGOUT_ON_PASSWORD_CHANGE = False
ACCOUNT_EMAIL_SUBJECT_PREFIX = "EverXCloud · "
ACCOUNT_ADAPTER = "accounts.adapter.AccountAdapter"
# A hidden field for the browser's time zone (static/js/site.js fills it).
ACCOUNT_SIGNUP_FORM_CLASS = "accounts.forms.SignupTimeZoneForm"
ACCOUNT_RATE_LIMITS = {
    "login": "30/m/ip",
    "login_failed": "10/m/ip,5/5m/key",
    "signup": "10/m/ip",
    "reset_password": "10/m/ip,3/m/key",
    "reset_password_from_key": "20/m/ip",
    "change_password": "5/m/user",
    "manage_email": "10/m/user",
    "confirm_email": "1/3m/key",
}
# The limits "per ip" count the client's address. Behind a load balancer every connection comes
# from the balancer: name how many proxies of ours stand in front (the client is then the address
# that many entries from the right of X-Forwarded-For, which a client cannot forge), or the header
# in which the one proxy in front puts the client's address. Neither: the connection's own address,
# and every forwarded header is ignored. accounts.adapter counts a request that came round the
# proxies by its connection's address.
ALLAUTH_TRUSTED_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", 0)
ALLAUTH_TRUSTED_CLIENT_IP_HEADER = os.environ.get("TRUSTED_CLIENT_IP_HEADER", "").strip() or None
# VIES (the EU's VAT number check), asked in the background; empty switches it off.
VIES_URL = os.environ.get(
    "VIES_URL", "https://ec.europa.eu/taxation_customs/vies/rest-api/ms/{country}/vat/{number}"
)
# A VAT ID is reverse-charged only while VIES's last answer is "valid" and at most this many days
# old; the daily refresh asks again a day before an answer expires.
VIES_VALID_FOR_DAYS = env_int("VIES_VALID_FOR_DAYS", 30)
MFA_SUPPORTED_TYPES = ["totp", "recovery_codes"]
MFA_TOTP_ISSUER = "EverXCloud"

DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "EverXCloud <no-reply@everxcloud.example>")
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

REDIS_URL = os.environ.get("REDIS_URL", "").strip()
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "marketplace.cache.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "everxcloud",
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
# Public pages are cached under the versions of the books they show (marketplace/page_cache.py):
# prices are never stale. This only bounds how long an edit of the GPU catalog or a deploy takes
# to reach an anonymous visitor.
PAGE_CACHE_SECONDS = int(os.environ.get("PAGE_CACHE_SECONDS", "600"))

LANGUAGE_CODE = "en"
LANGUAGES = [
    ("en", _("English")),
    ("pt", _("Portuguese")),
    ("fr", _("French")),
]
# The switcher names each language in that language, whatever the page's language.
LANGUAGE_NATIVE_NAMES = {"en": "English", "pt": "Português", "fr": "Français"}
# Ours first: they win over the vendored catalogs (see scripts/vendor_locales.py).
LOCALE_PATHS = [BASE_DIR / "locale", BASE_DIR / ".locale_vendor"]
USE_I18N = True
TIME_ZONE = "UTC"
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# Serve straight from the app and project static folders: no collectstatic step to forget.
WHITENOISE_USE_FINDERS = True

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# Content-Security-Policy on every page (django-csp): scripts, styles, fonts and requests from our
# own origin only, no inline code or styles, no plugins, never framed. Images also as data: URIs
# (the two-factor set-up's QR code). Forms post to us; paying by card posts to us and is
# redirected to Stripe Checkout, which form-action must allow too.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "frame-ancestors": [NONE],
        "form-action": [SELF, "https://checkout.stripe.com"],
    }
}

# Absolute address of the public site, for canonical links and the sitemap when a request
# is not at hand. Empty: derived from each request.
SITE_URL = os.environ.get("SITE_URL", "").rstrip("/")

# The API (docs/api.md): requests per token (or client address) per window, and writes among them.
API_RATE_LIMIT_PER_MINUTE = env_int("API_RATE_LIMIT_PER_MINUTE", 120)
API_WRITE_RATE_LIMIT_PER_MINUTE = env_int("API_WRITE_RATE_LIMIT_PER_MINUTE", 30)
API_RATE_LIMIT_WINDOW_SECONDS = 60

# The host agents (docs/agent.md): how often each heartbeats, how long a silent server with rentals
# waits before it is judged failed, how long a new rental waits for its login before it ends "not
# delivered" (the first hour back), whether a removed login's home goes too, how often an
# unchanged heartbeat is kept in the history, and from which gap between clocks the seller is warned.
AGENT_HEARTBEAT_SECONDS = env_int("AGENT_HEARTBEAT_SECONDS", 30)
AGENT_UNREACHABLE_SECONDS = env_int("AGENT_UNREACHABLE_SECONDS", 180)
RENTAL_DELIVERY_SECONDS = env_int("RENTAL_DELIVERY_SECONDS", 600)
AGENT_REMOVE_HOME = env_bool("AGENT_REMOVE_HOME", False)
AGENT_HISTORY_SECONDS = env_int("AGENT_HISTORY_SECONDS", 300)
AGENT_CLOCK_SKEW_SECONDS = env_int("AGENT_CLOCK_SKEW_SECONDS", 60)
# How long the exchange waits for the SSH banner of a rental's own sshd before trying again after
# the next heartbeat (a rental is delivered only once it has read one).
RENTAL_SSH_PROBE_SECONDS = env_int("RENTAL_SSH_PROBE_SECONDS", 5)
# Whether that probe may reach loopback and private addresses: never in production (a seller's
# host would turn it on the exchange's own network); on one machine (tests, the embedded default)
# the servers are on 127.0.0.1.
RENTAL_SSH_PROBE_PRIVATE_ADDRESSES = env_bool("RENTAL_SSH_PROBE_PRIVATE_ADDRESSES", False)
# The reliability score (the published market rules): over how many days, and how many days of
# history a server needs before it has one ("new" until then).
RELIABILITY_DAYS = env_int("RELIABILITY_DAYS", 30)
RELIABILITY_NEW_DAYS = env_int("RELIABILITY_NEW_DAYS", 7)
# Renter isolation (sellers/isolation.py, the published market rules): what each server keeps for
# itself before its cores, memory and disk are shared out by GPU, processes per rented GPU, how
# many device-lock repairs within how many hours make its locks distrusted until an operator
# clears them, and the oldest NVIDIA Container Toolkit a container host may run (1.17.8 is the
# first with the fix for CVE-2025-23266).
ISOLATION_RESERVE_CPU_CORES = env_int("ISOLATION_RESERVE_CPU_CORES", 2)
ISOLATION_RESERVE_MEMORY_GIB = env_int("ISOLATION_RESERVE_MEMORY_GIB", 8)
ISOLATION_RESERVE_DISK_GB = env_int("ISOLATION_RESERVE_DISK_GB", 50)
ISOLATION_PROCESSES_PER_GPU = env_int("ISOLATION_PROCESSES_PER_GPU", 4096)
ISOLATION_DRIFT_LIMIT = env_int("ISOLATION_DRIFT_LIMIT", 2)
ISOLATION_DRIFT_HOURS = env_int("ISOLATION_DRIFT_HOURS", 24)
CONTAINER_TOOLKIT_MINIMUM = os.environ.get("CONTAINER_TOOLKIT_MINIMUM", "1.17.8")
# An agent token's heartbeats per window (its own bucket: many servers share one address behind a NAT).
AGENT_RATE_LIMIT_PER_MINUTE = env_int("AGENT_RATE_LIMIT_PER_MINUTE", 20)

# Celery: the broker is Redis in production; the embedded default uses the filesystem.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", REDIS_URL or "memory://")
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_TIME_LIMIT = 300
CELERY_TASK_SOFT_TIME_LIMIT = 240
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = TIME_ZONE
# Queues, routes and the beat schedule: marketplace/celery.py. Every task sets its own time limits
# (the two above are the fallback). A message is acknowledged when its task starts, except on the
# tasks proven safe to repeat, which set acks_late and reject_on_worker_lost themselves.
CELERY_TASK_ACKS_LATE = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A worker losing the broker stops its acks_late tasks: their messages go to another worker.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
# Redis gives an unacknowledged message to another worker after this many seconds: longer than
# the longest task time limit (ledger reconciliation, 1800 s), so no running task starts twice.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}

# Money in and out.
PLATFORM_COUNTRY = os.environ.get("PLATFORM_COUNTRY", "PT")
PLATFORM_COMPANY = {
    "name": os.environ.get("PLATFORM_COMPANY_NAME", "EverXCloud, Lda."),
    "address": os.environ.get("PLATFORM_COMPANY_ADDRESS", "Avenida da Liberdade 100\n1250-096 Lisboa"),
    "country": PLATFORM_COUNTRY,
    "vat_id": os.environ.get("PLATFORM_VAT_ID", "PT500000000"),
}
BANK_DETAILS = {
    "holder": os.environ.get("BANK_ACCOUNT_HOLDER", PLATFORM_COMPANY["name"]),
    "iban": os.environ.get("BANK_IBAN", "PT50 0002 0123 1234 5678 9015 4"),
    "bic": os.environ.get("BANK_BIC", "CGDIPTPL"),
    "bank": os.environ.get("BANK_NAME", "Example Bank"),
}
TOP_UP_LIMITS = {"EUR": (10, 10000), "USD": (10, 10000), "GBP": (10, 10000)}
# Per currency: the amounts offered with one click, and (above) the range of one top-up.
TOP_UP_PRESETS = {
    "EUR": (25, 50, 100, 250, 500),
    "USD": (25, 50, 100, 250, 500),
    "GBP": (20, 40, 80, 200, 400),
}
STRIPE_SECRET_KEY = os.environ.get("STRIPE_SECRET_KEY", "")
STRIPE_WEBHOOK_SECRET = os.environ.get("STRIPE_WEBHOOK_SECRET", "")
# The sandbox pays at once with no real money: for development and demos only.
PAYMENT_SANDBOX_ENABLED = False
# Demo data (the `demo` app, which only the embedded and test settings install): its loaders refuse
# to write unless this is on. `load_fx_rates` needs a file unless a default rates file is set.
DEMO_DATA_ALLOWED = False
FX_RATES_DEFAULT_FILE = None

# Hourly charging. The platform keeps this percentage of each rental hour (half-up to the cent);
# the seller earns the rest. Each charging run looks at most this many due rentals.
from decimal import Decimal  # noqa: E402

PLATFORM_FEE_PERCENT = Decimal(os.environ.get("PLATFORM_FEE_PERCENT", "10"))
RENTAL_CHARGE_BATCH_SIZE = int(os.environ.get("RENTAL_CHARGE_BATCH_SIZE", "1000"))

# Buyers are emailed once when their balance covers fewer than this many hours of their running
# rentals at the current burn rate (billing.services.warnings), and again only after it recovered.
LOW_BALANCE_WARNING_HOURS = int(os.environ.get("LOW_BALANCE_WARNING_HOURS", "3"))

# Sellers request payouts of at least this many US dollars of their earnings (billing.services.payouts).
PAYOUT_MINIMUM_USD = Decimal(os.environ.get("PAYOUT_MINIMUM_USD", "50"))
