"""The operators' admin site: Django's, with the operations page and its link on the index, and
French titles that elide "de" before a vowel ("Ajout d’utilisateur", not Django's "Ajout de ...")."""

import functools

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.urls import path
from django.utils import translation
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from billing.selectors import operations_summary
from sellers.agent_texts import mismatch_sentences
from sellers.selectors import agents_in_trouble, isolation_in_trouble

from .admin_titles import french_elided


class EverXCloudAdminSite(admin.AdminSite):
    site_header = "EverXCloud"
    site_title = _("EverXCloud operations")
    index_title = _("Run the exchange")
    index_template = "admin/everxcloud_index.html"

    def admin_view(self, view, cacheable=False):
        return super().admin_view(_titled(view), cacheable)

    def get_urls(self):
        return [
            path("operations/", self.admin_view(self.operations), name="operations"),
            *super().get_urls(),
        ]

    def operations(self, request):
        # Money positions and work waiting: for operators with a role (both roles read the ledger).
        if not request.user.has_perm("billing.view_ledgerentry"):
            raise PermissionDenied
        agents = agents_in_trouble()
        for agent in agents.mismatched:
            agent.mismatch_text = mismatch_sentences(mismatch=agent.mismatch)
        context = {
            **self.each_context(request),
            "title": _("Operations"),
            "summary": operations_summary(),
            "agents": agents,
            "isolation": isolation_in_trouble(),
        }
        return TemplateResponse(request, "admin/operations.html", context)


def _titled(view):
    """`view` with the French title of its page elided, before the page is rendered. Every model
    admin's view (ours, Django's and allauth's) goes through the site's `admin_view`."""

    @functools.wraps(view)
    def titled(request, *args, **kwargs):
        response = view(request, *args, **kwargs)
        context = getattr(response, "context_data", None)
        if context and translation.get_language() == "fr" and not response.is_rendered:
            context["title"] = elided_title(context)
        return response

    return titled


# Django's own msgids (its catalogs translate them), named here unmarked: our catalogs need not copy them.
MODEL_TITLES = ("Add %s", "Change %s", "View %s")
APP_TITLE = "%(app)s administration"


def elided_title(context: dict):
    """The page's title with an elided "de" before the model's or the app's name, when the title is
    one of Django's that end with that name (adding, changing or viewing a row; an app's index)."""
    title = str(context.get("title") or "")
    opts = context.get("opts")
    if opts is not None:
        name = str(opts.verbose_name)
        if title in {gettext(template) % name for template in MODEL_TITLES}:
            return french_elided(title, name)
    app_list = context.get("app_list") if context.get("app_label") else None
    if app_list:
        name = str(app_list[0]["name"])
        if title == gettext(APP_TITLE) % {"app": name}:
            return french_elided(title, name)
    return context.get("title")
