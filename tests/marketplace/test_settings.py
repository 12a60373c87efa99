import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What production needs, with obviously fake local values: nothing here is ever connected to.
PRODUCTION = {
    "DJANGO_SETTINGS_MODULE": "marketplace.settings.production",
    "SECRET_KEY": "x" * 60 + "-only-for-this-test-0123456789",
    "ALLOWED_HOSTS": "everxcloud.example",
    "SITE_URL": "https://everxcloud.example",
    "DATABASE_URL": "postgres://check-deploy@127.0.0.1:5432/check-deploy-only",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
}


def _environment(env_updates: dict[str, str]) -> dict[str, str]:
    """This process's environment without anything that configures the site, plus `env_updates`."""
    dropped = {
        "SECRET_KEY", "DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE", "DATABASE_URL", "REDIS_URL",
        "CELERY_BROKER_URL", "TRUSTED_PROXY_COUNT", "TRUSTED_CLIENT_IP_HEADER",
    }
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(env_updates)
    return env


def run_check(env_updates: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "check", *args],
        cwd=ROOT, env=_environment(env_updates), capture_output=True, text=True, timeout=120,
    )


def settings_of(env_updates: dict[str, str], *names: str) -> dict:
    """The values of settings `names` as a new process with `env_updates` sees them."""
    code = (
        "import json, sys; from django.conf import settings; "
        "print(json.dumps({name: getattr(settings, name) for name in sys.argv[1:]}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, *names],
        cwd=ROOT, env=_environment(env_updates), capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_production_refuses_to_start_without_a_secret_key():
    result = run_check({
        "DJANGO_SETTINGS_MODULE": "marketplace.settings.production",
        "SITE_URL": "https://everxcloud.example",
    })
    assert result.returncode != 0
    assert "SECRET_KEY must be set in production" in result.stderr


@pytest.mark.parametrize("name", ["DATABASE_URL", "REDIS_URL"])
@pytest.mark.parametrize("value", [None, "  "])
def test_production_refuses_to_start_without_its_database_or_redis(name, value):
    env = {key: item for key, item in PRODUCTION.items() if key != name}
    if value is not None:
        env[name] = value
    result = run_check(env)
    assert result.returncode != 0
    message = f"ImproperlyConfigured: The environment variable {name} must be set in production."
    assert message in result.stderr


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("DATABASE_URL", "sqlite:///db.sqlite3", "DATABASE_URL must name a PostgreSQL database"),
        ("REDIS_URL", "memory://", "REDIS_URL must name a Redis server"),
        ("TRUSTED_PROXY_COUNT", "one", "TRUSTED_PROXY_COUNT must be a whole number, not 'one'"),
        ("TRUSTED_PROXY_COUNT", "-1", "TRUSTED_PROXY_COUNT must be a whole number, not '-1'"),
    ],
)
def test_production_refuses_what_would_not_work(name, value, message):
    result = run_check({**PRODUCTION, name: value})
    assert result.returncode != 0
    assert message in result.stderr


def test_production_passes_check_deploy():
    result = run_check(PRODUCTION, "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr


def test_production_uses_postgresql_with_a_pool_and_redis_for_the_cache():
    database_url = PRODUCTION["DATABASE_URL"] + "?sslmode=require"
    found = settings_of({**PRODUCTION, "DATABASE_URL": database_url}, "DATABASES", "CACHES")
    database = found["DATABASES"]["default"]
    assert database["ENGINE"] == "django.db.backends.postgresql"
    assert database["OPTIONS"]["pool"] and database["CONN_MAX_AGE"] == 0
    assert database["OPTIONS"]["sslmode"] == "require"  # the address's own options are kept
    assert found["CACHES"]["default"]["BACKEND"] == "marketplace.cache.RedisCache"
    assert found["CACHES"]["default"]["LOCATION"] == PRODUCTION["REDIS_URL"]


def test_forwarded_addresses_are_ignored_unless_a_proxy_is_named():
    names = ("ALLAUTH_TRUSTED_PROXY_COUNT", "ALLAUTH_TRUSTED_CLIENT_IP_HEADER")
    assert settings_of(PRODUCTION, *names) == {
        "ALLAUTH_TRUSTED_PROXY_COUNT": 0, "ALLAUTH_TRUSTED_CLIENT_IP_HEADER": None,
    }
    named = {**PRODUCTION, "TRUSTED_PROXY_COUNT": "2", "TRUSTED_CLIENT_IP_HEADER": " X-Real-IP "}
    assert settings_of(named, *names) == {
        "ALLAUTH_TRUSTED_PROXY_COUNT": 2, "ALLAUTH_TRUSTED_CLIENT_IP_HEADER": "X-Real-IP",
    }
