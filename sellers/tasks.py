from celery import shared_task


@shared_task(name="sellers.application_decision_email_send", time_limit=60, soft_time_limit=45)
def application_decision_email_send(application_id: int) -> bool:
    from .services import application_decision_email_send as send

    return send(application_id=application_id)
