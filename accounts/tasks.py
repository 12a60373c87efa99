from celery import shared_task
from django.db import DatabaseError

# The module, not its names: the services queue these tasks (a cycle of modules).
from . import services


# Asking again is harmless: a "valid" answer is announced each time, and the VAT refunds it leads
# to are made once per top-up. So a database failure (of the answer or of a refund) is retried.
@shared_task(
    name="accounts.vat_id_vies_check", time_limit=60, soft_time_limit=45,
    autoretry_for=(DatabaseError,), retry_backoff=True, max_retries=5,
)
def vat_id_vies_check(profile_id: int) -> str:
    return services.profile_vat_id_vies_check(profile_id=profile_id)


@shared_task(name="accounts.vat_ids_refresh", time_limit=120, soft_time_limit=100)
def vat_ids_refresh() -> int:
    """Queue a fresh VIES check for each EU VAT ID whose answer expires within a day (VIES_VALID_FOR_DAYS)
    or that VIES never answered (beat: daily)."""
    return len(services.vat_ids_vies_refresh())
