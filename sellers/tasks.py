from celery import shared_task

# The module, not its names: the services queue these tasks (a cycle of modules).
from . import services


@shared_task(name="sellers.application_decision_email_send", time_limit=60, soft_time_limit=45)
def application_decision_email_send(application_id: int) -> bool:
    return services.application_decision_email_send(application_id=application_id)


@shared_task(name="sellers.invitation_email_send", time_limit=60, soft_time_limit=45)
def invitation_email_send(invitation_id: int) -> bool:
    return services.invitation_email_send(invitation_id=invitation_id)
