"""Benchmark 3: the hourly charging run over 100,000 running rentals, against pgbench.

Seeded: 20,000 buyers with funded wallets, in EUR, USD and GBP in turn; 100,000 running rentals
(five per wallet) of 1, 2, 4 or 8 GPUs on fully rented 8-GPU servers of every GPU model, each
paid through a moment of the last ten minutes: all due. The sellers' earnings accounts exist, as
they do once a seller has earned anything.

1. The Celery task body (`billing.tasks.rentals_charge_due`, the beat's every-minute run) in one
   worker process charges one hour of every rental; pgbench runs right before with one client.
2. One hour later (the clock moved on with time-machine, in the workers only) the task body runs
   again in two worker processes at once, sharing the work through SKIP LOCKED, as two workers
   do; pgbench runs before with two clients.

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
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

from .common import ROOT, child_arguments, django_setup, peak_rss_mb, result_write, rounded, say, stopwatch

BALANCE = Decimal("5000.00")
SERVER_PATTERNS = ((8,), (4, 4), (4, 2, 2), (2, 2, 2, 1, 1), (1,) * 8, (2, 2, 2, 2), (4, 2, 1, 1))


def seed(*, rentals: int, wallets: int, rng: random.Random) -> None:
    from django.db import transaction
    from django.utils import timezone

    from billing.models import LedgerAccount
    from exchange.models import Rental

    from . import seed as s

    now = timezone.now()
    key = s.ssh_key()
    models = s.gpu_models()
    buyer_list = s.buyers(count=wallets, prefix="charging", balance=BALANCE)
    with transaction.atomic():
        # Fill 8-GPU servers with rentals until there are `rentals` of them.
        layouts: list[tuple[int, ...]] = []
        total = 0
        while total < rentals:
            pattern = rng.choice(SERVER_PATTERNS)[: rentals - total]
            layouts.append(pattern)
            total += len(pattern)
        seller_list = s.sellers(count=max(1, len(layouts) // 50), prefix="charging")
        s.copy_insert(
            LedgerAccount(code=f"seller_earnings:{seller.pk}:USD", kind=LedgerAccount.Kind.SELLER_EARNINGS,
                          currency="USD", seller=seller, name=f"Earnings of {seller.name} (USD)")
            for seller in seller_list
        )
        server_list, offer_list = [], []
        for position, gpu in enumerate(models):
            mine = layouts[position::len(models)]
            if not mine:
                continue
            servers = s.servers(seller_list=seller_list, gpu_model=gpu, prefix=f"charging-{gpu.slug}",
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
) -> tuple[float, Counter, list]:
    """The Celery task body in `processes` worker processes at once (`bench.charging_worker`), each
    started and set up first, then all released together; returns the seconds until the last one
    finished, the sum of their counts (and statements, as `queries`) and each one's peak memory."""
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
        memory = []
        for number in range(processes):
            found = json.loads((folder / f"{number}.json").read_text(encoding="utf-8"))
            counts.update(found["counts"])
            counts["queries"] += found["queries"]
            memory.append(found["peak_rss_mb"])
        return seconds, counts, memory
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    config, out = child_arguments()
    django_setup()
    import time_machine
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

    runs, problems = [], []
    cases = (
        ("task body, 1 worker process", 1, None),
        ("task body, 2 worker processes", 2, seeded_at + timedelta(hours=1)),
    )
    single_rate = None
    for hours, (case, processes, clock) in enumerate(cases, start=1):
        baseline = pgbench.run(config["pgbench_url"], clients=processes, seconds=config["pgbench_seconds"])
        say(f"pgbench, {processes} client(s): {baseline['tps']:.0f} transactions/s")
        seconds, counts, memory = charge(
            processes=processes, at=clock, profile_dir=config["profile_dir"], name=f"{processes}-processes"
        )
        travel = time_machine.travel(clock, tick=True) if clock else None
        if travel:
            travel.start()
        try:
            found = charge_problems(rental_ids_filter=Q(), hours=hours) + ledger_problems(
                grace=timedelta(minutes=5)
            )
        finally:
            if travel:
                travel.stop()
        charged = counts.get("charged", 0)
        if charged != config["rentals"] or counts.get("errors"):
            found.append(f"the run charged {charged} hours for {config['rentals']} rentals: {dict(counts)}")
        if counts.get("interrupted"):
            found.append("a charging run stopped at its time limit")
        rate = charged / seconds
        ratio = rate / baseline["tps"]
        peak = max(value for value in memory if value is not None) if any(memory) else None
        # Issue 17's targets: four times pgbench in one process, under 300 MB of memory; two
        # processes at 1.7 times one.
        if single_rate is None:
            single_rate = rate
            target = "ratio >= 4, peak RSS < 300 MB"
            met = ratio >= 4 and peak is not None and peak < 300
        else:
            target, met = "rate >= 1.7 x one process", rate >= 1.7 * single_rate
        problems += [f"{case}: {problem}" for problem in found]
        runs.append({
            "case": case,
            "threads": processes,
            "processes": processes,
            "rentals": config["rentals"],
            "seconds": rounded(seconds, 2),
            "rate": rounded(rate, 1),
            "counts": dict(sorted((key, value) for key, value in counts.items() if key != "queries")),
            "queries_per_charge": rounded(counts["queries"] / max(charged, 1), 2),
            "peak_rss_mb": memory,
            "pgbench": baseline,
            "ratio": rounded(ratio, 3),
            "target": target,
            "target_met": met,
            "checks": found or "passed",
        })
        say(f"{case}: {charged:,} charges in {seconds:.1f} s, {rate:.0f}/s, peak RSS {memory} MB; "
            f"checks {'passed' if not found else 'FAILED'}")
    result_write(out, {
        "rentals": config["rentals"],
        "wallets": config["wallets"],
        "seed_seconds": rounded(seeding(), 1),
        "runs": runs,
        "problems": problems,
        "peak_rss_mb": {"bench process": peak_rss_mb()},
    })


if __name__ == "__main__":
    main()
