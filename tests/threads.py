"""Real threads for concurrency tests: each uses its own database connection and commits."""

import threading
from collections.abc import Callable

from django.db import connection


def run_together(count: int, work: Callable[[int], object]) -> tuple[list, list[BaseException]]:
    """Start `count` threads at the same moment; return their results and their errors."""
    barrier = threading.Barrier(count)
    results, errors = [], []
    lock = threading.Lock()

    def target(index: int) -> None:
        try:
            barrier.wait(timeout=10)
            result = work(index)
            with lock:
                results.append(result)
        except BaseException as error:  # noqa: BLE001 - reported to the test below
            with lock:
                errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    return results, errors
