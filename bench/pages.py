"""Benchmark 1: the public pages, served by gunicorn with the production settings, against a static
file of the same size served by the same gunicorn and whitenoise.

1. Seed a book of `offers` active offers over every GPU model, with past trades (for the price
   history and the last trades) and resting bids; count the SQL queries of each page on a small
   book first and on the full book after, in this process through Django's test client.
2. Collect the static files (whitenoise's manifest storage), and copy each page's HTML, as it was
   just rendered, into a static file of exactly its size.
3. Start gunicorn (2 x cores + 1 sync workers) on a free loopback port and drive each page, then
   its static twin, with wrk for a fixed time: requests per second, p50 and p99 latency.
"""

import os
import random
import re
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from contextlib import closing, suppress
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

from .common import (
    BIN,
    ROOT,
    child_arguments,
    children_of,
    children_peak_rss_mb,
    command_run,
    django_setup,
    peak_rss_mb,
    percentile,
    result_write,
    rounded,
    say,
    stopwatch,
)

PAGES = (
    ("home", "/en/"),
    ("fine-tuning (fr)", "/fr/workloads/fine-tuning/"),
    ("GPU page", "/en/gpus/h100-sxm/"),
    ("order book fragment", "/en/trade/h100-sxm/book/"),
    # Filtered by isolation level: a query string, so rendered for every request (never shared).
    ("order book fragment, filtered", "/en/trade/h100-sxm/book/?isolation=container,shared"),
    # The whole trade page, and as the filter's form sends it without JavaScript (its checkboxes).
    ("trade page", "/en/trade/h100-sxm/"),
    ("trade page, filtered", "/en/trade/h100-sxm/?isolation=container&isolation=shared"),
)
_LATENCY = re.compile(r"^\s+(50|99)%\s+([0-9.]+)(us|ms|s|m)\s*$", re.MULTILINE)
_RPS = re.compile(r"^Requests/sec:\s+([0-9.]+)", re.MULTILINE)
_REQUESTS = re.compile(r"^\s+(\d+) requests in", re.MULTILINE)
_NON_2XX = re.compile(r"Non-2xx or 3xx responses: (\d+)")
_SOCKET = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")
_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


# --- seeding -------------------------------------------------------------------------------------


def _base_price(position: int) -> Decimal:
    """A plausible price level per GPU model, cheapest model first."""
    return Decimal("0.30") + Decimal("0.30") * position


def seed(*, offers: int, trades: int, bids: int, stage: str, rng: random.Random) -> None:
    """Add `offers` active offers (one per server, spread over the GPU models), `trades` ended
    rentals over the last 30 days and `bids` resting bids below the asks."""
    from django.db import transaction
    from django.utils import timezone

    from exchange.models import Bid, Offer, Rental

    from . import seed as s

    models = s.gpu_models()
    now = timezone.now()
    key = s.ssh_key()
    with transaction.atomic():
        seller_list = s.sellers(count=max(1, offers // 100), prefix=f"pages-{stage}")
        buyer_list = s.buyers(count=max(1, (trades + bids) // 20), prefix=f"pages-{stage}")
        offers_of: dict[int, list[Offer]] = {}
        for position, gpu in enumerate(models):
            count = offers // len(models) + (1 if position < offers % len(models) else 0)
            server_list = s.servers(
                seller_list=seller_list, gpu_model=gpu, prefix=f"pages-{stage}-{gpu.slug}",
                gpu_counts=[rng.choice((1, 2, 4, 8, 8)) for _ in range(count)],
                levels=("shared", "shared", "container", "whole"),
            )
            low = _base_price(position)
            offers_of[gpu.pk] = s.offers(
                server_list=server_list,
                prices=[s.price(rng, f"{low}", f"{low * Decimal('1.6'):.2f}") for _ in server_list],
            )
        # Past trades: rentals that ran for an hour, spread over the price history's 30 days.
        rows, picked = [], []
        for n in range(trades):
            gpu = models[n % len(models)]
            if not offers_of[gpu.pk]:
                continue
            offer = rng.choice(offers_of[gpu.pk])
            gpus = rng.choice([size for size in (1, 2, 4, 8) if size <= offer.server.gpu_count])
            rows.append((buyer_list[n % len(buyer_list)].pk, gpu.pk, gpus, offer.price_usd))
            picked.append(offer)
        filled = s.filled_bids(rows=rows, key=key)
        rentals = []
        for bid, offer in zip(filled, picked, strict=True):
            started = now - timedelta(minutes=rng.randint(90, 30 * 24 * 60))
            rentals.append(Rental(
                buyer_id=bid.buyer_id, bid=bid, offer=offer, server_id=offer.server_id,
                gpu_model_id=bid.gpu_model_id, gpus=bid.gpus, price_usd=offer.price_usd, hours=1,
                state="ended", started_at=started, paid_through=started + timedelta(hours=1),
                ended_at=started + timedelta(hours=1), end_reason="hours_used", ssh_public_key=key,
                username=f"evx{bid.pk}",
            ))
        s.copy_insert(rentals)
        # Resting bids, below every ask of their model.
        s.copy_insert(
            Bid(
                buyer=buyer_list[n % len(buyer_list)], gpu_model=models[n % len(models)],
                gpus=rng.choice((1, 2, 4, 8)), time_in_force="bid", ssh_public_key=key, state="open",
                max_price_usd=s.price(
                    rng, f"{_base_price(n % len(models)) / 2:.2f}",
                    f"{_base_price(n % len(models)) - Decimal('0.01'):.2f}",
                ),
                form_token=uuid.uuid4(),
            )
            for n in range(bids)
        )
    s.market_open()


# --- measuring ---------------------------------------------------------------------------------


def queries_and_bodies() -> dict[str, tuple[int, bytes]]:
    """Each page rendered in this process (the full middleware stack, the production settings):
    the SQL queries of one request, after a first request that warms the caches, and its body."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_HOST="127.0.0.1")
    found = {}
    for name, path in PAGES:
        client.get(path)
        with CaptureQueriesContext(connection) as captured:
            response = client.get(path)
        if response.status_code != 200:
            raise RuntimeError(f"{path} answered {response.status_code}")
        found[name] = (len(captured.captured_queries), response.content)
    return found


def cache_misses(*, renders: int) -> dict[str, dict]:
    """Each page rendered `renders` times in this process with the page cache emptied before each
    request: the p99 latency and the SQL statements of a miss, what a visitor meets right after
    the book changed."""
    from django.core.cache import cache
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_HOST="127.0.0.1")
    found = {}
    for name, path in PAGES:
        client.get(path)
        latencies, queries = [], 0
        for _ in range(renders):
            cache.clear()
            with stopwatch() as elapsed, CaptureQueriesContext(connection) as captured:
                client.get(path)
            latencies.append(elapsed())
            queries = len(captured.captured_queries)
        found[name] = {"p99_ms": rounded(1000 * percentile(latencies, 0.99), 2), "queries": queries}
    return found


def profile(folder: Path, *, renders: int = 200) -> None:
    """Profile `renders` renders of each page in this process (pyinstrument), a report per page."""
    from django.test import Client
    from pyinstrument import Profiler

    client = Client(HTTP_HOST="127.0.0.1")
    folder.mkdir(parents=True, exist_ok=True)
    for number, (_name, path) in enumerate(PAGES):
        client.get(path)
        profiler = Profiler(interval=0.0005)
        profiler.start()
        for _ in range(renders):
            client.get(path)
        profiler.stop()
        (folder / f"pages-{number}.txt").write_text(profiler.output_text(unicode=True, show_all=False))
        (folder / f"pages-{number}.html").write_text(profiler.output_html())


def _free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _gunicorn_start(*, workers: int) -> tuple[subprocess.Popen, int]:
    """gunicorn with the production settings on a free loopback port, answering /healthz.
    In this process's group: whoever stops this benchmark stops gunicorn with it."""
    for _attempt in range(3):
        port = _free_port()
        process = subprocess.Popen(
            [str(BIN / "gunicorn"), "marketplace.wsgi:application", "--bind", f"127.0.0.1:{port}",
             "--workers", str(workers), "--worker-class", "sync", "--log-level", "warning",
             "--graceful-timeout", "5",
             # A worker imports the site on its first request: on two cores shared with a test
             # suite that can take longer than gunicorn's default 30 s before it is killed.
             "--timeout", "120"],
            cwd=ROOT,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            health = f"http://127.0.0.1:{port}/healthz"
            with suppress(OSError), urllib.request.urlopen(health, timeout=10) as answer:  # noqa: S310
                if answer.status == 200:
                    return process, port
            time.sleep(0.2)
        _gunicorn_stop(process)
    raise RuntimeError("gunicorn did not start")


def gunicorn_peak_rss_mb(process: subprocess.Popen) -> dict:
    """The peak RSS of gunicorn's master and of each of its workers, read while they run."""
    return {
        "gunicorn master": peak_rss_mb(process.pid),
        "gunicorn workers": [peak_rss_mb(pid) for pid in children_of(process.pid)],
    }


def _gunicorn_stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def wrk(url: str, *, seconds: int, connections: int, script: Path | None = None,
        script_args: tuple[str, ...] = ()) -> dict:
    """One wrk run, one thread, closed loop: `connections` connections each sending the next
    request as soon as the last one is answered. `script`: a Lua file that makes the requests
    (bench.api's POSTs), given `script_args`."""
    lua = ["-s", str(script)] if script else []
    text = command_run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "--timeout", "10s", *lua, url,
         *(["--", *script_args] if script_args else [])],
        timeout=seconds + 60,
    )
    latency = {p: float(v) * _UNIT_MS[unit] for p, v, unit in _LATENCY.findall(text)}
    rps, requests = _RPS.search(text), _REQUESTS.search(text)
    if rps is None or requests is None or set(latency) != {"50", "99"}:
        raise RuntimeError(f"Could not read wrk's report:\n{text}")
    non_2xx = _NON_2XX.search(text)
    sockets = _SOCKET.search(text)
    return {
        "rps": float(rps.group(1)),
        "requests": int(requests.group(1)),
        "p50_ms": latency["50"],
        "p99_ms": latency["99"],
        "errors": (int(non_2xx.group(1)) if non_2xx else 0)
        + (sum(int(n) for n in sockets.groups()) if sockets else 0),
    }


def main() -> None:
    config, out = child_arguments()
    django_setup()
    from django.conf import settings
    from django.core.management import call_command

    from . import seed as s

    rng = random.Random(config["seed"])
    cores = len(os.sched_getaffinity(0))
    workers = 2 * cores + 1
    say("collecting the static files")
    call_command("collectstatic", interactive=False, verbosity=0)

    say(f"seeding a small book ({config['small_offers']} offers)")
    seed(offers=config["small_offers"], trades=config["small_trades"], bids=config["small_bids"],
         stage="small", rng=rng)
    s.analyze()
    small = queries_and_bodies()
    say(f"seeding the full book ({config['offers']} offers)")
    with stopwatch() as seeding:
        seed(
            offers=config["offers"] - config["small_offers"],
            trades=config["trades"] - config["small_trades"],
            bids=config["bids"] - config["small_bids"], stage="full", rng=rng,
        )
        s.analyze()
    full = queries_and_bodies()
    misses = cache_misses(renders=config.get("miss_renders", 100))
    if config["profile_dir"]:
        say("profiling the pages in this process")
        profile(Path(config["profile_dir"]))

    baseline_dir = Path(settings.STATIC_ROOT) / "bench"
    baseline_dir.mkdir(exist_ok=True)
    for number, (name, _path) in enumerate(PAGES):
        (baseline_dir / f"page-{number}.html").write_bytes(full[name][1])

    say(f"gunicorn: {workers} sync workers; wrk: {config['seconds']} s per page and per static file")
    server, port = _gunicorn_start(workers=workers)
    rows = []
    try:
        for number, (name, path) in enumerate(PAGES):
            page_url = f"http://127.0.0.1:{port}{path}"
            static_url = f"http://127.0.0.1:{port}{settings.STATIC_URL}bench/page-{number}.html"
            if config["warmup_seconds"]:
                wrk(page_url, seconds=config["warmup_seconds"], connections=workers)
                wrk(static_url, seconds=config["warmup_seconds"], connections=workers)
            page = wrk(page_url, seconds=config["seconds"], connections=workers)
            static = wrk(static_url, seconds=config["seconds"], connections=workers)
            rows.append({
                "name": name,
                "path": path,
                "bytes": len(full[name][1]),
                "queries": full[name][0],
                "queries_small_book": small[name][0],
                "page": page,
                "static": static,
                "ratio": rounded(page["rps"] / static["rps"], 3) if static["rps"] else None,
                "miss": misses[name],
            })
            say(f"{name}: {page['rps']:.0f} requests/s against {static['rps']:.0f} for the static file")
        memory = gunicorn_peak_rss_mb(server)
    finally:
        _gunicorn_stop(server)
    memory.update({"bench process": peak_rss_mb(), **children_peak_rss_mb()})

    problems = []
    for row in rows:
        if row["queries"] != row["queries_small_book"]:
            problems.append(f"{row['name']}: {row['queries_small_book']} queries on the small book, "
                            f"{row['queries']} on the full one")
        for kind in ("page", "static"):
            if row[kind]["errors"]:
                problems.append(f"{row['name']}: {row[kind]['errors']} failed {kind} requests")
    result_write(out, {
        "offers": config["offers"],
        "small_offers": config["small_offers"],
        "trades": config["trades"],
        "bids": config["bids"],
        "seed_seconds": rounded(seeding(), 1),
        "workers": workers,
        "connections": workers,
        "seconds": config["seconds"],
        "pages": rows,
        "problems": problems,
        "peak_rss_mb": memory,
    })


if __name__ == "__main__":
    main()
