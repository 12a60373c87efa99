import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_check(env_updates: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    dropped = {"SECRET_KEY", "DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(env_updates)
    return subprocess.run(
        [sys.executable, "manage.py", "check", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )


def test_production_refuses_to_start_without_a_secret_key():
    result = run_check({
        "DJANGO_SETTINGS_MODULE": "marketplace.settings.production",
        "SITE_URL": "https://everxcloud.example",
    })
    assert result.returncode != 0
    assert "SECRET_KEY must be set in production" in result.stderr


def test_production_passes_check_deploy():
    result = run_check(
        {
            "DJANGO_SETTINGS_MODULE": "marketplace.settings.production",
            "SECRET_KEY": "x" * 60 + "-only-for-this-test-0123456789",
            "ALLOWED_HOSTS": "everxcloud.example",
            "SITE_URL": "https://everxcloud.example",
        },
        "--deploy", "--fail-level", "WARNING",
    )
    assert result.returncode == 0, result.stdout + result.stderr
