from celery import shared_task

from .services import top_up_receipt_send as send_receipt


@shared_task(name="billing.top_up_receipt_send", time_limit=60, soft_time_limit=45)
def top_up_receipt_send(top_up_id: int) -> bool:
    return send_receipt(top_up_id=top_up_id)
