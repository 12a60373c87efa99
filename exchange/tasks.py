from celery import shared_task

# The module, not its names: the services queue these tasks (a cycle of modules).
from . import services


@shared_task(name="exchange.bids_expire", time_limit=120, soft_time_limit=100)
def bids_expire_task() -> int:
    return services.bids_expire()


@shared_task(name="exchange.bid_cancelled_email_send", time_limit=60, soft_time_limit=45)
def bid_cancelled_email_send(bid_id: int) -> bool:
    return services.bid_cancelled_email_send(bid_id=bid_id)


@shared_task(name="exchange.seller_status_email_send", time_limit=60, soft_time_limit=45)
def seller_status_email_send(seller_id: int) -> int:
    return services.seller_status_email_send(seller_id=seller_id)
