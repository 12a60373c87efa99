from celery import shared_task

from .services import top_up_receipt_send as send_receipt


@shared_task(name="billing.top_up_receipt_send", time_limit=60, soft_time_limit=45)
def top_up_receipt_send(top_up_id: int) -> bool:
    return send_receipt(top_up_id=top_up_id)


@shared_task(name="billing.rentals_charge_due", time_limit=300, soft_time_limit=240)
def rentals_charge_due() -> dict[str, int]:
    """Charge every rental hour that is due (beat: every minute). Safe to run twice at once."""
    from django.conf import settings

    from .charging import rentals_charge_due as charge_due

    return charge_due(limit=settings.RENTAL_CHARGE_BATCH_SIZE)


@shared_task(name="billing.rental_unpaid_email_send", time_limit=60, soft_time_limit=45)
def rental_unpaid_email_send(rental_id: int) -> bool:
    from .charging import rental_unpaid_email_send as send

    return send(rental_id=rental_id)
