from celery import shared_task

from .services import profile_vat_id_vies_check


@shared_task(name="accounts.vat_id_vies_check", time_limit=60, soft_time_limit=45)
def vat_id_vies_check(profile_id: int) -> str:
    return profile_vat_id_vies_check(profile_id=profile_id)
