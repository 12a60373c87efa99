"""One charging worker process of benchmark 3 (`bench.charging` starts one or two of them).

It sets Django up, moves its clock to `--at` when given (time-machine, this process only), says
`ready` on its standard output and waits for a line on its standard input; then it runs the
Celery task body (`billing.tasks.rentals_charge_due`) once, as a worker of the `charging` queue
would, and writes what it counted, the SQL statements it sent and its peak memory to `--out`.
Two of them share the due rentals through `FOR UPDATE SKIP LOCKED`, as two workers do.
"""

import argparse
import json
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

from .common import QueryCounter, django_setup, peak_rss_mb, stopwatch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--at", default="", help="the clock of this process, ISO 8601 (default: now)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--profile", type=Path, help="a pyinstrument report of the run, into this file")
    args = parser.parse_args()
    django_setup()
    import time_machine
    from django.db import connection

    from billing.tasks import rentals_charge_due

    travel = time_machine.travel(datetime.fromisoformat(args.at), tick=True) if args.at else None
    if travel:
        travel.start()
    connection.ensure_connection()
    print("ready", flush=True)
    sys.stdin.readline()
    profiler = None
    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.005)
        profiler.start()
    counter = QueryCounter()
    with stopwatch() as elapsed, connection.execute_wrapper(counter):
        counts = Counter(rentals_charge_due() or {"interrupted": 1})
    if profiler:
        profiler.stop()
        args.profile.parent.mkdir(parents=True, exist_ok=True)
        args.profile.write_text(profiler.output_text(unicode=True, show_all=False))
    if travel:
        travel.stop()
    args.out.write_text(json.dumps({
        "counts": dict(counts), "queries": counter.count, "seconds": elapsed(), "peak_rss_mb": peak_rss_mb(),
    }), encoding="utf-8")


if __name__ == "__main__":
    main()
