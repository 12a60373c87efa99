"""`make run`: the web server and a Celery worker with embedded beat, started and stopped together."""

import argparse
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
    args = parser.parse_args()
    schedule = ROOT / ".broker" / "celerybeat-schedule"
    schedule.parent.mkdir(exist_ok=True)
    commands = {
        "web": [sys.executable, "manage.py", "runserver", f"{args.host}:{args.port}"],
        "worker": [
            str(BIN / "celery"), "-A", "marketplace", "worker", "--beat", "--pool=solo",
            "--queues=default,billing", "--loglevel=INFO", f"--schedule={schedule}",
        ],
    }
    processes = {name: subprocess.Popen(cmd, cwd=ROOT) for name, cmd in commands.items()}
    print(f"EverXCloud on http://{args.host}:{args.port}/ (Ctrl-C stops the site and the worker)")
    try:
        while all(process.poll() is None for process in processes.values()):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 10
        for process in processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
