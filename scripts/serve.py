"""`make run`: gunicorn (static files through WhiteNoise) and a Celery worker with embedded beat,
started and stopped together. `make dev` (`--reload`): Django's auto-reloading server instead."""

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", default="8000")
    parser.add_argument("--reload", action="store_true", help="Django's auto-reloading server")
    args = parser.parse_args()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    schedule = ROOT / ".broker" / "celerybeat-schedule"
    schedule.parent.mkdir(exist_ok=True)
    commands = {
        "web": _web_command(host=args.host, port=args.port, reload=args.reload),
        "worker": [
            str(BIN / "celery"), "-A", "marketplace", "worker", "--beat", "--pool=solo",
            "--queues=default,billing", "--loglevel=INFO", f"--schedule={schedule}",
        ],
    }
    # Each child leads its own process group, so that stopping reaches the reloader's and the
    # worker's own children too.
    processes = {
        name: subprocess.Popen(cmd, cwd=ROOT, start_new_session=True) for name, cmd in commands.items()
    }
    print(f"EverXCloud on http://{args.host}:{args.port}/ (Ctrl-C stops the site and the worker)")
    try:
        while all(process.poll() is None for process in processes.values()):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        _stop(processes.values())
    return 0


def _web_command(*, host: str, port: str, reload: bool) -> list[str]:
    if reload:
        return [sys.executable, "manage.py", "runserver", f"{host}:{port}"]
    # A few sync workers, as in production; SQLite serialises their writes.
    return [
        str(BIN / "gunicorn"), "marketplace.wsgi:application", f"--bind={host}:{port}",
        "--workers=3", "--access-logfile=-", "--graceful-timeout=5",
    ]


def _stop(processes) -> None:
    # SIGTERM, not SIGINT: a shell may start us with SIGINT ignored, and children inherit that.
    for process in processes:
        _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + 10
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        _signal_group(process, signal.SIGKILL)


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


if __name__ == "__main__":
    sys.exit(main())
