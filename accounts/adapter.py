from dataclasses import dataclass
from urllib.parse import urlsplit
from uuid import uuid4

from allauth.account.adapter import DefaultAccountAdapter
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.utils import translation

from marketplace.emails import SITE_NAME, email_send

from .services import profile_ensure
from .time_zones import time_zone_proposed


@dataclass(frozen=True)
class EmailSite:
    """What allauth's templates call `current_site`: EverXCloud at the site's address, never the
    host a request happened to use (which made them say "Hello from 127.0.0.1:8000!")."""

    name: str
    domain: str


class AccountAdapter(DefaultAccountAdapter):
    def save_user(self, request, user, form, commit=True):
        user = super().save_user(request, user, form, commit=commit)
        if commit:
            language = translation.get_language()
            browser = getattr(form, "cleaned_data", {}).get("time_zone")
            profile_ensure(
                user=user, language=language,
                time_zone=time_zone_proposed(browser=browser, language=language),
            )
        return user

    def send_mail(self, template_prefix: str, email: str, context: dict) -> None:
        """allauth's emails (its templates follow our `<prefix>_subject.txt` / `_message.txt`
        convention) go through the one helper and the outbox, in the language of the user behind
        the address, else the language of the page that asked for them. Each is its own event: a
        second reset link asked for is a second email."""
        user = context.get("user")
        values = {
            "email": email, "current_site": self._email_site(),
            "subject_prefix": settings.ACCOUNT_EMAIL_SUBJECT_PREFIX, **context,
        }
        email_send(
            template=template_prefix, context=values, email=email, key=f"allauth:{uuid4()}",
            user=user if getattr(user, "pk", None) else None, language=translation.get_language(),
        )

    def get_client_ip(self, request) -> str:
        """The address rate limits count (settings ALLAUTH_TRUSTED_PROXY_COUNT and
        ALLAUTH_TRUSTED_CLIENT_IP_HEADER). allauth refuses a request that did not come through the
        proxies we trust (fewer X-Forwarded-For entries than proxies: an error page; no or no valid
        client address header: 403); such a request is counted by its connection's own address."""
        try:
            return super().get_client_ip(request)
        except (ImproperlyConfigured, PermissionDenied):
            address = request.META.get("REMOTE_ADDR")
            if not address:
                raise PermissionDenied("No client address") from None
            return address

    def _email_site(self) -> EmailSite:
        domain = urlsplit(settings.SITE_URL).netloc
        if not domain and self.request is not None:
            domain = self.request.get_host()
        return EmailSite(name=SITE_NAME, domain=domain)
