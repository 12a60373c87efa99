from django import forms
from django.contrib import admin
from django.db import models, transaction
from django.forms.models import BaseInlineFormSet
from django.utils import timezone
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from exchange.services import (
    container_templates_held_refresh,
    seller_reinstate,
    seller_suspend,
    server_activate,
    server_devices_trust,
    server_retire_by_operator,
)
from marketplace.admin_tools import (
    OperatorPermissions,
    OptionalReasonForm,
    ReadOnlyAdminMixin,
    ReasonForm,
    action_run,
    action_with_form,
    share_display,
    yes_no_display,
    yes_no_icon,
)

from .agent_texts import mismatch_sentences
from .models import (
    AgentMonitor,
    AgentToken,
    ContainerTemplate,
    Seller,
    SellerApplication,
    SellerInvitation,
    SellerMembership,
    Server,
    ServerAgent,
    ServerAvailabilityDay,
    ServerEvent,
    ServerHeartbeat,
    ServerIsolationReport,
    ServerTemplate,
)
from .selectors import agent_state_of
from .services import agent_token_revoke, application_approve, application_ask_info, application_reject

HISTORY_SHOWN = 50


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
              "payout_account_holder", share_display(Seller, "reliability"), "created_at")
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


class NewestFormSet(BaseInlineFormSet):
    """A server's history is long: its inline shows the newest rows only (the model's ordering)."""

    def get_queryset(self):
        if not hasattr(self, "_newest"):
            self._newest = super().get_queryset()[:HISTORY_SHOWN]
        return self._newest


heartbeat_accepted = yes_no_display(ServerHeartbeat, "accepted")


class ServerHeartbeatInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = ServerHeartbeat
    formset = NewestFormSet
    extra = 0
    fields = ("received_at", heartbeat_accepted, "problem", "agent_version", "gpu_count", "gpu_error",
              "disk_free_gb", "clock_skew_seconds", "logins_ready", "address")
    readonly_fields = fields
    verbose_name_plural = _("Heartbeats (the newest 50)")

    @admin.display(description=_("GPUs seen"))
    def gpu_count(self, heartbeat: ServerHeartbeat) -> int:
        return len(heartbeat.gpus or [])


class ServerEventInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = ServerEvent
    formset = NewestFormSet
    extra = 0
    fields = ("at", "kind", "detail")
    readonly_fields = fields
    verbose_name_plural = _("Agent events (the newest 50)")


def _agent_of(server: Server) -> ServerAgent | None:
    return getattr(server, "agent", None)  # the reverse one-to-one raises when there is none


@admin.register(Server)
class ServerAdmin(OperatorPermissions, admin.ModelAdmin):
    """Sellers register and edit their servers in the portal; operators verify (activate) or retire
    them here, with the actions. The agent's state and history are read here, never changed."""

    list_display = ("name", "seller", "gpu_model", "gpu_count", "gpus_rented", "region", "status",
                    "isolation_level", "agent_state")
    list_filter = ("status", "isolation_level", "gpu_model", "region",
                   ("agent__unreachable_since", admin.EmptyFieldListFilter))
    search_fields = ("name", "seller__name", "host")
    list_select_related = ("seller", "gpu_model", "agent")
    actions = ("activate", "retire", "devices_trust")
    inlines = (ServerEventInline, ServerHeartbeatInline)
    AGENT_FIELDS = ("agent_state", "agent_last_heard", "agent_mismatch")

    SHARES = {name: share_display(Server, name) for name in ("reliability", "reliability_uptime",
                                                             "reliability_delivery")}
    # Booleans read as the admin's yes/no icon with its text, never "False".
    DISPLAYS = {**SHARES, "containers_paused": yes_no_display(Server, "containers_paused")}

    def get_readonly_fields(self, request, obj=None):
        shown = [self.DISPLAYS.get(field.name, field.name) for field in Server._meta.fields]
        return shown + list(self.AGENT_FIELDS)

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("agent")

    @admin.display(description=_("agent"))
    def agent_state(self, server: Server) -> str:
        return agent_state_of(agent=_agent_of(server), now=timezone.now()).label

    @admin.display(description=_("last heartbeat at"))
    def agent_last_heard(self, server: Server):
        agent = _agent_of(server)
        return agent.last_heartbeat_at if agent else None

    @admin.display(description=_("mismatch"))
    def agent_mismatch(self, server: Server) -> str:
        agent = _agent_of(server)
        return " ".join(mismatch_sentences(mismatch=agent.mismatch)) if agent else ""

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

    @admin.action(description=_("Trust the GPU device locks of the selected servers again"),
                  permissions=["decide_seller"])
    def devices_trust(self, request, queryset):
        action_run(
            self, request, queryset,
            perform=lambda server: server_devices_trust(server_id=server.pk, operator=request.user),
            done_message=lambda count: ngettext(
                "The device locks of %(count)d server are trusted again; its isolation level was derived "
                "again from its latest report.",
                "The device locks of %(count)d servers are trusted again; their isolation levels were "
                "derived again from their latest reports.", count,
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


@admin.register(ServerAgent)
class ServerAgentAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """What each server's agent last reported, rewritten by every heartbeat: read only."""

    list_display = ("server", "last_heartbeat_at", "agent_version", "unreachable_since", "has_mismatch",
                    "clock_skew_seconds")
    list_filter = (("unreachable_since", admin.EmptyFieldListFilter),)
    search_fields = ("server__name", "server__seller__name", "hostname")
    list_select_related = ("server__seller",)
    ordering = ("-last_heartbeat_at",)
    fields = ("server", "enrolled_at", "last_heartbeat_at", "agent_version", "hostname", "uptime_seconds",
              "disk_free_gb", "clock_skew_seconds", "gpus", "gpu_error", "logins", "mismatch",
              "mismatch_text", "unreachable_since", "history_at", "ssh_host_key")
    readonly_fields = fields

    @admin.display(description=_("GPUs do not match"))
    def has_mismatch(self, agent: ServerAgent) -> str:
        return yes_no_icon(bool(agent.mismatch))

    @admin.display(description=_("mismatch"))
    def mismatch_text(self, agent: ServerAgent) -> str:
        return " ".join(mismatch_sentences(mismatch=agent.mismatch))


@admin.register(AgentToken)
class AgentTokenAdmin(OperatorPermissions, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Sellers create their servers' agent tokens in the portal; operators read them and may revoke
    one (a leaked token, a seller who asks). The secret is never stored, so never shown."""

    list_display = ("prefix", "server", "created_at", "created_by", "last_used_at", "revoked_at")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter),)
    search_fields = ("prefix", "server__name", "server__seller__name")
    list_select_related = ("server__seller", "created_by")
    fields = ("prefix", "server", "created_at", "created_by", "last_used_at", "revoked_at")
    readonly_fields = fields
    actions = ("revoke",)

    @admin.action(description=_("Revoke the selected agent tokens"), permissions=["decide_seller"])
    def revoke(self, request, queryset):
        action_run(
            self, request, queryset.filter(revoked_at__isnull=True).select_related("server__seller"),
            perform=lambda token: agent_token_revoke(seller=token.server.seller, server_id=token.server_id),
            done_message=lambda count: ngettext(
                "%(count)d agent token was revoked.", "%(count)d agent tokens were revoked.", count
            ) % {"count": count},
        )


@admin.register(ServerHeartbeat)
class ServerHeartbeatAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Every refused heartbeat, and an accepted one every few minutes or on a change: read only."""

    list_display = ("server", "received_at", heartbeat_accepted, "problem", "agent_version", "address")
    list_filter = ("accepted", "problem")
    search_fields = ("server__name", "server__seller__name", "address")
    list_select_related = ("server__seller",)
    date_hierarchy = "received_at"
    fields = ("server", "received_at", heartbeat_accepted, "problem", "agent_version", "gpus", "gpu_error",
              "disk_free_gb", "clock_skew_seconds", "logins_ready", "address")
    readonly_fields = fields


@admin.register(ServerEvent)
class ServerEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("server", "at", "kind")
    list_filter = ("kind",)
    search_fields = ("server__name", "server__seller__name")
    list_select_related = ("server__seller",)
    date_hierarchy = "at"


@admin.register(ServerIsolationReport)
class ServerIsolationReportAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Each change of a server's isolation report and the level derived from it: read only."""

    list_display = ("server", "received_at", "level")
    list_filter = ("level",)
    search_fields = ("server__name", "server__seller__name")
    list_select_related = ("server__seller",)
    date_hierarchy = "received_at"
    fields = ("server", "received_at", "level", "digest", "report")
    readonly_fields = fields


@admin.register(ServerAvailabilityDay)
class ServerAvailabilityDayAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The minutes each server was listed, and heard from, per day: what its reliability counts."""

    list_display = ("server", "day", "listed_minutes", "heard_minutes")
    search_fields = ("server__name", "server__seller__name")
    list_select_related = ("server__seller",)
    date_hierarchy = "day"


@admin.register(AgentMonitor)
class AgentMonitorAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The exchange's own watch over the agents (one row): when it last ran, since when without a gap."""

    list_display = ("__str__", "last_run_at", "up_since", "counted_minute")


class ContainerTemplateForm(forms.ModelForm):
    """The JSON fields without the hidden copy of their initial value that Django adds for a callable
    default: it would repeat their help text's aria attribute on a hidden input."""

    class Meta:
        model = ContainerTemplate
        fields = ("slug", "published", "is_default", "position", "name_en", "name_pt", "name_fr",
                  "description_en", "description_pt", "description_fr", "image", "min_driver", "ports",
                  "key_path", "token_env", "command", "disk_gb")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in ("ports", "command"):
            if name in self.fields:  # a reader's form shows them as text, not as fields
                self.fields[name].show_hidden_initial = False


@admin.register(ContainerTemplate)
class ContainerTemplateAdmin(admin.ModelAdmin):
    """The images container rentals run, curated here (superusers edit, the operators' groups
    read). Agents pull a published template while idle; buyers choose among those a server holds."""

    form = ContainerTemplateForm
    list_display = ("slug", "name_en", "image", "min_driver", "disk_gb",
                    yes_no_display(ContainerTemplate, "published"),
                    yes_no_display(ContainerTemplate, "is_default"),
                    "position", "servers_holding")
    list_filter = ("published",)
    search_fields = ("slug", "name_en", "name_pt", "name_fr", "image")
    ordering = ("position", "slug")
    fieldsets = (
        (None, {"fields": ("slug", "published", "is_default", "position")}),
        (_("In the three languages"), {"fields": ("name_en", "name_pt", "name_fr", "description_en",
                                                  "description_pt", "description_fr")}),
        (_("What runs"), {"fields": ("image", "min_driver", "ports", "key_path", "token_env", "command",
                                      "disk_gb")}),
    )

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(holding=models.Count("held_by"))

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        # Servers whose agent already holds the image count it now, not at their next changed report.
        transaction.on_commit(container_templates_held_refresh)

    @admin.display(description=_("servers holding it"), ordering="holding")
    def servers_holding(self, template) -> int:
        return template.holding


@admin.register(ServerTemplate)
class ServerTemplateAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Which server holds which template, as its agent's last isolation report said."""

    list_display = ("server", "template", "since")
    list_filter = ("template",)
    list_select_related = ("server", "template")
    search_fields = ("server__name", "template__slug")
