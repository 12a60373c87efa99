"""Every write to accounts and profiles."""

import logging
from datetime import datetime, timedelta

import requests
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from .models import Profile, User, VatIdStatus
from .vat_ids import EU_MEMBER_STATES

logger = logging.getLogger(__name__)


def profile_ensure(*, user: User, language: str | None = None) -> Profile:
    profile, _created = Profile.objects.get_or_create(
        user=user, defaults={"preferred_language": language or settings.LANGUAGE_CODE}
    )
    return profile


@transaction.atomic
def profile_update(*, user: User, fields: dict) -> Profile:
    """Save the profile; a new EU VAT ID is queued for a VIES check after commit."""
    profile = Profile.objects.select_for_update().get(user=user)
    previous_vat_id = profile.vat_id
    for name, value in fields.items():
        setattr(profile, name, value)
    if not profile.vat_id:
        profile.vat_id_status, profile.vat_id_checked_at = VatIdStatus.NONE, None
    elif profile.vat_id != previous_vat_id:
        profile.vat_id_status, profile.vat_id_checked_at = VatIdStatus.UNCHECKED, None
        if profile.billing_country in EU_MEMBER_STATES:
            from .tasks import vat_id_vies_check

            transaction.on_commit(lambda: vat_id_vies_check.delay(profile.pk))
    profile.full_clean()
    profile.save()
    return profile


def _vies_says(number: str) -> bool | None:
    """True or False as VIES answers; None when it does not answer (or is switched off)."""
    if not settings.VIES_URL:
        return None
    country, local = number[:2], number[2:]
    try:
        response = requests.get(
            settings.VIES_URL.format(country=country, number=local), timeout=10
        )
        response.raise_for_status()
        answer = response.json()
    except (requests.RequestException, ValueError):
        logger.info("VIES did not answer for %s", country)
        return None
    valid = answer.get("isValid", answer.get("valid"))
    return valid if isinstance(valid, bool) else None


def profile_vat_id_vies_check(*, profile_id: int) -> str:
    """Ask VIES about the profile's VAT ID and record the answer: valid, invalid or unknown."""
    profile = Profile.objects.filter(pk=profile_id).first()
    if profile is None or not profile.vat_id:
        return VatIdStatus.NONE
    number = profile.vat_id
    verdict = _vies_says(number)
    status = {True: VatIdStatus.VALID, False: VatIdStatus.INVALID}.get(verdict, VatIdStatus.UNKNOWN)
    # Record the answer only if the number did not change while VIES was thinking.
    Profile.objects.filter(pk=profile_id, vat_id=number).update(
        vat_id_status=status, vat_id_checked_at=timezone.now()
    )
    return status


# A VIES answer is trusted this long; older ones (and "VIES did not answer") are asked again.
VIES_CHECK_MAX_AGE = timedelta(days=30)


def vat_ids_vies_refresh(
    *, now: datetime | None = None, max_age: timedelta = VIES_CHECK_MAX_AGE
) -> list[int]:
    """Queue a new VIES check (after commit) for every profile with an EU VAT ID whose last check
    is older than `max_age`, never happened, or got no answer from VIES. Returns their ids."""
    cutoff = (now or timezone.now()) - max_age
    profile_ids = list(
        Profile.objects.filter(billing_country__in=EU_MEMBER_STATES)
        .exclude(vat_id="")
        .filter(
            Q(vat_id_status__in=(VatIdStatus.UNKNOWN, VatIdStatus.UNCHECKED))
            | Q(vat_id_checked_at__isnull=True)
            | Q(vat_id_checked_at__lt=cutoff)
        )
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    if profile_ids:
        from .tasks import vat_id_vies_check

        for profile_id in profile_ids:
            transaction.on_commit(lambda profile_id=profile_id: vat_id_vies_check.delay(profile_id))
    return profile_ids
