"""Benchmark 3: the hourly charging run over 100,000 running rentals, against pgbench.

Seeded: 20,000 buyers with funded wallets, in EUR, USD and GBP in turn; 100,000 running rentals
(five per wallet) of 1, 2, 4 or 8 GPUs on fully rented 8-GPU servers of every GPU model, each
paid through a moment of the last ten minutes: all due. The sellers' earnings accounts exist, as
they do once a seller has earned anything.

1. The Celery task body (`billing.tasks.rentals_charge_due`, the beat's every-minute run) in one
   worker process charges one hour of every rental; pgbench runs right before with one client.
2. One hour later (the clock moved on with time-machine, in the workers only) the task body runs
   again in two worker processes at once, sharing the work through SKIP LOCKED, as two workers
   do; pgbench runs before with two clients. Each process's share of the hours is recorded.
3. The full bench only (`large_rentals`): rentals and wallets are added until 400,000 rentals are
   due one hour later still, and one worker process charges them all: its time against the first
   run's says whether charging grows linearly with the rentals.

Each run is in worker processes of its own (`bench.charging_worker`), set up before the clock
starts: their peak memory is the charging's alone, not the seeding's.

After each: every rental charged exactly once per run, hour after hour, and the ledger
reconciliation (balances equal the sum of entries, every transaction balanced, every running
rental paid through the current hour).
"""

import json
import random
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

from .common import (
    ROOT,
    child_arguments,
    children_peak_rss_mb,
    django_setup,
    peak_rss_mb,
    result_write,
    rounded,
    say,
    stopwatch,
)

BALANCE = Decimal("5000.00")
SERVER_PATTERNS = ((8,), (4, 4), (4, 2, 2), (2, 2, 2, 1, 1), (1,) * 8, (2, 2, 2, 2), (4, 2, 1, 1))


def seed(*, rentals: int, wallets: int, rng: random.Random, prefix: str = "charging",
         due_at: datetime | None = None) -> None:
    """`rentals` running rentals over `wallets` new buyers, each paid through a moment of the ten
    minutes before `due_at` (default: now)."""
    from django.db import transaction
    from django.utils import timezone

    from billing.models import LedgerAccount
    from exchange.models import Rental

    from . import seed as s

    now = due_at or timezone.now()
    key = s.ssh_key()
    models = s.gpu_models()
    buyer_list = s.buyers(count=wallets, prefix=prefix, balance=BALANCE)
    with transaction.atomic():
        # Fill 8-GPU servers with rentals until there are `rentals` of them.
        layouts: list[tuple[int, ...]] = []
        total = 0
        while total < rentals:
            pattern = rng.choice(SERVER_PATTERNS)[: rentals - total]
            layouts.append(pattern)
            total += len(pattern)
        seller_list = s.sellers(count=max(1, len(layouts) // 50), prefix=prefix)
        s.copy_insert(
            LedgerAccount(code=f"seller_earnings:{seller.pk}:USD", kind=LedgerAccount.Kind.SELLER_EARNINGS,
                          currency="USD", seller=seller)
            for seller in seller_list
        )
        server_list, offer_list = [], []
        for position, gpu in enumerate(models):
            mine = layouts[position::len(models)]
            if not mine:
                continue
            servers = s.servers(seller_list=seller_list, gpu_model=gpu, prefix=f"{prefix}-{gpu.slug}",
                                gpu_counts=[8] * len(mine), rented=[sum(layout) for layout in mine])
            prices = [s.price(rng, "0.30", "3.00") for _ in servers]
            offer_list += s.offers(server_list=servers, prices=prices)
            server_list += list(zip(servers, mine, strict=True))
        offer_of = {offer.server_id: offer for offer in offer_list}
        placements = [(server, gpus) for server, layout in server_list for gpus in layout]
        wanted = [
            (buyer_list[n % len(buyer_list)].pk, server, gpus) for n, (server, gpus) in enumerate(placements)
        ]
        bids = s.filled_bids(
            rows=[(buyer_id, server.gpu_model_id, gpus, offer_of[server.pk].price_usd)
                  for buyer_id, server, gpus in wanted],
            key=key,
        )
        rows = []
        for bid, (_buyer_id, server, _gpus) in zip(bids, wanted, strict=True):
            paid_through = now - timedelta(seconds=rng.randint(60, 600))
            rows.append(Rental(
                buyer_id=bid.buyer_id, bid=bid, offer=offer_of[server.pk], server=server,
                gpu_model_id=server.gpu_model_id, gpus=bid.gpus, price_usd=bid.max_price_usd,
                state="running", started_at=paid_through - timedelta(hours=1), paid_through=paid_through,
                delivered_at=paid_through - timedelta(hours=1), ssh_public_key=key, username=f"evx{bid.pk}",
            ))
        s.copy_insert(rows)


def charge(
    *, processes: int, at: datetime | None, profile_dir: str | None, name: str
) -> tuple[float, Counter, list, list]:
    """The Celery task body in `processes` worker processes at once (`bench.charging_worker`), each
    started and set up first, then all released together; returns the seconds until the last one
    finished, the sum of their counts (and statements, as `queries`), each one's peak memory and
    the hours each one charged (its share of the work, through SKIP LOCKED)."""
    folder = Path(tempfile.mkdtemp(prefix="charging-"))
    workers = []
    try:
        for number in range(processes):
            command = [sys.executable, "-m", "bench.charging_worker", "--out", str(folder / f"{number}.json")]
            if at is not None:
                command += ["--at", at.isoformat()]
            if profile_dir and processes == 1:
                command += ["--profile", str(Path(profile_dir) / f"charging-{name}.txt")]
            workers.append(subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            text=True))
        for worker in workers:
            if worker.stdout.readline().strip() != "ready":
                raise RuntimeError("a charging worker did not start")
        with stopwatch() as elapsed:
            for worker in workers:
                worker.stdin.write("go\n")
                worker.stdin.flush()
            for worker in workers:
                if worker.wait(timeout=3600):
                    raise RuntimeError(f"a charging worker failed with exit code {worker.returncode}")
        seconds = elapsed()
        counts: Counter[str] = Counter()
        memory, shares = [], []
        for number in range(processes):
            found = json.loads((folder / f"{number}.json").read_text(encoding="utf-8"))
            counts.update(found["counts"])
            counts["queries"] += found["queries"]
            memory.append(found["peak_rss_mb"])
            shares.append(found["counts"].get("charged", 0))
        return seconds, counts, memory, shares
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        shutil.rmtree(folder, ignore_errors=True)


@dataclass(frozen=True)
class _Case:
    name: str
    processes: int
    clock: datetime | None  # the workers' clock; None: now
    hours: dict  # a filter of rentals -> the hours each must have been charged by the end of this run


def _targets(*, case: _Case, rate: float, ratio: float, seconds: float, peak: float | None, rentals: int,
             first: dict | None) -> list[dict]:
    """Issue 17's targets for one run, each with its figure and whether it was met: four times
    pgbench and under 300 MB in one process; two processes at 1.7 times one; many rentals in
    time growing linearly (400,000 in at most 4.4 times the 100,000's)."""
    if first is None:
        return [
            {"figure": "ratio to pgbench c=1", "target": ">= 4", "value": round(ratio, 3), "met": ratio >= 4},
            {"figure": "peak RSS of the charging process (MB)", "target": "< 300", "value": peak,
             "met": peak is not None and peak < 300},
        ]
    if case.processes == 2:
        against = rate / first["rate"]
        return [{"figure": "rate against one process", "target": ">= 1.7", "value": round(against, 2),
                 "met": against >= 1.7}]
    allowed = 1.1 * rentals / first["rentals"]
    growth = seconds / first["seconds"]
    return [
        {"figure": f"time against {first['rentals']:,} rentals", "target": f"<= {allowed:.1f}",
         "value": round(growth, 2), "met": growth <= allowed},
        {"figure": "peak RSS of the charging process (MB)", "target": "< 300", "value": peak,
         "met": peak is not None and peak < 300},
    ]


def _large_seed(*, config: dict, rng: random.Random, due_at: datetime) -> int:
    """Rentals and wallets added so that `large_rentals` are due at `due_at` (five per wallet, as
    in the first runs); returns the last rental id of the first runs."""
    from exchange.models import Rental

    from . import seed as s

    last = Rental.objects.order_by("-pk").values_list("pk", flat=True).first()
    added = config["large_rentals"] - config["rentals"]
    say(f"seeding {added:,} more running rentals over {config['large_wallets'] - config['wallets']:,} "
        f"more wallets")
    seed(rentals=added, wallets=config["large_wallets"] - config["wallets"], rng=rng, prefix="charging-large",
         due_at=due_at)
    s.analyze()
    return last


def main() -> None:
    config, out = child_arguments()
    django_setup()
    import time_machine
    from django.conf import settings
    from django.db.models import Q
    from django.utils import timezone

    from . import pgbench
    from . import seed as s
    from .checks import charge_problems, ledger_problems

    rng = random.Random(config["seed"])
    say(f"seeding {config['rentals']:,} running rentals over {config['wallets']:,} wallets")
    with stopwatch() as seeding:
        seed(rentals=config["rentals"], wallets=config["wallets"], rng=rng)
        s.analyze()
    seeded_at = timezone.now()
    say(f"seeded in {seeding():.0f} s")

    cases = [
        _Case("task body, 1 worker process", 1, None, {"all": 1}),
        _Case("task body, 2 worker processes", 2, seeded_at + timedelta(hours=1), {"all": 2}),
    ]
    large = config.get("large_rentals", 0)
    if large:
        cases.append(_Case(f"{large:,} rentals, 1 worker process", 1, seeded_at + timedelta(hours=2),
                           {"old": 3, "new": 1}))
    runs, problems = [], []
    first = None
    last_old = None
    for case in cases:
        rentals = config["rentals"]
        if set(case.hours) == {"old", "new"}:
            last_old = _large_seed(config=config, rng=rng, due_at=case.clock)
            rentals = large
        baseline = pgbench.run(config["pgbench_url"], clients=case.processes,
                               seconds=config["pgbench_seconds"])
        say(f"pgbench, {case.processes} client(s): {baseline['tps']:.0f} transactions/s")
        seconds, counts, memory, shares = charge(
            processes=case.processes, at=case.clock, profile_dir=config["profile_dir"],
            name=f"{case.processes}-processes" if rentals == config["rentals"] else "large",
        )
        filters = {"all": Q(), "old": Q(pk__lte=last_old), "new": Q(pk__gt=last_old)}
        found = _checks(case=case, filters=filters, charge_problems=charge_problems,
                        ledger_problems=ledger_problems, time_machine=time_machine)
        charged = counts.get("charged", 0)
        if charged != rentals or counts.get("errors"):
            found.append(f"the run charged {charged} hours for {rentals} rentals: {dict(counts)}")
        if counts.get("interrupted"):
            found.append("a charging run stopped at its time limit")
        if case.processes > 1 and rentals >= 4 * settings.RENTAL_CHARGE_BATCH_SIZE and not all(shares):
            found.append(f"a worker process charged nothing (SKIP LOCKED shares no work): {shares}")
        rate = charged / seconds
        ratio = rate / baseline["tps"]
        peak = max(value for value in memory if value is not None) if any(memory) else None
        targets = _targets(case=case, rate=rate, ratio=ratio, seconds=seconds, peak=peak, rentals=rentals,
                           first=first)
        problems += [f"{case.name}: {problem}" for problem in found]
        runs.append({
            "case": case.name,
            "threads": case.processes,
            "processes": case.processes,
            "rentals": rentals,
            "seconds": rounded(seconds, 2),
            "rate": rounded(rate, 1),
            "counts": dict(sorted((key, value) for key, value in counts.items() if key != "queries")),
            "charged_per_process": shares,
            "queries_per_charge": rounded(counts["queries"] / max(charged, 1), 3),
            "peak_rss_mb": memory,
            "pgbench": baseline,
            "ratio": rounded(ratio, 3),
            "target": "; ".join(f"{t['figure']} {t['target']}" for t in targets),
            "target_met": all(t["met"] for t in targets),
            "targets": targets,
            "checks": found or "passed",
        })
        if first is None:
            first = runs[-1]
        say(f"{case.name}: {charged:,} charges in {seconds:.1f} s, {rate:.0f}/s, per process {shares}, "
            f"peak RSS {memory} MB; checks {'passed' if not found else 'FAILED'}")
    result_write(out, {
        "rentals": config["rentals"],
        "wallets": config["wallets"],
        "seed_seconds": rounded(seeding(), 1),
        "runs": runs,
        "problems": problems,
        "peak_rss_mb": {"bench process": peak_rss_mb(), **children_peak_rss_mb()},
    })


def _checks(*, case: _Case, filters: dict, charge_problems, ledger_problems, time_machine) -> list[str]:
    """The invariants after a run, at the workers' clock: every rental charged as often as it
    should be by then, and the ledger reconciliation."""
    travel = time_machine.travel(case.clock, tick=True) if case.clock else None
    if travel:
        travel.start()
    try:
        found = []
        for name, hours in case.hours.items():
            found += charge_problems(rental_ids_filter=filters[name], hours=hours)
        return found + ledger_problems(grace=timedelta(minutes=5))
    finally:
        if travel:
            travel.stop()


if __name__ == "__main__":
    main()
