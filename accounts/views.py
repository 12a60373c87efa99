"""The signed-in user's own pages. Each reads through selectors scoped to request.user."""

from allauth.mfa.utils import is_mfa_enabled
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from billing.selectors import account_overview
from marketplace.formatting import country_name

from .forms import ProfileForm
from .services import profile_ensure, profile_update


@login_required
def overview(request):
    profile = profile_ensure(user=request.user)
    return render(request, "accounts/overview.html", {
        "overview": account_overview(user=request.user),
        "profile": profile,
        "profile_country": country_name(profile.billing_country) if profile.billing_country else "",
        "mfa_enabled": is_mfa_enabled(request.user),
    })


@login_required
def profile_edit(request):
    profile = profile_ensure(user=request.user)
    form = ProfileForm(request.POST or None, instance=profile)
    if request.method == "POST" and form.is_valid():
        fields = {name: form.cleaned_data[name] for name in ProfileForm.Meta.fields}
        profile_update(user=request.user, fields=fields)
        messages.success(request, _("Your profile is saved."))
        return redirect("accounts:profile")
    if request.method == "POST":
        # A rejected form changes nothing: show the values as they are stored.
        profile.refresh_from_db()
    return render(request, "accounts/profile.html", {"form": form, "profile": profile})
