from celery import shared_task


@shared_task(name="sellers.application_decision_email_send", time_limit=60, soft_time_limit=45)
def application_decision_email_send(application_id: int) -> bool:
    from .services import application_decision_email_send as send

    return send(application_id=application_id)


@shared_task(name="sellers.invitation_email_send", time_limit=60, soft_time_limit=45)
def invitation_email_send(invitation_id: int) -> bool:
    from .services import invitation_email_send as send

    return send(invitation_id=invitation_id)


@shared_task(name="sellers.seller_status_email_send", time_limit=60, soft_time_limit=45)
def seller_status_email_send(seller_id: int) -> int:
    from .services import seller_status_email_send as send

    return send(seller_id=seller_id)
