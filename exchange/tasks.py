from celery import shared_task

from . import services


@shared_task(name="exchange.bids_expire", time_limit=120, soft_time_limit=100)
def bids_expire_task() -> int:
    return services.bids_expire()
