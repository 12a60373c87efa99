"""Reads of accounts: a user's API tokens, and the token a request presents."""

from datetime import datetime

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from .models import ApiToken, Profile
from .tokens import TOKEN_START, token_secret_hash


def api_tokens_for_user(*, user) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user).select_related("seller").order_by("-created_at", "-pk")


def api_token_for_secret(*, secret: str, now: datetime | None = None) -> ApiToken | None:
    """The usable token (not revoked, not expired, its user active) whose secret this is, or None."""
    if not secret.startswith(TOKEN_START) or len(secret) > 200:
        return None
    token = (
        ApiToken.objects.select_related("user", "seller")
        .filter(secret_hash=token_secret_hash(secret), user__is_active=True)
        .first()
    )
    if token is None or not token.is_usable(now or timezone.now()):
        return None
    return token


def user_language(*, user) -> str:
    """The language the user's emails speak (their profile's), or the site's default."""
    profile = Profile.objects.filter(user=user).only("preferred_language").first()
    return profile.preferred_language if profile else settings.LANGUAGE_CODE


def api_token_get_for_user(*, user, token_id: int) -> ApiToken | None:
    """One of the user's tokens; another user's is None, as if it did not exist."""
    return ApiToken.objects.filter(user=user, pk=token_id).select_related("seller").first()
