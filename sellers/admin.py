from django.contrib import admin
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from exchange.services import seller_reinstate, seller_suspend, server_activate, server_retire_by_operator
from marketplace.admin_tools import (
    OperatorPermissions,
    OptionalReasonForm,
    ReadOnlyAdminMixin,
    ReasonForm,
    action_run,
    action_with_form,
)

from .models import Seller, SellerApplication, SellerInvitation, SellerMembership, Server
from .services import application_approve, application_ask_info, application_reject


class ServerInline(admin.TabularInline):
    model = Server
    extra = 0
    fields = ("name", "gpu_model", "gpu_count", "gpus_rented", "region", "status")
    readonly_fields = fields
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False


class SellerMembershipInline(ReadOnlyAdminMixin, admin.TabularInline):
    """Members join by invitation from the seller's owners, in the portal: the admin only reads."""

    model = SellerMembership
    extra = 0
    fields = ("user", "role", "created_at")
    readonly_fields = fields


@admin.register(Seller)
class SellerAdmin(OperatorPermissions, admin.ModelAdmin):
    """Sellers are created by approving an application. Suspending withdraws every offer of the
    seller (running rentals continue); reinstating lets it post offers again."""

    list_display = ("name", "slug", "country", "suspended_at", "created_at")
    list_filter = (("suspended_at", admin.EmptyFieldListFilter), "country")
    search_fields = ("name", "slug")
    fields = ("name", "slug", "country", "suspended_at", "suspension_reason", "payout_iban",
              "payout_account_holder", "created_at")
    # The seller comes from its approved application and changes through the portal (its owners)
    # or the actions here, which are audited; no field is edited directly.
    readonly_fields = fields
    inlines = (ServerInline, SellerMembershipInline)
    actions = ("suspend", "reinstate")

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description=_("Suspend the selected sellers (their offers are withdrawn)"),
                  permissions=["decide_seller"])
    def suspend(self, request, queryset):
        return action_with_form(
            self, request, queryset, form_class=ReasonForm,
            title=gettext("Suspend sellers"),
            intro=gettext(
                "Every active offer of these sellers is withdrawn and they cannot post new ones until "
                "reinstated. Rentals already running continue and are charged as usual."
            ),
            perform=lambda seller, data: seller_suspend(
                seller_id=seller.pk, operator=request.user, reason=data["reason"]
            ),
            done_message=lambda count: ngettext(
                "%(count)d seller suspended.", "%(count)d sellers suspended.", count
            ) % {"count": count},
        )

    @admin.action(description=_("Reinstate the selected sellers"), permissions=["decide_seller"])
    def reinstate(self, request, queryset):
        return action_with_form(
            self, request, queryset, form_class=ReasonForm,
            title=gettext("Reinstate sellers"),
            intro=gettext(
                "These sellers can post offers again. Offers withdrawn by the suspension stay withdrawn."
            ),
            perform=lambda seller, data: seller_reinstate(
                seller_id=seller.pk, operator=request.user, reason=data["reason"]
            ),
            done_message=lambda count: ngettext(
                "%(count)d seller reinstated.", "%(count)d sellers reinstated.", count
            ) % {"count": count},
        )


@admin.register(Server)
class ServerAdmin(OperatorPermissions, admin.ModelAdmin):
    """Sellers register and edit their servers in the portal; operators verify (activate) or retire
    them here, with the actions."""

    list_display = ("name", "seller", "gpu_model", "gpu_count", "gpus_rented", "region", "status")
    list_filter = ("status", "gpu_model", "region")
    search_fields = ("name", "seller__name", "host")
    list_select_related = ("seller", "gpu_model")
    actions = ("activate", "retire")

    def get_readonly_fields(self, request, obj=None):
        return [field.name for field in Server._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description=_("Activate the selected servers (verified)"), permissions=["decide_seller"])
    def activate(self, request, queryset):
        action_run(
            self, request, queryset,
            perform=lambda server: server_activate(server_id=server.pk, operator=request.user),
            done_message=lambda count: ngettext(
                "%(count)d server activated.", "%(count)d servers activated.", count
            ) % {"count": count},
        )

    @admin.action(description=_("Retire the selected servers"), permissions=["decide_seller"])
    def retire(self, request, queryset):
        return action_with_form(
            self, request, queryset, form_class=OptionalReasonForm,
            title=gettext("Retire servers"),
            intro=gettext(
                "Their offers are withdrawn for good. A server with running rentals cannot be retired."
            ),
            perform=lambda server, data: server_retire_by_operator(
                server_id=server.pk, operator=request.user, reason=data["reason"]
            ),
            done_message=lambda count: ngettext(
                "%(count)d server retired.", "%(count)d servers retired.", count
            ) % {"count": count},
        )


@admin.register(SellerApplication)
class SellerApplicationAdmin(OperatorPermissions, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Operators review applications with the actions: approve, reject with a reason, or ask the
    applicant a question. Each goes through its service, which records who, when and why."""

    list_display = ("__str__", "applicant", "country", "status", "submitted_at", "decided_at", "decided_by")
    list_filter = ("status", "country")
    search_fields = ("legal_name", "applicant__email", "vat_id", "registration_number")
    list_select_related = ("applicant", "decided_by")
    fields = (
        "applicant", "status", "operator_question", "rejection_reason", "legal_name", "country",
        "registration_number", "vat_id", "address", "contact_name", "contact_phone", "website",
        "datacentre_locations", "planned_inventory", "iban", "account_holder", "terms_accepted_at",
        "submitted_at", "decided_at", "decided_by", "created_at", "updated_at",
    )
    readonly_fields = fields
    actions = ("approve", "reject", "ask_info")

    @admin.action(description=_("Approve the selected applications"), permissions=["decide_seller"])
    def approve(self, request, queryset):
        action_run(
            self, request, queryset,
            perform=lambda app: application_approve(application_id=app.pk, operator=request.user),
            done_message=lambda count: ngettext(
                "%(count)d application approved.", "%(count)d applications approved.", count
            ) % {"count": count},
        )

    @admin.action(description=_("Reject the selected applications (with a reason)"),
                  permissions=["decide_seller"])
    def reject(self, request, queryset):
        return action_with_form(
            self, request, queryset, form_class=ReasonForm,
            title=gettext("Reject applications"),
            intro=gettext("The applicant receives this reason by email, in their language's template."),
            perform=lambda app, data: application_reject(
                application_id=app.pk, operator=request.user, reason=data["reason"]
            ),
            done_message=lambda count: ngettext(
                "%(count)d application rejected.", "%(count)d applications rejected.", count
            ) % {"count": count},
        )

    @admin.action(description=_("Ask the applicants for more information"), permissions=["decide_seller"])
    def ask_info(self, request, queryset):
        return action_with_form(
            self, request, queryset, form_class=ReasonForm,
            title=gettext("Ask for more information"),
            intro=gettext(
                "Write your question in the reason field: the applicant receives it by email, edits "
                "the application and submits it again."
            ),
            perform=lambda app, data: application_ask_info(
                application_id=app.pk, operator=request.user, question=data["reason"]
            ),
            done_message=lambda count: ngettext(
                "%(count)d applicant asked for more information.",
                "%(count)d applicants asked for more information.", count,
            ) % {"count": count},
        )


@admin.register(SellerMembership)
class SellerMembershipAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("user", "seller", "role", "created_at")
    list_filter = ("role",)
    search_fields = ("user__email", "seller__name")
    list_select_related = ("user", "seller")


@admin.register(SellerInvitation)
class SellerInvitationAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("email", "seller", "invited_by", "created_at", "accepted_at")
    list_filter = ("accepted_at",)
    search_fields = ("email", "seller__name")
    list_select_related = ("seller", "invited_by")
    readonly_fields = ("created_at", "accepted_at")
