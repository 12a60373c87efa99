"""The outbox of emails, for operators to read: what is pending, sent, or refused and retried; and
the API's idempotency records."""

from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from .admin_tools import ReadOnlyAdminMixin, yes_no_display
from .models import IdempotencyRecord, OutboxEmail, OutboxStatus


class OutboxStatusFilter(admin.SimpleListFilter):
    title = _("status")
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return OutboxStatus.choices

    def queryset(self, request, queryset):
        if self.value() in OutboxStatus.values:
            return queryset.filter(OutboxStatus.condition(self.value()))
        return queryset


@admin.register(OutboxEmail)
class OutboxEmailAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Rows are written by `marketplace.emails.email_send` and marked by its sender only."""

    list_display = ("id", "key", "recipient", "status_label", "attempts", "created_at", "sent_at",
                    "next_attempt_at")
    list_filter = (OutboxStatusFilter, "language")
    search_fields = ("key", "recipient", "subject")
    ordering = ("-id",)
    readonly_fields = ("key", "recipient", "language", "status_label", "created_at", "sent_at", "attempts",
                       "next_attempt_at", "last_error", "subject", "body", "html")
    fields = readonly_fields

    @admin.display(description=_("status"))
    def status_label(self, obj: OutboxEmail) -> str:
        return OutboxStatus(obj.status).label


record_completed = yes_no_display(IdempotencyRecord, "completed")


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The API's idempotency keys of the last day, for operators answering "did my request run?".
    The stored answer is not shown: it may hold a buyer's data."""

    list_display = ("created_at", "token_id", "method", "path", "status", record_completed)
    list_filter = ("completed", "method", "status")
    search_fields = ("key", "path")
    ordering = ("-id",)
    fields = ("created_at", "token_id", "key", "method", "path", "body_sha256", record_completed, "status",
              "content_type")
    readonly_fields = fields
