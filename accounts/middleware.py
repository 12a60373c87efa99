from allauth.mfa.utils import is_mfa_enabled
from django.contrib import messages
from django.shortcuts import redirect
from django.utils.translation import gettext as _


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
