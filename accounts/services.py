"""Every write to accounts and profiles."""

import logging
from datetime import datetime, timedelta

import requests
from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

# The module, not its names: the tasks call these services back (a cycle of modules).
from . import tasks
from .exceptions import ApiTokenNotFound, ApiTokenRejected, OperatorNotAllowed, ReasonRequired
from .models import ApiToken, ApiTokenScope, AuditAction, AuditEntry, Profile, User, VatIdStatus
from .tokens import PREFIX_LENGTH, token_secret_hash, token_secret_new
from .vat_ids import EU_MEMBER_STATES
from .vies import vat_id_confirmation_announce, vies_answer_max_age

logger = logging.getLogger(__name__)


def profile_ensure(*, user: User, language: str | None = None, time_zone: str | None = None) -> Profile:
    """The user's profile, created on first need; a new one speaks `language` and shows times in
    `time_zone` (else UTC)."""
    defaults = {"preferred_language": language or settings.LANGUAGE_CODE}
    if time_zone:
        defaults["time_zone"] = time_zone
    profile, _created = Profile.objects.get_or_create(user=user, defaults=defaults)
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
            transaction.on_commit(lambda: tasks.vat_id_vies_check.delay(profile.pk))
    profile.full_clean()
    profile.save()
    return profile


# VIES's REST answer names in `userError` why it gave no verdict: the member state's register is
# down, too many requests... Only these two mean that it looked the number up.
VIES_VERDICTS = frozenset({"VALID", "INVALID"})


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
    if not isinstance(answer, dict):
        return None
    # "isValid": false comes with "userError": "MS_UNAVAILABLE" when the member state is down:
    # that is no answer, not a rejection.
    if answer.get("userError", "VALID") not in VIES_VERDICTS:  # no userError at all: a verdict
        logger.info("VIES gave no verdict for %s: %s", country, answer.get("userError"))
        return None
    valid = answer.get("isValid", answer.get("valid"))
    return valid if isinstance(valid, bool) else None


def profile_vat_id_vies_check(*, profile_id: int) -> str:
    """Ask VIES about the profile's VAT ID and record the answer: valid, invalid or unknown (which
    keeps an earlier "valid" or "invalid" and its date). Returns what VIES said this time. A "valid"
    answer is announced (`accounts.vies`), so that billing refunds the VAT it charged while the
    number was awaiting VIES."""
    profile = Profile.objects.filter(pk=profile_id).first()
    if profile is None or not profile.vat_id:
        return VatIdStatus.NONE
    number = profile.vat_id
    verdict = _vies_says(number)
    status = {True: VatIdStatus.VALID, False: VatIdStatus.INVALID}.get(verdict, VatIdStatus.UNKNOWN)
    # Record the answer only if the number did not change while VIES was thinking.
    same_number = Profile.objects.filter(pk=profile_id, vat_id=number)
    if status == VatIdStatus.UNKNOWN:
        # No answer never erases an answer: a "valid" one confirms the number until it expires.
        same_number = same_number.exclude(vat_id_status__in=(VatIdStatus.VALID, VatIdStatus.INVALID))
    recorded = same_number.update(vat_id_status=status, vat_id_checked_at=timezone.now())
    if recorded and status == VatIdStatus.VALID:
        vat_id_confirmation_announce(user_id=profile.user_id)
    return status


def vat_ids_vies_refresh(*, now: datetime | None = None, max_age: timedelta | None = None) -> list[int]:
    """Queue a new VIES check (after commit) for every profile with an EU VAT ID whose last check
    is older than `max_age`, never happened, or got no answer from VIES. Returns their ids.

    By default `max_age` is a day less than an answer confirms a number (VIES_VALID_FOR_DAYS): the
    refresh runs daily, so a number VIES keeps confirming never expires in between."""
    if max_age is None:
        max_age = max(vies_answer_max_age() - timedelta(days=1), timedelta(0))
    cutoff = (now or timezone.now()) - max_age
    profile_ids = list(
        Profile.objects.filter(billing_country__in=EU_MEMBER_STATES)
        .exclude(vat_id="")
        .filter(
            Q(vat_id_status__in=(VatIdStatus.UNKNOWN, VatIdStatus.UNCHECKED))
            | Q(vat_id_checked_at__isnull=True)
            | Q(vat_id_checked_at__lte=cutoff)
        )
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    for profile_id in profile_ids:
        transaction.on_commit(lambda profile_id=profile_id: tasks.vat_id_vies_check.delay(profile_id))
    return profile_ids


# --- operators: roles and the audit log ----------------------------------------------------------


def operator_require(*, operator: User | None, permission: str) -> None:
    """Refuse (`OperatorNotAllowed`) unless `operator` is active staff holding `permission`."""
    allowed = (
        operator is not None and operator.is_active and operator.is_staff and operator.has_perm(permission)
    )
    if not allowed:
        raise OperatorNotAllowed(_("Your operator role does not allow this action."))


def reason_require(reason: str | None) -> str:
    """The reason, stripped; `ReasonRequired` when there is none."""
    cleaned = (reason or "").strip()
    if not cleaned:
        raise ReasonRequired(_("Write the reason for this action: it goes into the audit log."))
    return cleaned


def audit_record(
    *,
    actor: User,
    action: str,
    target: models.Model,
    reason: str = "",
    before: dict | None = None,
    after: dict | None = None,
) -> AuditEntry:
    """Write one audit entry. Call it inside the action's own transaction, so that the action and
    its entry commit together or not at all."""
    if action not in AuditAction.values:
        raise ValueError(f"Unknown audit action {action!r}.")
    return AuditEntry.objects.create(
        actor=actor,
        action=action,
        target_type=ContentType.objects.get_for_model(target, for_concrete_model=True),
        target_id=str(target.pk),
        target_repr=str(target)[:200],
        before=before,
        after=after,
        reason=reason,
    )


def audit_snapshot(instance: models.Model, fields: tuple[str, ...]) -> dict:
    """The given fields of `instance` as plain values, for an entry's before and after."""
    snapshot = {}
    for name in fields:
        value = getattr(instance, name)
        snapshot[name] = value.pk if isinstance(value, models.Model) else value
    return snapshot


@transaction.atomic
def instance_save_audited(
    *, operator: User, instance: models.Model, changed: list[str], permission: str, action: str,
    reason: str = "",
) -> models.Model:
    """Save an operator's edit of `instance` (an admin form's work) with its audit entry: the
    changed fields as they were in the database and as they are now. Nothing changed, nothing
    recorded. Raises `OperatorNotAllowed`."""
    operator_require(operator=operator, permission=permission)
    fields = tuple(name for name in changed if name in {field.name for field in instance._meta.fields})
    stored = None
    if instance.pk is not None:
        stored = type(instance).objects.select_for_update().filter(pk=instance.pk).first()
    if stored is not None and not fields:
        return instance
    instance.save()
    audit_record(
        actor=operator, action=action, target=instance, reason=reason,
        before=audit_snapshot(stored, fields) if stored is not None else None,
        after=audit_snapshot(instance, fields or tuple(f.name for f in instance._meta.concrete_fields)),
    )
    return instance


def user_access_snapshot(user: User) -> dict:
    """What an operator can change about a user in the admin, roles included, as plain values."""
    return {
        "email": user.email,
        "first_name": user.first_name,
        "last_name": user.last_name,
        "is_active": user.is_active,
        "is_staff": user.is_staff,
        "is_superuser": user.is_superuser,
        "groups": sorted(user.groups.values_list("name", flat=True)),
        "permissions": sorted(
            f"{app}.{codename}"
            for app, codename in user.user_permissions.values_list("content_type__app_label", "codename")
        ),
    }


@transaction.atomic
def user_change_record(*, operator: User, user: User, before: dict | None) -> AuditEntry | None:
    """Record an operator's edit of a user (the admin saves the user and its roles first, in the
    same transaction): only the values that changed, before and after. Granting staff status, a
    group or a permission is an operator action like any other. Raises `OperatorNotAllowed`."""
    operator_require(operator=operator, permission="accounts.change_user")
    after = user_access_snapshot(user)
    if before is not None:
        changed = [name for name in after if before.get(name) != after[name]]
        if not changed:
            return None
        before, after = {name: before[name] for name in changed}, {name: after[name] for name in changed}
    return audit_record(
        actor=operator, action=AuditAction.USER_CHANGE, target=user, before=before, after=after
    )


def user_password_set_record(*, operator: User, user: User) -> AuditEntry:
    """Record that an operator set a user's password in the admin (never the password itself)."""
    operator_require(operator=operator, permission="accounts.change_user")
    return audit_record(
        actor=operator, action=AuditAction.USER_CHANGE, target=user, after={"password": "set by an operator"}
    )


MAX_API_TOKENS = 50
# A token's last use is written at most this often, so that reading through the API is no write.
API_TOKEN_USE_RECORD_EVERY = timedelta(minutes=1)


def _api_token_terms_check(*, user: User, name: str, scopes, expires_at, seller_id, now) -> str:
    name = (name or "").strip()
    if not name:
        raise ApiTokenRejected(
            _("Give the token a name, so that you recognise it later."), code="name_required"
        )
    if len(name) > 100:
        raise ApiTokenRejected(_("The name can have at most 100 characters."), code="name_too_long")
    scopes = set(scopes)
    if not scopes:
        raise ApiTokenRejected(_("Choose at least one scope."), code="scopes_required")
    if not scopes <= set(ApiTokenScope.values):
        raise ApiTokenRejected(_("Choose scopes among read, trade and sell."), code="scope_unknown")
    if (ApiTokenScope.SELL in scopes) != (seller_id is not None):
        raise ApiTokenRejected(
            _("Only a member of a seller with two-factor authentication can create a sell token."),
            code="seller_required",
        )
    if expires_at is not None and expires_at <= now:
        raise ApiTokenRejected(_("The expiry must be in the future."), code="expiry_in_past")
    if ApiToken.objects.filter(user=user, revoked_at__isnull=True).count() >= MAX_API_TOKENS:
        raise ApiTokenRejected(
            _("You have %(max)d active tokens, the most an account can have: revoke one first.")
            % {"max": MAX_API_TOKENS},
            code="tokens_too_many",
        )
    return name


def api_token_create(
    *, user: User, name: str, scopes, expires_at: datetime | None = None, seller_id: int | None = None,
) -> tuple[ApiToken, str]:
    """Create a token and return it with its secret, which is shown once and never stored.

    `seller_id` is required with the `sell` scope and refused without it; checking that the user
    may act for that seller is the seller app's (`sellers.services.seller_api_token_create`).
    Raises `ApiTokenRejected` (nothing written)."""
    now = timezone.now()
    name = _api_token_terms_check(
        user=user, name=name, scopes=scopes, expires_at=expires_at, seller_id=seller_id, now=now
    )
    secret = token_secret_new()
    token = ApiToken.objects.create(
        user=user, name=name, prefix=secret[:PREFIX_LENGTH], secret_hash=token_secret_hash(secret),
        can_read=ApiTokenScope.READ in scopes, can_trade=ApiTokenScope.TRADE in scopes,
        can_sell=ApiTokenScope.SELL in scopes, seller_id=seller_id, created_at=now, expires_at=expires_at,
    )
    return token, secret


def api_token_revoke(*, user: User, token_id: int) -> ApiToken:
    """Revoke one of the user's tokens (again: no change). Raises `ApiTokenNotFound`."""
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().filter(user=user, pk=token_id).first()
        if token is None:
            raise ApiTokenNotFound(_("No such token."))
        if token.revoked_at is None:
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
    return token


def api_token_use_record(*, token: ApiToken, address: str | None, now: datetime | None = None) -> None:
    """Remember when and from where the token was last used, at most once a minute."""
    now = now or timezone.now()
    if token.last_used_at and now - token.last_used_at < API_TOKEN_USE_RECORD_EVERY \
            and token.last_used_address == address:
        return
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now, last_used_address=address)
    token.last_used_at, token.last_used_address = now, address
