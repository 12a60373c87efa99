"""The way back from two-factor set-up: `sellers.views.two_factor` keeps in the session the page
that needed it (the application, the portal). Once two-factor authentication is on, the set-up's
pages link back there; the page itself forgets the way back when it is reached."""

from allauth.mfa.utils import is_mfa_enabled
from django import template

from ..views import TWO_FACTOR_NEXT

register = template.Library()


@register.simple_tag
def two_factor_return(request) -> str:
    back = request.session.get(TWO_FACTOR_NEXT, "") if hasattr(request, "session") else ""
    if back and request.user.is_authenticated and is_mfa_enabled(request.user):
        return back
    return ""
