"""deploy/: the systemd units production runs (README, "Running in production"). Every process comes
back by itself, there is a worker per queue and exactly one beat, and Celery waits for its broker."""

import configparser
import shlex
from pathlib import Path

import pytest
from django.conf import settings

from marketplace.celery import app

DEPLOY = Path(settings.BASE_DIR) / "deploy"
UNITS = sorted(path.name for path in DEPLOY.glob("*.service"))
VENV_BIN = "/srv/everxcloud/.venv/bin/"


def unit(name: str) -> configparser.ConfigParser:
    """A unit file as systemd reads it: sections, `Key=value`, `#` comments, `%` specifiers. Strict:
    a key given twice fails (systemd would take both; ours never need to)."""
    parser = configparser.ConfigParser(interpolation=None, strict=True, delimiters=("=",))
    parser.optionxform = str
    parser.read_string((DEPLOY / name).read_text(), source=name)
    return parser


def command(name: str) -> list[str]:
    return shlex.split(unit(name)["Service"]["ExecStart"])


def test_the_units_are_web_a_worker_per_queue_and_beat():
    assert UNITS == ["everxcloud-beat.service", "everxcloud-web.service", "everxcloud-worker@.service"]


@pytest.mark.parametrize("name", UNITS)
def test_every_unit_restarts_whatever_made_it_stop(name):
    parsed = unit(name)
    assert parsed["Service"]["Restart"] == "always"
    assert int(parsed["Service"]["RestartSec"]) > 0
    assert parsed["Unit"]["StartLimitIntervalSec"] == "0"  # never gives up while Redis is away
    assert parsed["Install"]["WantedBy"] == "multi-user.target"
    environment = parsed["Service"]["Environment"].split()
    assert "DJANGO_SETTINGS_MODULE=marketplace.settings.production" in environment
    assert parsed["Service"]["EnvironmentFile"] == "/etc/everxcloud/everxcloud.env"
    assert parsed["Service"]["User"] == "everxcloud"
    assert command(name)[0].startswith(VENV_BIN)


def test_the_web_unit_runs_gunicorn_on_the_wsgi_application():
    argv = command("everxcloud-web.service")
    assert argv[0] == VENV_BIN + "gunicorn" and argv[1] == "marketplace.wsgi"
    assert settings.WSGI_APPLICATION == "marketplace.wsgi.application"


def test_one_worker_unit_per_queue_and_no_worker_runs_beat():
    argv = command("everxcloud-worker@.service")
    assert argv[:4] == [VENV_BIN + "celery", "-A", "marketplace", "worker"]
    assert argv[argv.index("--queues") + 1] == "%i"  # everxcloud-worker@default, everxcloud-worker@billing
    assert not {"-B", "--beat"} & set(argv)
    assert {queue.name for queue in app.conf.task_queues} == {"default", "billing"}


def test_exactly_one_unit_runs_beat_and_it_cannot_be_started_twice_on_a_host():
    runs_beat = [name for name in UNITS if "beat" in command(name) or "-B" in command(name)]
    assert runs_beat == ["everxcloud-beat.service"]
    assert "@" not in runs_beat[0]  # not a template: one instance per host
    argv = command("everxcloud-beat.service")
    assert argv[:4] == [VENV_BIN + "celery", "-A", "marketplace", "beat"]
    assert argv[argv.index("--schedule") + 1].startswith("%S/everxcloud/")


def test_the_worker_waits_for_the_broker_when_it_starts():
    assert app.conf.broker_connection_retry_on_startup is True


def test_the_example_environment_names_what_production_requires():
    names = {
        line.split("=", 1)[0] for line in (DEPLOY / "everxcloud.env.example").read_text().splitlines()
        if line and not line.startswith("#")
    }
    required = {"SECRET_KEY", "SITE_URL", "ALLOWED_HOSTS", "DATABASE_URL", "REDIS_URL", "TRUSTED_PROXY_COUNT"}
    assert required <= names
