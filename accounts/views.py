"""The signed-in user's own pages. Each reads through selectors scoped to request.user."""

from allauth.mfa.utils import is_mfa_enabled
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from billing.selectors import account_overview
from marketplace.errors import DomainError
from marketplace.formatting import country_name, datetime_zone
from marketplace.views_support import own_path
from sellers.selectors import seller_for_api_token_user
from sellers.services import seller_api_token_create

from .exceptions import ApiTokenNotFound
from .forms import ApiTokenForm, ProfileForm
from .selectors import api_token_get_for_user, api_tokens_for_user
from .services import api_token_revoke, profile_ensure, profile_update


@login_required
def overview(request):
    profile = profile_ensure(user=request.user)
    return render(request, "accounts/overview.html", {
        "overview": account_overview(user=request.user, low_balance_hours=profile.low_balance_warning_hours),
        "profile": profile,
        "profile_country": country_name(profile.billing_country) if profile.billing_country else "",
        "mfa_enabled": is_mfa_enabled(request.user),
    })


@login_required
def profile_edit(request):
    profile = profile_ensure(user=request.user)
    form = ProfileForm(request.POST or None, instance=profile)
    # A page that sent the buyer here (the top-up, for a missing country) gets them back after saving.
    back = own_path(request, request.POST.get("next") or request.GET.get("next"))
    if request.method == "POST" and form.is_valid():
        fields = {name: form.cleaned_data[name] for name in ProfileForm.Meta.fields}
        profile_update(user=request.user, fields=fields)
        messages.success(request, _("Your profile is saved."))
        return redirect(back or "accounts:profile")
    if request.method == "POST":
        # A rejected form changes nothing: show the values as they are stored.
        profile.refresh_from_db()
    return render(request, "accounts/profile.html", {
        "form": form, "profile": profile, "next": back,
        "now": datetime_zone(timezone.now(), zone=profile.time_zone),
    })


def _api_tokens_page(request, form, seller, status=200):
    now = timezone.now()
    tokens = [(token, token.state(now)) for token in api_tokens_for_user(user=request.user)]
    return render(request, "accounts/api_tokens.html", {
        "form": form, "tokens": tokens, "seller": seller,
    }, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def api_tokens(request):
    """The user's API tokens and the form that creates one. The new token's secret is shown once,
    on the answer to the form (never stored, never in a redirect's next page)."""
    seller = seller_for_api_token_user(user=request.user)
    form = ApiTokenForm(request.POST or None, can_sell=seller is not None)
    if request.method == "POST" and form.is_valid():
        try:
            token, secret = seller_api_token_create(
                user=request.user, name=form.cleaned_data["name"], scopes=form.cleaned_data["scopes"],
                expires_at=form.expires_at(),
            )
        except DomainError as rejected:
            form.add_error(None, rejected.message)
        else:
            return render(request, "accounts/api_token_created.html", {"token": token, "secret": secret})
    return _api_tokens_page(request, form, seller, status=400 if form.errors else 200)


@login_required
@require_http_methods(["GET", "POST"])
def api_token_revoke_confirm(request, pk: int):
    """Revoking asks once more (programs using the token stop at once), then revokes."""
    token = api_token_get_for_user(user=request.user, token_id=pk)
    if token is None:
        raise Http404(_("No such token."))
    if request.method == "POST":
        try:
            api_token_revoke(user=request.user, token_id=pk)
        except ApiTokenNotFound as missing:
            raise Http404(_("No such token.")) from missing
        messages.success(request, _("The token “%(name)s” is revoked.") % {"name": token.name})
        return redirect("accounts:api-tokens")
    return render(request, "accounts/api_token_revoke.html", {"token": token})
