from celery import shared_task

# The module, not its names: the services queue these tasks (a cycle of modules).
from . import services


@shared_task(name="exchange.bids_expire", time_limit=120, soft_time_limit=100)
def bids_expire_task() -> int:
    return services.bids_expire()


# Recomputes every score from the counted minutes and the rentals: safe to repeat or overlap.
@shared_task(name="exchange.reliability_refresh", time_limit=600, soft_time_limit=540)
def reliability_refresh_task() -> dict[str, int]:
    """Recompute servers' and sellers' reliability (beat: hourly)."""
    refreshed = services.reliability_refresh()
    return {"servers": refreshed.servers_changed, "sellers": refreshed.sellers_changed}


# Compares each alert with the best ask now, under row locks: safe to repeat or overlap.
@shared_task(name="exchange.price_alerts_check", time_limit=60, soft_time_limit=50)
def price_alerts_check_task() -> dict[str, int]:
    """Email the buyers whose price alerts the book has reached (beat: every 30 seconds)."""
    checked = services.price_alerts_check()
    return {"notified": checked.notified, "rearmed": checked.rearmed}


# Reads a banner, then delivers at most once (rental_deliver locks the rental and checks it is not
# delivered yet): safe to repeat or overlap. Queued by the heartbeats of a login with its own sshd.
@shared_task(name="exchange.rental_login_probe", time_limit=60, soft_time_limit=50, acks_late=True,
             reject_on_worker_lost=True)
def rental_login_probe_task(rental_id: int) -> bool:
    """Deliver the rental once its own sshd answers with an SSH banner."""
    return services.rental_login_probe(rental_id=rental_id) is not None
