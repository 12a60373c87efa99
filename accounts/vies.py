"""What an answer of VIES (the EU's VAT number check) is worth, and who hears of a confirmation.

A VAT ID counts as confirmed only while VIES's last answer about it is "valid" and no older than
`settings.VIES_VALID_FOR_DAYS`. A number VIES has not confirmed (not asked yet, no answer, the
service down, an answer that expired) is awaiting VIES; a number VIES rejected is neither.

Billing reverse-charges only a confirmed number and refunds, once VIES confirms it, the VAT it
charged while the number was awaiting VIES. Billing sits above accounts, so it registers that
refund here at start-up (`BillingConfig.ready`), as it registers the first-hour check with the
exchange:

    from accounts.vies import vat_id_confirmation_hook_register
    vat_id_confirmation_hook_register(top_ups_vat_refund_confirmed)
"""

from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from .models import Profile, VatIdStatus

# The registered hook: fn(*, user_id: int) -> object, called each time VIES confirms a user's number.
ConfirmationHook = Callable[..., object]
_hook: ConfirmationHook | None = None


def vies_answer_max_age() -> timedelta:
    """How long a "valid" answer confirms a number (setting VIES_VALID_FOR_DAYS)."""
    return timedelta(days=settings.VIES_VALID_FOR_DAYS)


def vat_id_confirmed(*, profile: Profile, now: datetime | None = None) -> bool:
    """True while VIES's last answer about the profile's VAT ID is "valid" and not expired."""
    if not profile.vat_id or profile.vat_id_status != VatIdStatus.VALID or profile.vat_id_checked_at is None:
        return False
    return (now or timezone.now()) - profile.vat_id_checked_at <= vies_answer_max_age()


def vat_id_awaiting_vies(*, profile: Profile, now: datetime | None = None) -> bool:
    """True for a VAT ID that VIES has neither confirmed lately nor rejected."""
    return (
        bool(profile.vat_id)
        and profile.vat_id_status != VatIdStatus.INVALID
        and not vat_id_confirmed(profile=profile, now=now)
    )


def vat_id_confirmation_hook_register(fn: ConfirmationHook) -> ConfirmationHook:
    """Install `fn` as what runs when VIES confirms a number (replacing any earlier one)."""
    global _hook
    _hook = fn
    return fn


def vat_id_confirmation_announce(*, user_id: int) -> None:
    """Tell the registered hook that VIES has just confirmed the VAT ID of `user_id`."""
    hook = _hook
    if hook is not None:
        hook(user_id=user_id)
