from django.contrib import admin, messages
from django.utils.translation import gettext_lazy as _

from marketplace.errors import DomainError

from .models import Seller, SellerApplication, SellerInvitation, SellerMembership, Server
from .services import (
    application_approve,
    application_ask_info,
    application_reject,
    server_activate,
    server_retire,
)


class ServerInline(admin.TabularInline):
    model = Server
    extra = 0
    fields = ("name", "gpu_model", "gpu_count", "gpus_rented", "region")
    readonly_fields = ("gpus_rented",)


@admin.register(Seller)
class SellerAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "country", "created_at")
    search_fields = ("name", "slug")
    prepopulated_fields = {"slug": ("name",)}
    inlines = (ServerInline,)


@admin.register(Server)
class ServerAdmin(admin.ModelAdmin):
    list_display = ("name", "seller", "gpu_model", "gpu_count", "gpus_rented", "region", "status")
    list_filter = ("status", "gpu_model", "region")
    search_fields = ("name", "seller__name")
    list_select_related = ("seller", "gpu_model")
    readonly_fields = ("gpus_rented", "status")
    actions = ("activate", "retire")

    def _run(self, request, queryset, act, done_message):
        done = 0
        for server in queryset:
            try:
                act(server)
            except DomainError as error:
                self.message_user(request, f"{server}: {error.message}", messages.ERROR)
            else:
                done += 1
        if done:
            self.message_user(request, done_message % {"count": done}, messages.SUCCESS)

    @admin.action(description=_("Activate the selected servers (verified)"))
    def activate(self, request, queryset):
        self._run(request, queryset, lambda server: server_activate(server_id=server.pk),
                  _("%(count)s servers activated."))

    @admin.action(description=_("Retire the selected servers"))
    def retire(self, request, queryset):
        self._run(request, queryset, lambda server: server_retire(seller=server.seller, server_id=server.pk),
                  _("%(count)s servers retired."))


class SellerMembershipInline(admin.TabularInline):
    model = SellerMembership
    extra = 0
    fields = ("user", "role", "created_at")
    readonly_fields = ("created_at",)
    raw_id_fields = ("user",)


SellerAdmin.inlines = (ServerInline, SellerMembershipInline)


@admin.register(SellerApplication)
class SellerApplicationAdmin(admin.ModelAdmin):
    """Operators review applications: approve, reject with a reason or ask a question.

    To reject or ask, write the reason (or question) in its field, save, then run the action on
    the application; each action goes through the service, which records who and when."""

    list_display = ("__str__", "applicant", "country", "status", "submitted_at", "decided_at", "decided_by")
    list_filter = ("status", "country")
    search_fields = ("legal_name", "applicant__email", "vat_id", "registration_number")
    list_select_related = ("applicant", "decided_by")
    readonly_fields = (
        "applicant", "status", "legal_name", "country", "registration_number", "vat_id", "address",
        "contact_name", "contact_phone", "website", "datacentre_locations", "planned_inventory", "iban",
        "account_holder", "terms_accepted_at", "submitted_at", "decided_at", "decided_by", "created_at",
        "updated_at",
    )
    fields = readonly_fields[:2] + ("operator_question", "rejection_reason") + readonly_fields[2:]
    actions = ("approve", "reject", "ask_info")

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def _decide(self, request, queryset, decide, done_message):
        done = 0
        for application in queryset:
            try:
                decide(application)
            except DomainError as error:
                self.message_user(request, f"{application}: {error.message}", messages.ERROR)
            else:
                done += 1
        if done:
            self.message_user(request, done_message % {"count": done}, messages.SUCCESS)

    @admin.action(description=_("Approve the selected applications"))
    def approve(self, request, queryset):
        self._decide(
            request, queryset,
            lambda app: application_approve(application_id=app.pk, operator=request.user),
            _("%(count)s applications approved."),
        )

    @admin.action(description=_("Reject the selected applications (with the reason written in each)"))
    def reject(self, request, queryset):
        self._decide(
            request, queryset,
            lambda app: application_reject(
                application_id=app.pk, operator=request.user, reason=app.rejection_reason
            ),
            _("%(count)s applications rejected."),
        )

    @admin.action(description=_("Ask for more information (the question written in each)"))
    def ask_info(self, request, queryset):
        self._decide(
            request, queryset,
            lambda app: application_ask_info(
                application_id=app.pk, operator=request.user, question=app.operator_question
            ),
            _("%(count)s applicants asked for more information."),
        )


@admin.register(SellerInvitation)
class SellerInvitationAdmin(admin.ModelAdmin):
    list_display = ("email", "seller", "invited_by", "created_at", "accepted_at")
    list_filter = ("accepted_at",)
    search_fields = ("email", "seller__name")
    list_select_related = ("seller", "invited_by")
    readonly_fields = ("created_at", "accepted_at")
