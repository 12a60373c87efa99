from celery import shared_task

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
