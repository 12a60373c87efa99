"""`make bench`: the six benchmarks against their physical limits, one table, bench/results.json.

    python -m bench.run            # full sizes (BENCHMARKS.md), about fifteen minutes on two cores
    python -m bench.run --smoke    # tiny sizes, seconds: `make test` runs it so the benchmarks never rot

PostgreSQL and Redis run already (BENCH_DATABASE_URL, default
postgres://postgres@127.0.0.1:5432/everxcloud_bench, and BENCH_REDIS_URL, default
redis://127.0.0.1:6379/12; the smoke run uses everxcloud_bench_smoke and Redis database 11). The
bench creates a migrated template database, one copy of it per benchmark and a pgbench database
beside them, runs each benchmark as a process of its own with the production settings
(`bench.settings`), and drops every database, empties its Redis database and removes its
temporary folder afterwards, also when a benchmark fails or the run is interrupted. It exits
non-zero when a benchmark fails or an invariant check finds a problem; targets missed are
reported, never failed on.
"""

import argparse
import contextlib
import json
import os
import platform
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis
from psycopg import sql

from . import pgbench
from .common import ROOT, children_peak_rss_mb, command_run, peak_rss_mb

SIZES = {
    "full": {
        "pages": {"offers": 10_000, "small_offers": 90, "trades": 5_000, "small_trades": 90,
                  "bids": 1_000, "small_bids": 18, "seconds": 10, "warmup_seconds": 2,
                  "miss_renders": 100},
        "matching": {"orders": 20_000, "processes": 4, "initial_offers": 200, "buyers": 100},
        # Then 400,000 rentals over 80,000 wallets: does charging grow linearly? Not in the smoke run.
        "charging": {"rentals": 100_000, "wallets": 20_000, "large_rentals": 400_000,
                     "large_wallets": 80_000},
        "api": {"offers": 10_000, "trades": 5_000, "bids": 1_000, "buyers": 50, "buy_servers": 200,
                "seconds": 10, "warmup_seconds": 2},
        "heartbeats": {"servers": 10_000, "seconds": 10, "warmup_seconds": 2},
        "agent": {"passes": 1_000, "checks": 5_000, "cpu_seconds": 300, "ssh_rounds": 5},
        "pgbench": {"scale": 10, "seconds": 10},
        "timeout": 30 * 60,
    },
    "smoke": {
        "pages": {"offers": 180, "small_offers": 45, "trades": 90, "small_trades": 45,
                  "bids": 36, "small_bids": 9, "seconds": 1, "warmup_seconds": 0,
                  "miss_renders": 5},
        "matching": {"orders": 400, "processes": 4, "initial_offers": 20, "buyers": 10},
        "charging": {"rentals": 1_000, "wallets": 200},
        "api": {"offers": 90, "trades": 45, "bids": 18, "buyers": 5, "buy_servers": 10,
                "seconds": 1, "warmup_seconds": 0},
        "heartbeats": {"servers": 40, "seconds": 1, "warmup_seconds": 0},
        "agent": {"passes": 50, "checks": 200, "cpu_seconds": 5, "ssh_rounds": 1},
        "pgbench": {"scale": 1, "seconds": 1},
        "timeout": 5 * 60,
    },
}
BENCHMARKS = ("pages", "matching", "charging", "api", "heartbeats", "agent")
RESULTS = ROOT / "bench" / "results.json"


SCALED = {
    "pages": ("offers", "small_offers", "trades", "small_trades", "bids", "small_bids"),
    "matching": ("orders", "initial_offers", "buyers"),
    "charging": ("rentals", "wallets", "large_rentals", "large_wallets"),
    "api": ("offers", "trades", "bids", "buyers", "buy_servers"),
    "heartbeats": ("servers",),
}


def _scaled(sizes: dict, factor: float) -> dict:
    scaled = {name: dict(value) if isinstance(value, dict) else value for name, value in sizes.items()}
    for name, keys in SCALED.items():
        for key in keys:
            if key in sizes[name]:
                scaled[name][key] = max(1, round(sizes[name][key] * factor))
    return scaled


def _database_url(smoke: bool) -> str:
    default = f"postgres://postgres@127.0.0.1:5432/everxcloud_bench{'_smoke' if smoke else ''}"
    return os.environ.get("BENCH_DATABASE_URL", default)


def _redis_url(smoke: bool) -> str:
    return os.environ.get("BENCH_REDIS_URL", f"redis://127.0.0.1:6379/{11 if smoke else 12}")


def _with_name(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


class Databases:
    """The databases of one run, on the server of the bench's database URL."""

    def __init__(self, url: str):
        self.url = url
        self.base = urlsplit(url).path.lstrip("/")
        self.maintenance = _with_name(url, "postgres")
        self.created: list[str] = []

    def url_of(self, name: str) -> str:
        return _with_name(self.url, name)

    def _execute(self, sql: str) -> None:
        with psycopg.connect(self.maintenance, autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql)

    def create(self, name: str, *, template: str | None = None) -> str:
        self.drop(name)
        quoted = sql.Identifier(name)
        with psycopg.connect(self.maintenance, autocommit=True, connect_timeout=10) as conn:
            if template:
                conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    quoted, sql.Identifier(template)))
            else:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(quoted))
        self.created.append(name)
        return self.url_of(name)

    def drop(self, name: str) -> None:
        with psycopg.connect(self.maintenance, autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))

    def drop_all(self) -> None:
        for name in reversed(self.created):
            with contextlib.suppress(psycopg.Error):
                self.drop(name)
        self.created.clear()

    def server_version(self) -> str:
        with psycopg.connect(self.maintenance, connect_timeout=10) as conn:
            return conn.execute("SHOW server_version").fetchone()[0]


class Children:
    """The benchmark processes, each leading its own process group (gunicorn and wrk run in the
    pages benchmark's group): stopping one stops everything it started."""

    def __init__(self):
        self.running: subprocess.Popen | None = None

    def run(self, args: list[str], *, env: dict, timeout: float) -> None:
        self.running = subprocess.Popen(args, cwd=ROOT, env=env, start_new_session=True)
        try:
            code = self.running.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{' '.join(args)} ran longer than {timeout:.0f} s") from None
        finally:
            self.stop()
        if code:
            raise RuntimeError(f"{' '.join(args)} failed with exit code {code}")

    def stop(self) -> None:
        process, self.running = self.running, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=15)
        # Whatever of the group is left (gunicorn's workers, wrk) stops now.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)


def _environment(*, database_url: str, redis_url: str, static_root: Path) -> dict:
    """The production settings' environment (marketplace/settings/production.py), on loopback."""
    env = {key: value for key, value in os.environ.items() if key != "DEBUG"}
    env.update({
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "SITE_URL": "http://127.0.0.1",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": redis_url,
        "SECURE_SSL_REDIRECT": "false",  # plain HTTP on loopback; a proxy terminates TLS in production
        "LOG_LEVEL": "WARNING",  # one log line per match would measure the terminal
        "BENCH_STATIC_ROOT": str(static_root),
        "PYTHONUNBUFFERED": "1",
    })
    return env


def _template_prepare(*, env: dict, timeout: float) -> None:
    # Production settings have no default rates file: the bench loads the demo's rates by name.
    rates = ["load_fx_rates", "demo/data/demo_fx_rates.json"]
    for command in (["migrate", "--noinput", "-v0"], ["load_gpu_catalog"], rates):
        command_run([sys.executable, "manage.py", *command], env=env, timeout=timeout, cwd=ROOT)


# --- the table ------------------------------------------------------------------------------------


def _fmt(value, places: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{places}f}"


def _verdict(checks: list[tuple[str, bool]]) -> str:
    """Every target of a row, the missed ones first: "missed: a, b; met: c"."""
    missed = [name for name, ok in checks if not ok]
    met = [name for name, ok in checks if ok]
    groups = (("missed", missed), ("met", met))
    return "; ".join(f"{word}: {', '.join(names)}" for word, names in groups if names)


def _run_verdict(run: dict) -> str:
    """A matching or charging run's targets, each with its figure when the run lists them."""
    if "targets" in run:
        return _verdict([(f"{t['figure']} {_fmt(t['value'], 2)} ({t['target']})", t["met"])
                         for t in run["targets"]])
    return f"{'met' if run['target_met'] else 'missed'} ({run['target']})"


def _api_rows(api: dict | None) -> list[tuple]:
    """The API's reads as the pages (against a static file), buy-now as matching (against pgbench);
    a case whose operation is not there yet shows why it was skipped."""
    rows = []
    for read in (api or {}).get("reads", []):
        if "skipped" in read:
            rows.append(("api", f"{read['name']} {read['path']}", "-", "-", "-", "-", "static file", "-", "-",
                         f"skipped: {read['skipped']}"))
            continue
        rows.append((
            "api", f"{read['name']} {read['path']}", _fmt(read["api"]["rps"]), _fmt(read["api"]["p50_ms"]),
            _fmt(read["api"]["p99_ms"]), f"{read['queries']}", "static file", _fmt(read["static"]["rps"]),
            _fmt(read["ratio"], 3),
            _verdict([("ratio >= 0.5", (read["ratio"] or 0) >= 0.5),
                      ("p99 < 50 ms", read["api"]["p99_ms"] < 50)]),
        ))
    buy = (api or {}).get("buy_now") or {}
    if "rate" in buy:
        rows.append((
            "api", f"buy-now {buy['path']}", _fmt(buy["rate"]), _fmt(buy["p50_ms"], 2),
            _fmt(buy["p99_ms"], 2), "-",
            f"pgbench c={buy['pgbench']['clients']}", _fmt(buy["pgbench"]["tps"]), _fmt(buy["ratio"], 3),
            f"{'met' if buy['target_met'] else 'missed'} ({buy['target']})",
        ))
    elif buy:
        rows.append(("api", "buy-now POST /api/v1/bids", "-", "-", "-", "-", "pgbench c=1", "-", "-",
                     f"skipped: {buy['skipped']}"))
    return rows


def _heartbeat_rows(heartbeats: dict | None) -> list[tuple]:
    """Heartbeats against their own target: the servers the rate serves at one per 30 s (the
    baseline column), p99, and the same queries with and without rentals."""
    if not heartbeats:
        return []
    queries = heartbeats["queries"]
    constant = len(set(queries.values())) == 1
    return [(
        "heartbeats", f"{heartbeats['servers']:,} agents POST {heartbeats['path']}", _fmt(heartbeats["rate"]),
        _fmt(heartbeats["p50_ms"]), _fmt(heartbeats["p99_ms"]),
        " / ".join(str(count) for count in queries.values()),
        f"servers at 1/{heartbeats['heartbeat_seconds']}s", _fmt(heartbeats["servers_served"]), "-",
        _verdict([(">= 10,000 servers", heartbeats["servers_served"] >= 10_000),
                  ("p99 < 100 ms", heartbeats["p99_ms"] < 100), ("constant queries", constant)]),
    )]


def _agent_rows(agent: dict | None) -> list[tuple]:
    """The host agent's passes against the raw reads they cannot do without, its CPU against one
    core, and a rental's SSH banner against an sshd (or a container) started by hand."""
    if not agent:
        return []
    if "skipped" in agent:
        return [("agent", "host agent as root", "-", "-", "-", "-", "-", "-", "-",
                 f"skipped: {agent['skipped']}")]
    met = {target["figure"]: target["met"] for target in agent["targets"]}
    rows = []
    for key, case in (("reconcile", f"unchanged reconcile, {agent['rentals']} rentals"),
                      ("check", f"device check, {agent['gpus']} nodes")):
        run, base = agent[key], agent[key]["baseline"]
        checks = [(f"p99 < {'20' if key == 'reconcile' else '1'} ms", met[f"{key} p99 ms"])]
        if key == "reconcile":
            checks.append(("no process started", met["reconcile processes"]))
        rows.append(("agent", case, _fmt(run["rate"]), _fmt(run["p50_ms"], 3), _fmt(run["p99_ms"], 3),
                     f"{run['processes']} proc", f"stat+xattr x{agent['gpus']}", _fmt(base["rate"]),
                     _fmt(run["rate"] / base["rate"], 3), _verdict(checks)))
    cpu = agent["cpu"]
    rows.append(("agent", f"service, {agent['rentals']} rentals, {cpu['heartbeats']} heartbeats",
                 "-", "-", "-", f"{cpu['cpu_seconds']:.3f} cpu-s", f"1 core, {cpu['seconds']:.0f} s", "-",
                 _fmt(cpu["percent"] / 100, 4), _verdict([("< 1 % of a core", met["CPU % of a core"])])))
    for key, case, baseline, figure, limit in (
            ("ssh", "shared-server rental to SSH banner", "plain sshd", "SSH ready s", "2 s"),
            ("container", "container rental to SSH banner", "podman run", "container ready s", "10 s")):
        run = agent[key]
        if "skipped" in run:
            rows.append(("agent", case, "-", "-", "-", "-", baseline, "-", "-", f"skipped: {run['skipped']}"))
            continue
        rows.append(("agent", case, "-", _fmt(run["p50_s"] * 1000), _fmt(run["max_s"] * 1000), "-",
                     f"{baseline} (p50 ms)", _fmt(run["baseline"]["p50_s"] * 1000),
                     _fmt(run["baseline"]["p50_s"] / run["p50_s"], 3),
                     _verdict([(f"slowest < {limit}", met[figure])])))
    return rows


def table(results: dict) -> str:
    header = ("benchmark", "case", "rate/s", "p50 ms", "p99 ms", "queries", "baseline", "base/s", "ratio",
              "target")
    rows = []
    pages = results.get("pages")
    if pages:
        for page in pages["pages"]:
            ratio_ok, p99_ok = (page["ratio"] or 0) >= 0.5, page["page"]["p99_ms"] < 50
            miss = page.get("miss") or {}
            miss_ok = miss.get("p99_ms", 0) < 100
            constant = page["queries"] == page["queries_small_book"]
            rows.append((
                "pages", f"{page['name']} {page['path']}", _fmt(page["page"]["rps"]),
                _fmt(page["page"]["p50_ms"]), _fmt(page["page"]["p99_ms"]),
                f"{page['queries']}" + ("" if constant else f" ({page['queries_small_book']} small)"),
                "static file", _fmt(page["static"]["rps"]), _fmt(page["ratio"], 3),
                _verdict([
                    ("ratio >= 0.5", ratio_ok), ("p99 < 50 ms", p99_ok),
                    ("miss p99 < 100 ms", miss_ok), ("constant queries", constant),
                ]) + f" (miss p99 {_fmt(miss.get('p99_ms'))} ms)",
            ))
    for name in ("matching", "charging"):
        for run in (results.get(name) or {}).get("runs", []):
            rows.append((
                name, run["case"], _fmt(run["rate"]), _fmt(run.get("p50_ms"), 2), _fmt(run.get("p99_ms"), 2),
                _fmt(run["queries_per_order"]) if name == "matching" else _fmt(run["queries_per_charge"], 2),
                f"pgbench c={run['pgbench']['clients']}", _fmt(run["pgbench"]["tps"]), _fmt(run["ratio"], 3),
                _run_verdict(run),
            ))
    rows += _api_rows(results.get("api"))
    rows += _heartbeat_rows(results.get("heartbeats"))
    rows += _agent_rows(results.get("agent"))
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    numeric = {2, 3, 4, 5, 7, 8}
    lines = []
    for row in [header, *rows]:
        cells = [str(cell).rjust(widths[i]) if i in numeric else str(cell).ljust(widths[i])
                 for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "  ".join("-" * width for width in widths))
    lines += ["", "peak RSS (MB) of each process:"]
    for process, value in (results.get("run") or {}).get("peak_rss_mb", {}).items():
        lines.append(f"  run: {process}: {value}")
    for name in BENCHMARKS:
        memory = (results.get(name) or {}).get("peak_rss_mb") or {}
        for process, value in memory.items():
            lines.append(f"  {name}: {process}: {value}")
        for run in (results.get(name) or {}).get("runs", []):
            if run.get("peak_rss_mb"):
                limit = [target for target in run.get("targets", []) if "RSS" in target["figure"]]
                verdict = "".join(f" (target {t['target']} MB: {'met' if t['met'] else 'missed'})"
                                  for t in limit)
                lines.append(f"  {name}: {run['case']}: {run['peak_rss_mb']}{verdict}")
    return "\n".join(lines)


# --- the run --------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks that everything runs")
    parser.add_argument("--only", action="append", choices=BENCHMARKS, help="run only this benchmark")
    parser.add_argument("--output", type=Path,
                        help=f"results file (default: {RESULTS.relative_to(ROOT)}; none for --smoke)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply the numbers of offers, orders, rentals and wallets (quicker runs "
                             "while changing the code; the results are then not the reference figures)")
    parser.add_argument("--profile", type=Path, metavar="FOLDER",
                        help="also profile the measured part of each benchmark with pyinstrument, "
                             "reports into FOLDER")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)

    mode = "smoke" if args.smoke else "full"
    sizes = _scaled(SIZES[mode], args.scale)
    selected = [name for name in BENCHMARKS if not args.only or name in args.only]
    output = args.output or (None if args.smoke else RESULTS)
    databases = Databases(_database_url(args.smoke))
    redis_url = _redis_url(args.smoke)
    children = Children()
    tmp = Path(tempfile.mkdtemp(prefix="everxcloud-bench-"))
    started = time.monotonic()
    results: dict = {}
    problems: list[str] = []
    print(f"EverXCloud benchmarks ({mode}): {', '.join(selected)}", flush=True)
    try:
        redis.Redis.from_url(redis_url).flushdb()
        template = databases.base
        env = _environment(
            database_url=databases.create(template), redis_url=redis_url, static_root=tmp / "static"
        )
        print("- preparing the template database (migrations, GPU catalog, FX rates)", flush=True)
        _template_prepare(env=env, timeout=sizes["timeout"])
        pgbench_url = databases.create(f"{template}_pgbench")
        pgbench.initialise(pgbench_url, scale=sizes["pgbench"]["scale"])
        for name in selected:
            print(f"- {name}", flush=True)
            url = databases.create(f"{template}_{name}", template=template)
            config = {
                **sizes[name],
                "seed": 8,
                "pgbench_url": pgbench_url,
                "pgbench_seconds": sizes["pgbench"]["seconds"],
                "profile_dir": str(args.profile.resolve()) if args.profile else None,
            }
            config_path, out_path = tmp / f"{name}.config.json", tmp / f"{name}.result.json"
            config_path.write_text(json.dumps(config), encoding="utf-8")
            children.run(
                [sys.executable, "-m", f"bench.{name}", "--config", str(config_path), "--out", str(out_path)],
                env=_environment(database_url=url, redis_url=redis_url, static_root=tmp / "static"),
                timeout=sizes["timeout"],
            )
            results[name] = json.loads(out_path.read_text(encoding="utf-8"))
            problems += [f"{name}: {problem}" for problem in results[name].get("problems", [])]
            databases.drop(f"{template}_{name}")
    except KeyboardInterrupt:
        print("Interrupted: tidying up.", file=sys.stderr)
        return 130
    except Exception as error:
        print(f"The benchmarks failed: {error}", file=sys.stderr)
        return 1
    finally:
        children.stop()
        databases.drop_all()
        with contextlib.suppress(redis.RedisError):
            redis.Redis.from_url(redis_url).flushdb()
        shutil.rmtree(tmp, ignore_errors=True)

    results["run"] = {"peak_rss_mb": {"run process": peak_rss_mb(), **children_peak_rss_mb()}}
    report = {
        "mode": mode if args.scale == 1 else f"{mode}, scaled by {args.scale:g}",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {
            "cores": len(os.sched_getaffinity(0)),
            "python": platform.python_version(),
            "postgresql": None,
            "system": f"{platform.system()} {platform.machine()}",
        },
        "seconds": round(time.monotonic() - started, 1),
        **results,
        "problems": problems,
    }
    with contextlib.suppress(psycopg.Error):
        report["machine"]["postgresql"] = databases.server_version()
    print()
    print(table(results))
    print()
    print(f"{report['machine']['cores']} cores, PostgreSQL {report['machine']['postgresql']}, "
          f"Python {report['machine']['python']}; {report['seconds']:.0f} s in all.")
    if output:
        output.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        print(f"Results: {output}")
    if problems:
        print("Invariant checks FAILED:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    print("Invariant checks passed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
