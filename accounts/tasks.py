from celery import shared_task

# The module, not its names: the services queue these tasks (a cycle of modules).
from . import services


@shared_task(name="accounts.vat_id_vies_check", time_limit=60, soft_time_limit=45)
def vat_id_vies_check(profile_id: int) -> str:
    return services.profile_vat_id_vies_check(profile_id=profile_id)


@shared_task(name="accounts.vat_ids_refresh", time_limit=120, soft_time_limit=100)
def vat_ids_refresh() -> int:
    """Queue a fresh VIES check for each EU VAT ID checked over 30 days ago or unanswered (beat: daily)."""
    return len(services.vat_ids_vies_refresh())
