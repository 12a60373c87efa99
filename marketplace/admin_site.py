"""The operators' admin site: Django's, with the operations page and its link on the index."""

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.urls import path
from django.utils.translation import gettext_lazy as _

from billing.selectors import operations_summary
from sellers.agent_texts import mismatch_sentences
from sellers.selectors import agents_in_trouble


class EverXCloudAdminSite(admin.AdminSite):
    site_header = "EverXCloud"
    site_title = _("EverXCloud operations")
    index_title = _("Run the exchange")
    index_template = "admin/everxcloud_index.html"

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
        }
        return TemplateResponse(request, "admin/operations.html", context)
