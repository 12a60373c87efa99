"""The embedded default (`make run`) on SQLite, in a process of its own: the hand-written SQL of
the hot paths (marketplace.sql, the heartbeat, the pages' versions, an order's match and first
hour) has a SQLite way too, and the public pages, the demo buyer's order and the demo's agents
work there as on PostgreSQL."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WALK = """
import django
django.setup()
from django.test import Client
from demo.tasks import demo_agents_heartbeat_task
from exchange.selectors import heartbeat_caller, market_versions
from sellers.models import ServerAgent

client = Client(HTTP_HOST="127.0.0.1")
for address in ("/pt/", "/pt/gpus/h100-sxm/", "/fr/trade/h100-sxm/book/", "/fr/gpus/nope/"):
    print(address, [client.get(address).status_code for _ in range(2)])
sent = demo_agents_heartbeat_task()
print("heartbeats", sent > 0, ServerAgent.objects.count() == sent)
print("versions", market_versions(gpu_slug="h100-sxm").key.startswith("m"))
print("unknown token", heartbeat_caller(secret="evxa_" + "x" * 40))
from billing.models import RentalCharge
from exchange.models import Rental
print("demo buyer's order", Rental.objects.count(), RentalCharge.objects.count())
"""


def test_the_embedded_default_serves_pages_and_heartbeats_on_sqlite(tmp_path):
    # As `make run` has it: no service named, so the local-memory cache and the filesystem broker.
    services = ("DJANGO_", "DATABASE_", "REDIS_", "CELERY_")
    env = {key: value for key, value in os.environ.items() if not key.startswith(services)}
    env.update(DJANGO_SETTINGS_MODULE="marketplace.settings.embedded",
               DATABASE_URL=f"sqlite:///{tmp_path / 'embedded.sqlite3'}")

    def manage(*command):
        subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env, check=True,
                       capture_output=True, timeout=300)

    manage("migrate", "--noinput", "-v0")
    manage("load_gpu_catalog")
    manage("load_demo_orderbook")
    manage("market", "open")
    manage("load_fx_rates", "demo/data/demo_fx_rates.json")
    manage("load_demo_buyer")  # an order crossing the book, its first hour charged in its transaction
    walked = subprocess.run([sys.executable, "-c", WALK], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)

    assert walked.returncode == 0, walked.stderr[-3000:]
    assert walked.stdout.splitlines() == [
        "/pt/ [200, 200]",
        "/pt/gpus/h100-sxm/ [200, 200]",
        "/fr/trade/h100-sxm/book/ [200, 200]",
        "/fr/gpus/nope/ [404, 404]",
        "heartbeats True True",
        "versions True",
        "unknown token None",
        "demo buyer's order 1 1",
    ]
