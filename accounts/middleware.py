from allauth.mfa.utils import is_mfa_enabled
from django.contrib import messages
from django.core.exceptions import ObjectDoesNotExist
from django.shortcuts import redirect
from django.utils import timezone
from django.utils.translation import gettext as _

from .time_zones import time_zone_is_known


class StaffTwoFactorMiddleware:
    """Staff reach the admin only with two-factor authentication turned on."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        match = request.resolver_match
        user = getattr(request, "user", None)
        if not match or "admin" not in match.namespaces or not user or not user.is_authenticated:
            return None
        if user.is_staff and not is_mfa_enabled(user):
            messages.warning(
                request, _("Turn on two-factor authentication before you open the admin.")
            )
            return redirect("mfa_activate_totp")
        return None


class TimeZoneMiddleware:
    """Every page a signed-in user sees shows times in their profile's zone; others see UTC. The
    profile comes with the user (accounts.backends): no query of its own."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        zone = None
        if user is not None and user.is_authenticated:
            try:
                zone = user.profile.time_zone
            except ObjectDoesNotExist:
                zone = None
        if time_zone_is_known(zone):
            timezone.activate(zone)
        else:
            timezone.deactivate()
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()
