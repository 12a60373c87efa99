"""Benchmark 5: host-agent heartbeats, served by gunicorn with the production settings.

1. Seed `servers` verified 8-GPU H100 servers, each with its own agent token and the agent row
   of a previous heartbeat (as in service: every server has reported before); one server in ten
   hosts two running rentals of two GPUs (their logins are in its desired state).
2. In this process, the SQL queries of one unchanged heartbeat of a server without rentals and
   of one with two: the desired state must cost the same whatever the number of rentals.
3. wrk posts heartbeats, closed loop, as the servers' agents in turn: each request carries the
   next server's token and the body its agent sends (its 8 GPUs as registered, its logins ready,
   its isolation report unchanged since the last: it costs no query and no write),
   so every request is a different agent, as 10,000 agents each posting once every 30 s are.
   The rate gives the number of servers it serves at one heartbeat per AGENT_HEARTBEAT_SECONDS.

Target: at least 10,000 servers (a rate of 334 heartbeats/s) with a p99 under 100 ms.
"""

import json
import os
import secrets
import tempfile
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from .common import (
    child_arguments,
    children_peak_rss_mb,
    copy_insert,
    django_setup,
    peak_rss_mb,
    result_write,
    rounded,
    say,
)

PATH = "/api/v1/agent/heartbeat"
GPU = "h100-sxm"
GPUS = 8
SMI_NAME, SMI_MEMORY_MIB = "NVIDIA H100 80GB HBM3", 81559
TARGET_SERVERS, TARGET_P99_MS = 10_000, 100
RENTALS_EVERY = 10  # one server in ten hosts rentals
RENTAL_GPUS = ((0, 1), (2, 3))

# wrk's Lua: the agents in turn, each with its token and its body, read from a file (tab separated).
SCRIPT = """
local agents, counter = {}, 0
function init(args)
  for line in io.lines(args[1]) do
    local tab = string.find(line, "\\t", 1, true)
    agents[#agents + 1] = {string.sub(line, 1, tab - 1), string.sub(line, tab + 1)}
  end
end
function request()
  counter = counter + 1
  local agent = agents[(counter % #agents) + 1]
  local headers = {["Authorization"] = "Bearer " .. agent[1], ["Content-Type"] = "application/json"}
  return wrk.format("POST", "PATH", headers, agent[2])
end
""".replace("PATH", PATH)


def gpus_seen(server_id: int) -> list[dict]:
    return [
        {"index": index, "uuid": f"GPU-bench-{server_id}-{index}", "name": SMI_NAME,
         "memory_total_mib": SMI_MEMORY_MIB, "temperature_c": 35, "utilization_percent": 0,
         "ecc_uncorrected": 0}
        for index in range(GPUS)
    ]


def isolation_of(server_id: int) -> dict:
    """A shared-server host's isolation report (docs/agent.md), as its agent sends it every time."""
    from sellers.isolation import FACTS

    return {
        "version": 1, "server_id": server_id,
        "hardware": {"cpu_cores": 64, "memory_mib": 512 * 1024, "disk_gb": 3500}, "backend": "v1",
        "facts": {name: name != "mig_enabled" for name in FACTS}, "container": None,
    }


def body(server_id: int, rentals: list[tuple[int, tuple[int, ...]]]) -> str:
    return json.dumps({
        "agent_version": "1.0.0", "sent_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "uptime_seconds": 86400, "hostname": f"bench-{server_id}", "disk_free_gb": 812.5,
        "gpus": gpus_seen(server_id), "gpu_error": None,
        "logins": [{"rental_id": rental_id, "username": f"evx-{rental_id}", "state": "ready",
                    "gpu_indices": list(indices), "detail": ""} for rental_id, indices in rentals],
        "isolation": isolation_of(server_id),
    }, separators=(",", ":"))


def seed(*, count: int) -> list[tuple[str, str]]:
    """The servers, their tokens and agent rows, the rentals; returns (secret, body) per server."""
    from django.db import transaction
    from django.utils import timezone

    from accounts.tokens import PREFIX_LENGTH, token_secret_hash
    from exchange.models import Rental, RentalGpu
    from sellers.isolation import isolation_report_digest
    from sellers.models import AgentToken, Server, ServerAgent

    from . import seed as s

    now = timezone.now()
    gpu = next(model for model in s.gpu_models() if model.slug == GPU)
    hosting = range(0, count, RENTALS_EVERY)
    with transaction.atomic():
        seller_list = s.sellers(count=max(1, count // 100), prefix="agents")
        rented = [sum(map(len, RENTAL_GPUS)) if n % RENTALS_EVERY == 0 else 0 for n in range(count)]
        server_list = s.servers(seller_list=seller_list, gpu_model=gpu, prefix="agents",
                                gpu_counts=[GPUS] * count, rented=rented)
        # Their level and share, as the report made them (exchange.services.isolation).
        Server.objects.filter(pk__in=[server.pk for server in server_list]).update(
            agent_verified_at=now, isolation_level="shared", sellable_cpu_cores=62,
            sellable_memory_mib=504 * 1024, sellable_disk_gb=3450,
        )
        tokens = [f"evxa_{secrets.token_urlsafe(30)}" for _ in server_list]
        copy_insert(AgentToken(server=server, key_hash=token_secret_hash(secret),
                               prefix=secret[:PREFIX_LENGTH], created_at=now)
                    for server, secret in zip(server_list, tokens, strict=True))
        # bulk_create: an agent's key is its server's, not a sequence of its own (copy_insert).
        ServerAgent.objects.bulk_create((ServerAgent(server=server, enrolled_at=now, last_heartbeat_at=now,
                                agent_version="1.0.0", hostname=f"bench-{server.pk}", uptime_seconds=86400,
                                gpus=gpus_seen(server.pk), history_at=now,
                                isolation_digest=isolation_report_digest(isolation_of(server.pk)))
                                         for server in server_list), batch_size=2000)
        hosts = [server_list[n] for n in hosting]
        offers = s.offers(server_list=hosts, prices=[Decimal("2.50")] * len(hosts))
        buyers = s.buyers(count=max(1, len(hosts) // 10), prefix="agents")
        pairs = [(offer, indices) for offer in offers for indices in RENTAL_GPUS]
        bids = s.filled_bids(rows=[(buyers[n % len(buyers)].pk, gpu.pk, len(indices), offer.price_usd)
                                   for n, (offer, indices) in enumerate(pairs)], key=s.ssh_key())
        rentals = copy_insert(
            Rental(buyer_id=bid.buyer_id, bid=bid, offer=offer, server_id=offer.server_id, gpu_model=gpu,
                   gpus=len(indices), price_usd=offer.price_usd, state="running", started_at=now,
                   paid_through=now + timedelta(hours=1), ssh_public_key=bid.ssh_public_key,
                   delivered_at=now, username="")
            for bid, (offer, indices) in zip(bids, pairs, strict=True)
        )
        copy_insert(RentalGpu(rental=rental, server_id=rental.server_id, index=index)
                    for rental, (_offer, indices) in zip(rentals, pairs, strict=True) for index in indices)
    by_server: dict[int, list] = {}
    for rental, (_offer, indices) in zip(rentals, pairs, strict=True):
        by_server.setdefault(rental.server_id, []).append((rental.pk, indices))
    return [(secret, body(server.pk, by_server.get(server.pk, [])))
            for server, secret in zip(server_list, tokens, strict=True)]


def queries_of(agents: list[tuple[str, str]]) -> dict[str, int]:
    """The SQL queries of one unchanged heartbeat, in this process: of a server without rentals
    and of one with two (the first heartbeat of each warms it, as in service)."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_HOST="127.0.0.1")
    found = {}
    for name, (secret, text) in (("with 2 rentals", agents[0]), ("without rentals", agents[1])):
        def post(secret=secret, text=text):
            return client.post(PATH, data=text, content_type="application/json",
                               HTTP_AUTHORIZATION=f"Bearer {secret}")
        post()
        with CaptureQueriesContext(connection) as captured:
            status = post().status_code
        if status != 200:
            raise RuntimeError(f"A heartbeat answered {status}")
        found[name] = len(captured.captured_queries)
    return found


def profile(folder: Path, agents: list[tuple[str, str]], *, heartbeats: int = 1000) -> None:
    """Profile `heartbeats` heartbeats in this process (pyinstrument), the agents in turn."""
    from django.test import Client
    from pyinstrument import Profiler

    client = Client(HTTP_HOST="127.0.0.1")
    folder.mkdir(parents=True, exist_ok=True)
    profiler = Profiler(interval=0.0005)
    profiler.start()
    for number in range(heartbeats):
        secret, text = agents[number % len(agents)]
        client.post(PATH, data=text, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {secret}")
    profiler.stop()
    (folder / "heartbeats.txt").write_text(profiler.output_text(unicode=True, show_all=False))
    (folder / "heartbeats.html").write_text(profiler.output_html())


def main() -> None:
    config, out = child_arguments()
    django_setup()
    from django.conf import settings

    from . import seed as s
    from .pages import _gunicorn_start, _gunicorn_stop, gunicorn_peak_rss_mb, wrk

    count = max(2, config["servers"])
    workers = 2 * len(os.sched_getaffinity(0)) + 1
    say(f"seeding {count} servers with their agent tokens, one in {RENTALS_EVERY} with two rentals")
    agents = seed(count=count)
    s.analyze()
    queries = queries_of(agents)
    problems = []
    if len(set(queries.values())) != 1:
        problems.append(f"the desired state's queries depend on the rentals: {queries}")
    if config["profile_dir"]:
        profile(Path(config["profile_dir"]), agents)
    Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)  # no pages: nothing to collect
    with tempfile.TemporaryDirectory() as folder:
        data, script = Path(folder) / "agents.tsv", Path(folder) / "heartbeats.lua"
        data.write_text("".join(f"{secret}\t{text}\n" for secret, text in agents), encoding="utf-8")
        script.write_text(SCRIPT, encoding="utf-8")
        say(f"gunicorn: {workers} sync workers; wrk: {config['seconds']} s, {workers} connections")
        server, port = _gunicorn_start(workers=workers)
        url = f"http://127.0.0.1:{port}{PATH}"
        try:
            if config["warmup_seconds"]:
                wrk(url, seconds=config["warmup_seconds"], connections=workers, script=script,
                    script_args=(str(data),))
            run = wrk(url, seconds=config["seconds"], connections=workers, script=script,
                      script_args=(str(data),))
            memory = gunicorn_peak_rss_mb(server)
        finally:
            _gunicorn_stop(server)
    memory.update({"bench process": peak_rss_mb(), **children_peak_rss_mb()})
    if run["errors"]:
        problems.append(f"{run['errors']} heartbeats answered other than 2xx")
    served = int(run["rps"] * settings.AGENT_HEARTBEAT_SECONDS)
    met = served >= TARGET_SERVERS and run["p99_ms"] < TARGET_P99_MS
    say(f"heartbeats: {run['rps']:.0f}/s, p50 {run['p50_ms']:.1f} ms, p99 {run['p99_ms']:.1f} ms: "
        f"{served:,} servers at one per {settings.AGENT_HEARTBEAT_SECONDS} s; target "
        f"{'met' if met else 'missed'} (>= {TARGET_SERVERS:,} servers, p99 < {TARGET_P99_MS} ms)")
    result_write(out, {
        "servers": count, "workers": workers, "connections": workers, "seconds": config["seconds"],
        "path": PATH, "rate": rounded(run["rps"], 1), "p50_ms": run["p50_ms"], "p99_ms": run["p99_ms"],
        "heartbeats": run["requests"], "queries": queries, "servers_served": served,
        "heartbeat_seconds": settings.AGENT_HEARTBEAT_SECONDS, "wrk": run,
        "target": f">= {TARGET_SERVERS:,} servers, p99 < {TARGET_P99_MS} ms", "target_met": met,
        "problems": problems, "peak_rss_mb": memory,
    })


if __name__ == "__main__":
    main()
