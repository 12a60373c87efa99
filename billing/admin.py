from django import forms
from django.contrib import admin, messages
from django.http import Http404, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from accounts.models import Currency
from marketplace import formatting
from marketplace.admin_tools import (
    AmountReasonForm,
    OperatorPermissions,
    OptionalReasonForm,
    ReadOnlyAdminMixin,
    ReasonForm,
    action_with_form,
    form_page,
    money_display,
    number_display,
    percent_display,
    usd_display,
    yes_no_display,
)
from marketplace.errors import DomainError

from .models import (
    CreditNote,
    CreditNoteSequence,
    ExchangeRate,
    Invoice,
    InvoiceSequence,
    LedgerAccount,
    LedgerEntry,
    LedgerTransaction,
    PaymentProvider,
    Payout,
    ProviderEvent,
    ReconciliationRun,
    RentalCharge,
    TopUp,
    TopUpRefund,
    TopUpVatRefund,
)
from .selectors import ledger_movement_description
from .services import (
    exchange_rate_save,
    exchange_rates_load_by_operator,
    payout_mark_paid,
    payout_reject,
    top_up_bank_transfer_credit,
    top_up_refund,
)


# django-money names an amount's currency column in English only.
@admin.display(description=_("currency"), ordering="currency")
def entry_currency(entry):
    return entry.currency


# An account's name is worked out in the reader's language from what it belongs to (a wallet's
# owner, a seller, a provider), so these lists select what the names read.
ACCOUNT_NAMED = ("wallet__user", "seller")
entry_amount = money_display(LedgerEntry, "amount")


class LedgerEntryInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = LedgerEntry
    fields = ("account", entry_amount, entry_currency, "created_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False
    ordering = ("id",)

    def get_queryset(self, request):
        return super().get_queryset(request).select_related(
            *(f"account__{related}" for related in ACCOUNT_NAMED)
        )


# The stored description is the operators' memo, written in English when the money moved; a
# top-up, a refund or an hour's charge is named from its records instead, in the reader's language.
NAMED_FROM_RECORDS = (
    LedgerTransaction.Kind.TOP_UP, LedgerTransaction.Kind.REFUND, LedgerTransaction.Kind.CHARGE,
)


@admin.display(description=_("movement"))
def transaction_movement(ledger_transaction):
    return ledger_movement_description(ledger_transaction=ledger_transaction)


@admin.display(description=_("note"))
def transaction_note(ledger_transaction):
    return "" if ledger_transaction.kind in NAMED_FROM_RECORDS else ledger_transaction.description


@admin.register(LedgerTransaction)
class LedgerTransactionAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "id", "kind", transaction_movement, "idempotency_key", "created_at", "created_by", "fx_rate",
    )
    list_filter = ("kind", "created_at")
    search_fields = ("idempotency_key", "description", "entries__account__code")
    list_select_related = (
        "created_by", "fx_rate", "top_up", "top_up_refund__top_up", "top_up_vat_refund__top_up",
        "rental_charge__rental__gpu_model",
    )
    date_hierarchy = "created_at"
    readonly_fields = (
        "idempotency_key", "kind", transaction_movement, transaction_note, "created_at", "created_by",
        "reverses", "fx_rate",
    )
    fields = readonly_fields
    inlines = (LedgerEntryInline,)
    show_full_result_count = False


@admin.display(description=_("name"))
def account_name(account):
    return account.name


@admin.register(LedgerAccount)
class LedgerAccountAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("code", "kind", "currency", account_name, "created_at")
    list_filter = ("kind", "currency", "provider")
    list_select_related = ACCOUNT_NAMED
    search_fields = ("code", "seller__name", "wallet__user__email")
    readonly_fields = ("code", "kind", "currency", account_name, "wallet", "seller", "provider", "created_at")
    fields = readonly_fields


class EntryCurrencyFilter(admin.SimpleListFilter):
    """By currency, titled in the page's language: django-money's currency column has no name of
    its own, and Django would title the filter with the column's, "currency", in English."""

    title = _("currency")
    parameter_name = "currency"

    def lookups(self, request, model_admin):
        return Currency.choices

    def queryset(self, request, queryset):
        return queryset.filter(currency=self.value()) if self.value() else queryset


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("id", "transaction", "account", entry_amount, entry_currency, "created_at")
    list_filter = (EntryCurrencyFilter, "account__kind", "created_at")
    search_fields = ("account__code", "transaction__idempotency_key")
    list_select_related = ("transaction", *(f"account__{related}" for related in ACCOUNT_NAMED))
    date_hierarchy = "created_at"
    readonly_fields = ("transaction", "account", entry_amount, entry_currency, "created_at")
    fields = readonly_fields
    show_full_result_count = False


class RatesFileForm(forms.Form):
    file = forms.FileField(
        label=_("Rates file"),
        help_text=_('JSON, as for "manage.py load_fx_rates": base USD, valid_from, source and rates.'),
    )
    reason = forms.CharField(label=_("Note (optional)"), required=False, max_length=1000,
                             widget=forms.Textarea(attrs={"rows": 2, "cols": 60}))


rate_shown = number_display(ExchangeRate, "rate")


@admin.register(ExchangeRate)
class ExchangeRateAdmin(admin.ModelAdmin):
    """Operators add rates here, one by one or from a rates file ("Load a rates file" above the
    list). A rate that a ledger transaction has used is history: it can no longer be changed or
    deleted; add a newer one. Every save goes into the audit log."""

    list_display = ("currency", rate_shown, "valid_from", "source", "created_at")
    list_filter = ("currency", "source")
    search_fields = ("currency", "source")
    date_hierarchy = "valid_from"
    ordering = ("currency", "-valid_from", "-id")
    fields = ("currency", "rate", "valid_from", "source", "created_at")
    readonly_fields = ("created_at",)
    change_list_template = "admin/billing/exchangerate/change_list.html"

    def used(self, obj: ExchangeRate) -> bool:
        return obj.ledger_transactions.exists()

    # A rate in use is shown, not edited: as a number in the page's language.
    def get_fields(self, request, obj=None):
        if obj is not None and self.used(obj):
            return tuple(rate_shown if name == "rate" else name for name in self.fields)
        return self.fields

    def get_readonly_fields(self, request, obj=None):
        if obj is not None and self.used(obj):
            return self.get_fields(request, obj)
        return self.readonly_fields

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        exchange_rate_save(operator=request.user, rate=obj, changed=form.changed_data)

    def get_urls(self):
        return [
            path("load/", self.admin_site.admin_view(self.load_view), name="billing_exchangerate_load"),
            *super().get_urls(),
        ]

    def load_view(self, request):
        if not self.has_add_permission(request):
            return HttpResponseRedirect(reverse("admin:billing_exchangerate_changelist"))
        form = RatesFileForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            upload = form.cleaned_data["file"]
            try:
                added = exchange_rates_load_by_operator(
                    operator=request.user, content=upload.read(1_000_000), name=upload.name,
                    reason=form.cleaned_data["reason"],
                )
            except DomainError as refused:
                form.add_error("file", refused.message)
            else:
                self.message_user(
                    request,
                    ngettext("%(count)d exchange rate added.", "%(count)d exchange rates added.", added)
                    % {"count": added},
                    messages.SUCCESS,
                )
                return HttpResponseRedirect(reverse("admin:billing_exchangerate_changelist"))
        return form_page(
            self, request, form=form, title=gettext("Load a rates file"),
            intro=gettext("Rates already loaded are skipped; a different rate for the same moment is added "
                          "as a correction and wins, being newer."),
        )


class BankTransferFindForm(forms.Form):
    reference = forms.CharField(label=_("Payment reference"), max_length=20,
                                help_text=_("As written on the bank statement, for example EXC-7K2M9QHD."))


class BankTransferCreditForm(forms.Form):
    """What the operator read on the bank statement. The amount is read by the service (any of the
    site's notations; the currency's decimals)."""

    received = forms.CharField(
        label=_("Amount received"), max_length=30,
        help_text=_("The sum on the bank statement, VAT included, in the top-up's currency."),
    )
    bank_reference = forms.CharField(
        label=_("Bank reference"), max_length=100,
        help_text=_("The bank's own reference of the incoming transfer, as on the statement."),
    )
    reason = OptionalReasonForm.base_fields["reason"]


refund_amount, refund_vat, refund_total = (
    money_display(TopUpRefund, name) for name in ("amount", "vat_amount", "total")
)


class TopUpRefundInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = TopUpRefund
    fields = ("created_at", refund_amount, refund_vat, refund_total, "currency", "reason", "created_by")
    readonly_fields = fields
    extra = 0
    can_delete = False


top_up_money = {
    name: money_display(TopUp, name)
    for name in ("amount", "vat_amount", "total", "expected_amount", "expected_vat_amount", "expected_total")
}


@admin.register(TopUp)
class TopUpAdmin(OperatorPermissions, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Top-ups are created by buyers. Finance credits bank transfers (by reference, above the list,
    or with the action) and refunds paid top-ups, each with a reason that the audit log keeps."""

    list_display = (
        "reference", "user", "provider", "status", top_up_money["amount"], top_up_money["vat_amount"],
        top_up_money["total"], "currency", "created_at", "paid_at",
    )
    list_filter = ("status", "provider", "currency", "vat_kind")
    search_fields = ("reference", "user__email", "provider_session_id")
    list_select_related = ("user",)
    readonly_fields = (
        "reference", "user", "provider", "status", "currency", top_up_money["amount"], "vat_kind",
        percent_display(TopUp, "vat_rate"), top_up_money["vat_amount"], top_up_money["total"],
        "billing_country", "unconfirmed_vat_id", "provider_session_id", "ledger_transaction", "created_at",
        "paid_at", "credited_by", "bank_reference", top_up_money["expected_amount"],
        top_up_money["expected_vat_amount"], top_up_money["expected_total"], "received_difference",
    )
    fields = readonly_fields
    inlines = (TopUpRefundInline,)
    actions = ("credit_bank_transfers", "refund")
    change_list_template = "admin/billing/topup/change_list.html"

    @admin.display(description=_("difference from the quote"))
    def received_difference(self, obj: TopUp) -> str:
        difference = obj.received_difference
        if difference is None:
            return "—"
        return formatting.money(difference, obj.currency)

    def get_urls(self):
        return [
            path("credit/", self.admin_site.admin_view(self.credit_view), name="billing_topup_credit"),
            path("<int:top_up_id>/credit/", self.admin_site.admin_view(self.credit_one_view),
                 name="billing_topup_credit_one"),
            *super().get_urls(),
        ]

    def _refused(self, request):
        self.message_user(request, gettext("Your operator role does not allow this action."), messages.ERROR)
        return HttpResponseRedirect(reverse("admin:billing_topup_changelist"))

    def credit_view(self, request):
        """Find a bank transfer by the reference the buyer wrote on it, then credit it."""
        if not self.has_move_money_permission(request):
            return self._refused(request)
        form = BankTransferFindForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            found = TopUp.objects.filter(
                reference=form.cleaned_data["reference"].strip().upper(), provider=PaymentProvider.BANK
            ).values_list("pk", flat=True).first()
            if found is None:
                form.add_error("reference", gettext("No bank-transfer top-up has this reference."))
            else:
                return HttpResponseRedirect(reverse("admin:billing_topup_credit_one", args=[found]))
        return form_page(
            self, request, form=form, title=gettext("Credit a bank transfer"),
            intro=gettext("Enter the payment reference written on the transfer; the next page asks for the "
                          "amount received and the bank's reference."),
            extra={"submit_label": gettext("Next")},
        )

    def credit_one_view(self, request, top_up_id: int):
        """Credit one bank transfer with the amount received and the bank's reference."""
        if not self.has_move_money_permission(request):
            return self._refused(request)
        top_up = TopUp.objects.select_related("user").filter(
            pk=top_up_id, provider=PaymentProvider.BANK
        ).first()
        if top_up is None:
            raise Http404
        initial = {"received": formatting.number_input(top_up.total, places=2)}
        form = BankTransferCreditForm(request.POST or None, initial=initial)
        if request.method == "POST" and form.is_valid():
            try:
                credited = top_up_bank_transfer_credit(
                    top_up_id=top_up.pk, received=form.cleaned_data["received"],
                    reference=form.cleaned_data["bank_reference"], operator=request.user,
                    reason=form.cleaned_data["reason"],
                )
            except DomainError as refused:
                field = "bank_reference" if refused.code.startswith("reference") else "received"
                form.add_error(None if refused.code in ("already_credited", "top_up_closed") else field,
                               refused.message)
            else:
                self.message_user(request, self._credited_message(credited), messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:billing_topup_change", args=[credited.pk]))
        return form_page(
            self, request, form=form, title=gettext("Credit a bank transfer"),
            intro=gettext("The buyer's wallet is credited with what arrived: a different sum is split again "
                          "into its net credit and VAT at the top-up's rate, and the invoice shows it. The "
                          "receipt is emailed. A transfer is credited once only."),
            template="admin/billing/topup/credit.html", extra={"top_up": top_up},
        )

    @staticmethod
    def _credited_message(top_up: TopUp) -> str:
        values = {
            "reference": top_up.reference, "email": top_up.user.email,
            "amount": formatting.money(top_up.amount, top_up.currency),
            "vat": formatting.money(top_up.vat_amount, top_up.currency),
            "total": formatting.money(top_up.total, top_up.currency),
        }
        if top_up.received_difference is None:
            return gettext("Bank transfer %(reference)s credited: %(amount)s to %(email)s.") % values
        values["expected"] = formatting.money(top_up.expected_total, top_up.currency)
        values["difference"] = formatting.money(top_up.received_difference, top_up.currency)
        return gettext(
            "Bank transfer %(reference)s credited as received: %(total)s instead of %(expected)s "
            "(difference %(difference)s), that is %(amount)s to %(email)s and %(vat)s of VAT."
        ) % values

    @admin.action(description=_("Credit the selected bank transfer (money received)"),
                  permissions=["move_money"])
    def credit_bank_transfers(self, request, queryset):
        chosen = list(queryset.values_list("pk", flat=True)[:2])
        if len(chosen) != 1:
            self.message_user(request, gettext("Select exactly one row for this action."), messages.WARNING)
            return None
        return HttpResponseRedirect(reverse("admin:billing_topup_credit_one", args=chosen))

    @admin.action(description=_("Refund the selected top-up (part or all, with a reason)"),
                  permissions=["move_money"])
    def refund(self, request, queryset):
        return action_with_form(
            self, request, queryset, form_class=AmountReasonForm, single=True, refusal_field="amount",
            title=gettext("Refund a top-up"),
            intro=gettext(
                "Enter the amount to take back from the wallet, in the top-up's currency and without VAT; "
                "the VAT on it is refunded in proportion. Refunds never exceed the top-up, nor the "
                "wallet's balance."
            ),
            perform=lambda top_up, data: top_up_refund(
                top_up_id=top_up.pk, operator=request.user, amount_text=data["amount"],
                reason=data["reason"], request_key=data["request_key"],
            ),
            done_message=lambda count: gettext("The top-up was refunded."),
        )


@admin.register(TopUpRefund)
class TopUpRefundAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("top_up", refund_amount, refund_vat, refund_total, "currency", "created_by", "created_at")
    list_filter = ("currency",)
    search_fields = ("top_up__reference", "top_up__user__email", "reason")
    list_select_related = ("top_up", "created_by")
    readonly_fields = ("top_up", "currency", refund_amount, refund_vat, refund_total, "reason",
                       "ledger_transaction", "created_by", "created_at")
    fields = readonly_fields


vat_refunded = money_display(TopUpVatRefund, "vat_amount")


@admin.register(TopUpVatRefund)
class TopUpVatRefundAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The VAT given back once VIES confirmed a VAT ID it had not confirmed at the top-up
    (billing.services.vat_refunds); never entered by hand."""

    list_display = ("top_up", vat_refunded, "currency", "vat_id", "confirmed_at", "created_at")
    list_filter = ("currency",)
    search_fields = ("top_up__reference", "top_up__user__email", "vat_id")
    list_select_related = ("top_up",)
    readonly_fields = ("top_up", "currency", vat_refunded, "vat_id", "confirmed_at", "ledger_transaction",
                       "created_at")
    fields = readonly_fields


@admin.register(InvoiceSequence, CreditNoteSequence)
class SequenceAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("year", "last_number")


def tax_document_figures(model) -> dict:
    figures = {name: money_display(model, name) for name in ("net", "vat_amount", "total")}
    return {**figures, "vat_rate": percent_display(model, "vat_rate")}


credit_note_figures = tax_document_figures(CreditNote)
invoice_figures = tax_document_figures(Invoice)


@admin.register(CreditNote)
class CreditNoteAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("number", "invoice", "issued_at", "currency", credit_note_figures["net"],
                    credit_note_figures["vat_amount"], credit_note_figures["total"])
    list_filter = ("year", "currency", "vat_kind")
    search_fields = (
        "number", "invoice__number", "invoice__top_up__reference", "invoice__top_up__user__email"
    )
    list_select_related = ("invoice",)
    readonly_fields = (
        "number", "year", "sequence", "invoice", "refund", "vat_refund", "issued_at", "seller", "buyer",
        "currency", credit_note_figures["net"], "vat_kind", credit_note_figures["vat_rate"],
        credit_note_figures["vat_amount"], credit_note_figures["total"],
    )
    fields = readonly_fields


@admin.register(Invoice)
class InvoiceAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("number", "issued_at", "currency", invoice_figures["net"], invoice_figures["vat_amount"],
                    invoice_figures["total"], "vat_kind")
    list_filter = ("year", "currency", "vat_kind")
    search_fields = ("number", "top_up__reference", "top_up__user__email")
    readonly_fields = (
        "number", "year", "sequence", "top_up", "issued_at", "seller", "buyer", "currency",
        invoice_figures["net"], "vat_kind", invoice_figures["vat_rate"], invoice_figures["vat_amount"],
        invoice_figures["total"],
    )
    fields = readonly_fields


@admin.register(ProviderEvent)
class ProviderEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("provider", "event_type", "event_id", "received_at")
    list_filter = ("provider", "event_type")
    search_fields = ("event_id",)
    readonly_fields = ("provider", "event_id", "event_type", "payload", "received_at")
    fields = readonly_fields


charge_cost, charge_earnings, charge_fee = (
    usd_display(RentalCharge, name) for name in ("cost_usd", "seller_earnings_usd", "fee_usd")
)
charge_amount = money_display(RentalCharge, "amount")


@admin.register(RentalCharge)
class RentalChargeAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("rental", "period_start", charge_cost, charge_amount, "currency", charge_fee,
                    "created_at")
    list_filter = ("currency",)
    search_fields = ("rental__id", "rental__buyer__email")
    list_select_related = ("rental",)
    readonly_fields = (
        "rental", "period_start", "period_end", "ledger_transaction", charge_cost, charge_amount, "currency",
        "fx_rate", charge_earnings, charge_fee, "created_at",
    )
    fields = readonly_fields


run_ok = yes_no_display(ReconciliationRun, "ok")


@admin.register(ReconciliationRun)
class ReconciliationRunAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """What each reconciliation found; runs are recorded by `billing.services.reconciliation` only."""

    list_display = ("started_at", "finished_at", run_ok, "problem_count")
    list_filter = ("ok",)
    date_hierarchy = "started_at"
    readonly_fields = ("started_at", "finished_at", run_ok, "problems")
    fields = readonly_fields

    @admin.display(description=_("problems"))
    def problem_count(self, obj: ReconciliationRun) -> int:
        return len(obj.problems or [])


class PayoutPaidForm(OptionalReasonForm):
    reference = forms.CharField(
        label=_("Bank transfer reference"), max_length=100,
        help_text=_("The reference of the transfer that paid the seller; the seller's email shows it."),
    )
    field_order = ("reference", "reason", "request_key")


payout_amount = money_display(Payout, "amount")


@admin.register(Payout)
class PayoutAdmin(OperatorPermissions, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Finance pays or rejects sellers' payout requests with the actions, each with a reason (for a
    payment, the bank transfer's reference)."""

    list_display = ("id", "seller", payout_amount, "currency", "status", "requested_by", "requested_at",
                    "decided_by", "decided_at")
    list_filter = ("status",)
    search_fields = ("seller__name", "requested_by__email")
    list_select_related = ("seller", "requested_by", "decided_by")
    date_hierarchy = "requested_at"
    fields = ("seller", payout_amount, "currency", "status", "requested_by", "requested_at", "decided_by",
              "decided_at", "bank_reference", "rejection_reason", "reservation", "settlement")
    readonly_fields = fields
    actions = ("mark_paid", "reject")

    @admin.action(description=_("Mark the selected payouts paid (money sent)"), permissions=["move_money"])
    def mark_paid(self, request, queryset):
        return action_with_form(
            self, request, queryset.select_related("seller").order_by("pk"), form_class=PayoutPaidForm,
            title=gettext("Mark payouts paid"),
            intro=gettext("Send each payout to the account below, then write the reference of the bank "
                          "transfer that paid it."),
            template="admin/billing/payout/mark_paid.html",
            single=True, refusal_field="reference",
            perform=lambda payout, data: payout_mark_paid(
                payout_id=payout.pk, operator=request.user, reference=data["reference"],
                reason=data["reason"],
            ),
            done_message=lambda count: ngettext(
                "%(count)d payout marked paid.", "%(count)d payouts marked paid.", count
            ) % {"count": count},
        )

    @admin.action(description=_("Reject the selected payouts (with a reason)"), permissions=["move_money"])
    def reject(self, request, queryset):
        return action_with_form(
            self, request, queryset.order_by("pk"), form_class=ReasonForm,
            title=gettext("Reject payouts"),
            intro=gettext("The reserved amounts go back to the sellers' earnings; they see the reason."),
            perform=lambda payout, data: payout_reject(
                payout_id=payout.pk, operator=request.user, reason=data["reason"]
            ),
            done_message=lambda count: ngettext(
                "%(count)d payout rejected.", "%(count)d payouts rejected.", count
            ) % {"count": count},
        )
