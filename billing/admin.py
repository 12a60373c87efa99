from django.contrib import admin, messages
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from .exceptions import TopUpRejected
from .models import (
    ExchangeRate,
    Invoice,
    LedgerAccount,
    LedgerEntry,
    LedgerTransaction,
    PaymentProvider,
    Payout,
    PayoutStatus,
    ProviderEvent,
    ReconciliationRun,
    RentalCharge,
    TopUp,
)
from .payouts import PayoutRefused, payout_mark_paid, payout_reject
from .services import top_up_credit_bank_transfer


class ReadOnlyAdminMixin:
    """The ledger is append-only: nobody adds, changes or deletes rows through the admin, not
    even a superuser. Money moves through billing services (and their admin actions) only."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class LedgerEntryInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = LedgerEntry
    fields = ("account", "amount", "currency", "created_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False
    ordering = ("id",)

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("account")


@admin.register(LedgerTransaction)
class LedgerTransactionAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("id", "kind", "idempotency_key", "description", "created_at", "created_by", "fx_rate")
    list_filter = ("kind", "created_at")
    search_fields = ("idempotency_key", "description", "entries__account__code")
    list_select_related = ("created_by", "fx_rate")
    date_hierarchy = "created_at"
    readonly_fields = (
        "idempotency_key", "kind", "description", "created_at", "created_by", "reverses", "fx_rate",
    )
    fields = readonly_fields
    inlines = (LedgerEntryInline,)
    show_full_result_count = False


@admin.register(LedgerAccount)
class LedgerAccountAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("code", "kind", "currency", "name", "created_at")
    list_filter = ("kind", "currency", "provider")
    search_fields = ("code", "name", "seller__name", "wallet__user__email")
    readonly_fields = ("code", "kind", "currency", "wallet", "seller", "provider", "name", "created_at")
    fields = readonly_fields


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("id", "transaction", "account", "amount", "currency", "created_at")
    list_filter = ("currency", "account__kind", "created_at")
    search_fields = ("account__code", "transaction__idempotency_key")
    list_select_related = ("transaction", "account")
    date_hierarchy = "created_at"
    readonly_fields = ("transaction", "account", "amount", "currency", "created_at")
    fields = readonly_fields
    show_full_result_count = False


@admin.register(ExchangeRate)
class ExchangeRateAdmin(admin.ModelAdmin):
    """Operators add rates here (or with `manage.py load_fx_rates`). A rate that a ledger
    transaction has used is history: it can no longer be changed or deleted; add a newer one."""

    list_display = ("currency", "rate", "valid_from", "source", "created_at")
    list_filter = ("currency", "source")
    search_fields = ("currency", "source")
    date_hierarchy = "valid_from"
    ordering = ("currency", "-valid_from", "-id")
    fields = ("currency", "rate", "valid_from", "source", "created_at")
    readonly_fields = ("created_at",)

    @admin.display(description=_("used by the ledger"), boolean=True)
    def used(self, obj: ExchangeRate) -> bool:
        return obj.ledger_transactions.exists()

    def get_readonly_fields(self, request, obj=None):
        if obj is not None and self.used(obj):
            return self.fields
        return self.readonly_fields

    def has_delete_permission(self, request, obj=None):
        if obj is not None and self.used(obj):
            return False
        return super().has_delete_permission(request, obj)


@admin.register(TopUp)
class TopUpAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "reference", "user", "provider", "status", "amount", "vat_amount", "total", "currency",
        "created_at", "paid_at",
    )
    list_filter = ("status", "provider", "currency", "vat_kind")
    search_fields = ("reference", "user__email", "provider_session_id")
    list_select_related = ("user",)
    readonly_fields = (
        "reference", "user", "provider", "status", "currency", "amount", "vat_kind", "vat_rate",
        "vat_amount", "total", "billing_country", "provider_session_id", "ledger_transaction",
        "created_at", "paid_at", "credited_by",
    )
    fields = readonly_fields
    actions = ("credit_bank_transfers",)

    def has_change_permission(self, request, obj=None):
        # Read-only form, but the changelist (and its action) stays open to operators.
        return obj is None and request.user.has_perm("billing.change_topup")

    @admin.action(description=_("Credit the selected bank transfers (money received)"))
    def credit_bank_transfers(self, request, queryset):
        credited = 0
        for top_up in queryset.filter(provider=PaymentProvider.BANK):
            try:
                top_up_credit_bank_transfer(reference=top_up.reference, operator=request.user)
            except TopUpRejected as rejected:
                self.message_user(request, f"{top_up.reference}: {rejected.message}", messages.ERROR)
            else:
                credited += 1
        self.message_user(
            request,
            ngettext("%(count)d bank transfer credited.", "%(count)d bank transfers credited.", credited)
            % {"count": credited},
            messages.SUCCESS,
        )


@admin.register(Invoice)
class InvoiceAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("number", "issued_at", "currency", "net", "vat_amount", "total", "vat_kind")
    list_filter = ("year", "currency", "vat_kind")
    search_fields = ("number", "top_up__reference", "top_up__user__email")
    readonly_fields = (
        "number", "year", "sequence", "top_up", "issued_at", "seller", "buyer", "currency", "net",
        "vat_kind", "vat_rate", "vat_amount", "total",
    )
    fields = readonly_fields


@admin.register(ProviderEvent)
class ProviderEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("provider", "event_type", "event_id", "received_at")
    list_filter = ("provider", "event_type")
    search_fields = ("event_id",)
    readonly_fields = ("provider", "event_id", "event_type", "payload", "received_at")
    fields = readonly_fields


@admin.register(RentalCharge)
class RentalChargeAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("rental", "period_start", "cost_usd", "amount", "currency", "fee_usd", "created_at")
    list_filter = ("currency",)
    search_fields = ("rental__id", "rental__buyer__email")
    list_select_related = ("rental",)
    readonly_fields = (
        "rental", "period_start", "period_end", "ledger_transaction", "cost_usd", "amount", "currency",
        "fx_rate", "seller_earnings_usd", "fee_usd", "created_at",
    )
    fields = readonly_fields


@admin.register(ReconciliationRun)
class ReconciliationRunAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """What each reconciliation found; runs are recorded by `billing.reconciliation` only."""

    list_display = ("started_at", "finished_at", "ok", "problem_count")
    list_filter = ("ok",)
    date_hierarchy = "started_at"
    readonly_fields = ("started_at", "finished_at", "ok", "problems")
    fields = readonly_fields

    @admin.display(description=_("problems"))
    def problem_count(self, obj: ReconciliationRun) -> int:
        return len(obj.problems or [])


@admin.register(Payout)
class PayoutAdmin(admin.ModelAdmin):
    """Operators pay or reject sellers' payout requests with the actions. Every field is read-only
    except the rejection reason of an undecided request, which the "reject" action uses."""

    list_display = ("id", "seller", "amount", "currency", "status", "requested_by", "requested_at",
                    "decided_by", "decided_at")
    list_filter = ("status",)
    search_fields = ("seller__name", "requested_by__email")
    list_select_related = ("seller", "requested_by", "decided_by")
    date_hierarchy = "requested_at"
    fields = ("seller", "amount", "currency", "status", "requested_by", "requested_at", "decided_by",
              "decided_at", "rejection_reason", "reservation", "settlement")
    actions = ("mark_paid", "reject")

    def has_add_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_readonly_fields(self, request, obj=None):
        if obj is not None and obj.status == PayoutStatus.REQUESTED:
            return tuple(field for field in self.fields if field != "rejection_reason")
        return self.fields

    def _run(self, request, queryset, decide, done_message):
        done = 0
        for payout in queryset.order_by("pk"):
            try:
                decide(payout)
            except PayoutRefused as refused:
                self.message_user(request, f"#{payout.pk}: {refused.message}", messages.ERROR)
            else:
                done += 1
        self.message_user(request, done_message % {"count": done}, messages.SUCCESS)

    @admin.action(description=_("Mark the selected payouts paid (money sent)"))
    def mark_paid(self, request, queryset):
        self._run(
            request, queryset, lambda payout: payout_mark_paid(payout_id=payout.pk, operator=request.user),
            _("%(count)d payout(s) marked paid."),
        )

    @admin.action(description=_("Reject the selected payouts (with the reason saved on each)"))
    def reject(self, request, queryset):
        self._run(
            request, queryset,
            lambda payout: payout_reject(payout_id=payout.pk, operator=request.user,
                                         reason=payout.rejection_reason),
            _("%(count)d payout(s) rejected."),
        )
