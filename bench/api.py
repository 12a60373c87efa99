"""Benchmark 4: the public API, served by gunicorn with the production settings, as the pages are.

1. Seed the book of the pages benchmark (`bench.pages.seed`: offers over every GPU model, past
   trades and resting bids), and funded buyers, each with a read+trade API token.
2. Reads: the market list (GET /api/v1/markets), one market (GET /api/v1/markets/h100-sxm) and
   the order book (GET /api/v1/markets/h100-sxm/book): each driven with wrk, then a static file
   of exactly its answer, served by the same gunicorn and whitenoise. A read that answers 404
   (its router not there yet) is skipped, with a note.
3. Buy-now through the API: POST /api/v1/bids (one GPU-hour of h100-sxm, buy now, a new
   Idempotency-Key each, the buyers' tokens in turn) from wrk's Lua script, against pgbench with
   one client (the matching benchmark's one-model case: one model matches one order at a time).
   Skipped while the operation answers 404 or 405. Then the book and ledger invariants.
"""

import json
import os
import random
import secrets
import tempfile
import urllib.error
import urllib.request
from decimal import Decimal
from pathlib import Path

from .common import (
    child_arguments,
    children_peak_rss_mb,
    django_setup,
    peak_rss_mb,
    result_write,
    rounded,
    say,
)

GPU = "h100-sxm"
READS = (
    ("market list", "/api/v1/markets"),
    ("market", f"/api/v1/markets/{GPU}"),
    ("order book", f"/api/v1/markets/{GPU}/book?depth=10"),
)
BIDS = "/api/v1/bids"
BALANCE = Decimal("100000.00")
BUY_SERVERS_GPUS = 8

# wrk's Lua: each request a buy-now order with its own Idempotency-Key, the tokens in turn.
BUY_SCRIPT = """
local counter, tokens, prefix, body = 0, {}, "", ""
function init(args)
  prefix, body = args[1], args[2]
  for i = 3, #args do tokens[#tokens + 1] = args[i] end
end
function request()
  counter = counter + 1
  local headers = {
    ["Authorization"] = "Bearer " .. tokens[(counter % #tokens) + 1],
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = prefix .. "-" .. counter,
  }
  return wrk.format("POST", "BIDS_PATH", headers, body)
end
""".replace("BIDS_PATH", BIDS)


def reads_measured() -> dict[str, tuple[int, int, bytes]]:
    """Each read in this process (the full middleware stack): status, SQL queries of one request
    after a first that warms the caches, and the body."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_HOST="127.0.0.1")
    found = {}
    for name, path in READS:
        client.get(path)
        with CaptureQueriesContext(connection) as captured:
            response = client.get(path)
        found[name] = (response.status_code, len(captured.captured_queries), response.content)
    return found


def buyers_with_tokens(*, count: int) -> list[str]:
    """Funded buyers, each with a read+trade token; returns the tokens' secrets."""
    from accounts.services import api_token_create

    from . import seed as s

    secrets_ = []
    for buyer in s.buyers(count=count, prefix="api", balance=BALANCE):
        _token, secret = api_token_create(user=buyer, name="bench", scopes=["read", "trade"])
        secrets_.append(secret)
    return secrets_


def buy_supply(*, servers: int, gpu, rng: random.Random) -> None:
    """Whole 8-GPU servers offered on top of the book, so that every order of the run can fill."""
    from . import seed as s

    seller_list = s.sellers(count=max(1, servers // 50), prefix="api-buy")
    server_list = s.servers(seller_list=seller_list, gpu_model=gpu, prefix="api-buy",
                            gpu_counts=[BUY_SERVERS_GPUS] * servers)
    s.offers(server_list=server_list, prices=[s.price(rng, "2.00", "3.00") for _ in server_list])


def buy_body(key: str) -> str:
    return json.dumps({"gpu_model": GPU, "gpus": 1, "hours": 1, "max_price": "3.50",
                       "time_in_force": "buy_now", "ssh_public_key": key})


def probe(url: str, *, token: str, body: str) -> int:
    """The status of one order sent before the run (404 or 405: the operation is not there)."""
    request = urllib.request.Request(  # noqa: S310 - loopback, our own server
        url, data=body.encode(), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                 "Idempotency-Key": f"probe-{secrets.token_hex(8)}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code


def bid_outcomes(*, since_pk: int) -> dict[str, int]:
    from django.db.models import Count

    from exchange.models import Bid

    rows = Bid.objects.filter(pk__gt=since_pk).values("state", "cancel_reason").annotate(n=Count("pk"))
    return {f"{row['state']}" + (f" ({row['cancel_reason']})" if row["cancel_reason"] else ""): row["n"]
            for row in rows.order_by("state", "cancel_reason")}


def main() -> None:
    config, out = child_arguments()
    django_setup()
    from django.conf import settings
    from django.core.management import call_command

    from exchange.models import Bid

    from . import pgbench
    from . import seed as s
    from .checks import book_problems, ledger_problems
    from .pages import _gunicorn_start, _gunicorn_stop, gunicorn_peak_rss_mb, wrk
    from .pages import seed as book_seed

    rng = random.Random(config["seed"])
    workers = 2 * len(os.sched_getaffinity(0)) + 1
    say("collecting the static files")
    call_command("collectstatic", interactive=False, verbosity=0)
    say(f"seeding the book ({config['offers']} offers), {config['buyers']} buyers with tokens")
    book_seed(offers=config["offers"], trades=config["trades"], bids=config["bids"], stage="api", rng=rng)
    gpu = next(model for model in s.gpu_models() if model.slug == GPU)
    buy_supply(servers=config["buy_servers"], gpu=gpu, rng=rng)
    tokens = buyers_with_tokens(count=config["buyers"])
    s.market_open()
    s.analyze()
    measured = reads_measured()

    baseline_dir = Path(settings.STATIC_ROOT) / "bench"
    baseline_dir.mkdir(exist_ok=True)
    for number, (name, _path) in enumerate(READS):
        (baseline_dir / f"api-{number}.json").write_bytes(measured[name][2])

    problems: list[str] = []
    reads, buy = [], {}
    say(f"gunicorn: {workers} sync workers; wrk: {config['seconds']} s per read and per static file")
    server, port = _gunicorn_start(workers=workers)
    base = f"http://127.0.0.1:{port}"
    try:
        for number, (name, path) in enumerate(READS):
            status, queries, body = measured[name]
            if status == 404:
                reads.append({"name": name, "path": path,
                              "skipped": "answers 404: its router is not there yet"})
                say(f"{name}: skipped (404)")
                continue
            if status != 200:
                problems.append(f"{name}: {path} answered {status}")
                continue
            api_url, static_url = f"{base}{path}", f"{base}{settings.STATIC_URL}bench/api-{number}.json"
            if config["warmup_seconds"]:
                wrk(api_url, seconds=config["warmup_seconds"], connections=workers)
                wrk(static_url, seconds=config["warmup_seconds"], connections=workers)
            answer = wrk(api_url, seconds=config["seconds"], connections=workers)
            static = wrk(static_url, seconds=config["seconds"], connections=workers)
            reads.append({"name": name, "path": path, "bytes": len(body), "queries": queries,
                          "api": answer, "static": static,
                          "ratio": rounded(answer["rps"] / static["rps"], 3) if static["rps"] else None})
            for kind, run in (("api", answer), ("static", static)):
                if run["errors"]:
                    problems.append(f"{name}: {run['errors']} failed {kind} requests")
            say(f"{name}: {answer['rps']:.0f} requests/s against {static['rps']:.0f} for the static file")
        buy = buy_now(base=base, tokens=tokens, key=s.ssh_key(), config=config, workers=workers,
                      wrk=wrk, pgbench=pgbench, bid_model=Bid)
        memory = gunicorn_peak_rss_mb(server)
    finally:
        _gunicorn_stop(server)
    memory.update({"bench process": peak_rss_mb(), **children_peak_rss_mb()})
    if buy.get("problem"):
        problems.append(f"buy-now: {buy['skipped']}")
    if "rate" in buy:
        found = book_problems(gpu_model_ids=[gpu.pk]) + ledger_problems()
        buy["checks"] = found or "passed"
        problems += [f"buy-now: {problem}" for problem in found]
        if buy["wrk"]["errors"]:
            problems.append(f"buy-now: {buy['wrk']['errors']} orders answered other than 2xx")
    result_write(out, {"offers": config["offers"], "buyers": config["buyers"], "workers": workers,
                       "connections": workers, "seconds": config["seconds"], "reads": reads,
                       "buy_now": buy, "problems": problems, "peak_rss_mb": memory})


def buy_now(*, base: str, tokens: list[str], key: str, config: dict, workers: int, wrk, pgbench,
            bid_model) -> dict:
    """Buy-now orders through the API for a fixed time, against pgbench with one client."""
    body = buy_body(key)
    status = probe(f"{base}{BIDS}", token=tokens[0], body=body)
    if status in {404, 405}:
        say(f"buy-now: skipped ({status})")
        return {"skipped": f"POST {BIDS} answers {status}: its router is not there yet"}
    if status != 201:
        return {"skipped": f"POST {BIDS} answered {status} to the probe order", "problem": True}
    baseline = pgbench.run(config["pgbench_url"], clients=1, seconds=config["pgbench_seconds"])
    say(f"pgbench, 1 client: {baseline['tps']:.0f} transactions/s")
    since = bid_model.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(BUY_SCRIPT)
    try:
        run = wrk(f"{base}{BIDS}", seconds=config["seconds"], connections=workers, script=Path(script.name),
                  script_args=(f"bench-{secrets.token_hex(6)}", body, *tokens))
    finally:
        Path(script.name).unlink(missing_ok=True)
    ratio = run["rps"] / baseline["tps"] if baseline["tps"] else 0
    say(f"buy-now: {run['rps']:.0f} orders/s, p99 {run['p99_ms']:.1f} ms")
    return {"path": BIDS, "orders": run["requests"], "rate": rounded(run["rps"], 1),
            "p50_ms": run["p50_ms"], "p99_ms": run["p99_ms"], "wrk": run,
            "outcomes": bid_outcomes(since_pk=since), "pgbench": baseline, "ratio": rounded(ratio, 3),
            "target": "ratio >= 0.5", "target_met": ratio >= 0.5}


if __name__ == "__main__":
    main()
