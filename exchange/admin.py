from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from billing.services import rental_end_by_operator
from marketplace import formatting
from marketplace.admin_tools import (
    OperatorPermissions,
    ReadOnlyAdminMixin,
    ReasonForm,
    action_with_form,
    share_display,
    usd_display,
    yes_no_display,
)
from marketplace.errors import DomainError

from .models import Bid, Market, MarketBook, Offer, PriceAlert, Rental, RentalGpu, SshKey
from .selectors import market_is_open
from .services import market_close, market_open, market_open_preview

offer_price = usd_display(Offer, "price_usd")


@admin.register(Offer)
class OfferAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Offers change through the seller portal (and matching) only; suspending a seller withdraws
    all of its offers."""

    list_display = ("server", "gpus_offered", offer_price, "state", "created_at")
    list_filter = ("state", "server__gpu_model")
    search_fields = ("server__name", "server__seller__name")
    list_select_related = ("server__seller", "server__gpu_model")
    fields = ("server", "gpus_offered", offer_price, "state", "created_at", "updated_at")
    readonly_fields = fields


best_ask = usd_display(MarketBook, "best_ask_usd")


@admin.register(MarketBook)
class MarketBookAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The version of each GPU model's book, which every change of the book bumps, and its summary
    (best ask, GPUs on offer) as the database keeps it: read only, it tells an operator when a
    model's book last moved relative to another."""

    list_display = ("gpu_model", "version", best_ask, "gpus_on_offer")
    list_select_related = ("gpu_model",)
    fields = ("gpu_model", "version", best_ask, "gpus_on_offer")
    readonly_fields = fields


class MarketStateForm(forms.Form):
    # The state the operator asked for, as the page showed it: a second click, or a page loaded
    # before someone else changed the state, must not flip the market back.
    target = forms.ChoiceField(choices=(("open", "open"), ("close", "close")), widget=forms.HiddenInput)
    reason = forms.CharField(
        label=_("Note (optional)"), required=False, max_length=1000,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        help_text=_("Recorded in the audit log with your name and the time."),
    )


@admin.register(Market)
class MarketAdmin(OperatorPermissions, ReadOnlyAdminMixin, admin.ModelAdmin):
    """One page instead of a list: the market's state and the button that changes it. Before
    opening, the page shows what the opening matching pass would trade, computed by the real
    matching code in a transaction that is rolled back."""

    fields = (yes_no_display(Market, "is_open"), "changed_at", "version")
    readonly_fields = fields

    def changelist_view(self, request, extra_context=None):
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        is_open = market_is_open()
        can_operate = self.has_operate_market_permission(request)
        form = MarketStateForm(request.POST or None, initial={"target": "close" if is_open else "open"})
        if request.method == "POST" and can_operate and form.is_valid():
            return self._change_state(
                request, open_it=form.cleaned_data["target"] == "open", reason=form.cleaned_data["reason"]
            )
        context = {
            **self.admin_site.each_context(request),
            "title": gettext("Market"),
            "opts": self.model._meta,
            "is_open": is_open,
            "can_operate": can_operate,
            "preview": None if is_open else market_open_preview(),
            "form": form,
        }
        return TemplateResponse(request, "admin/exchange/market/state.html", context)

    def _change_state(self, request, *, open_it: bool, reason: str):
        try:
            if open_it == market_is_open():
                already = gettext("The market is already open.") if open_it else gettext(
                    "The market is already closed."
                )
                self.message_user(request, already, messages.WARNING)
            elif not open_it:
                market_close(operator=request.user, reason=reason)
                self.message_user(request, gettext("The market is closed."), messages.SUCCESS)
            else:
                rentals = market_open(operator=request.user, reason=reason)
                self.message_user(
                    request,
                    ngettext(
                        "The market is open: the opening pass made %(count)d rental.",
                        "The market is open: the opening pass made %(count)d rentals.",
                        len(rentals),
                    ) % {"count": len(rentals)},
                    messages.SUCCESS,
                )
        except DomainError as refused:
            self.message_user(request, refused.message, messages.ERROR)
        return HttpResponseRedirect(reverse("admin:exchange_market_changelist"))


bid_price = usd_display(Bid, "max_price_usd")


@admin.register(Bid)
class BidAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("id", "buyer", "gpu_model", "gpus", bid_price, "time_in_force", "state", "created_at")
    list_filter = ("state", "time_in_force", "gpu_model")
    search_fields = ("buyer__email",)
    list_select_related = ("buyer", "gpu_model")
    fields = ("buyer", "gpu_model", "gpus", bid_price, "region", "hours", "time_in_force", "expires_at",
              "ssh_public_key", share_display(Bid, "min_reliability"), "state", "cancel_reason", "form_token",
              "created_at", "updated_at")
    readonly_fields = fields


rental_price = usd_display(Rental, "price_usd")


@admin.register(Rental)
class RentalAdmin(OperatorPermissions, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("id", "buyer", "gpu_model", "gpus", rental_price, "state", "started_at", "paid_through",
                    "end_reason")
    list_filter = ("state", "end_reason", "gpu_model")
    search_fields = ("buyer__email", "server__name", "server__seller__name")
    list_select_related = ("buyer", "gpu_model")
    fields = ("buyer", "bid", "offer", "server", "gpu_model", "gpus", rental_price, "hours", "state",
              "started_at", "paid_through", "ended_at", "end_reason", "ssh_public_key", "username",
              "ssh_port", "delivered_at")
    readonly_fields = fields
    actions = ("end_as_operator",)

    @admin.action(description=_("End the selected rentals now (unused minutes refunded)"),
                  permissions=["move_money"])
    def end_as_operator(self, request, queryset):
        def end(rental, data):
            refund = rental_end_by_operator(rental_id=rental.pk, operator=request.user, reason=data["reason"])
            if refund.transaction is not None:
                self.message_user(
                    request,
                    ngettext(
                        "Rental %(id)s: %(amount)s refunded for %(minutes)d unused minute.",
                        "Rental %(id)s: %(amount)s refunded for %(minutes)d unused minutes.",
                        refund.unused_minutes,
                    ) % {
                        "id": rental.pk, "amount": formatting.money(refund.amount, refund.currency),
                        "minutes": refund.unused_minutes,
                    },
                    messages.INFO,
                )

        return action_with_form(
            self, request, queryset, form_class=ReasonForm,
            title=gettext("End rentals"),
            intro=gettext(
                "Each rental ends now and its GPUs go back to the book. As when a server fails, the buyer "
                "gets back the unused minutes of the hour paid, taken from the seller's earnings and "
                "the platform's fee in proportion."
            ),
            perform=end,
            done_message=lambda count: ngettext(
                "%(count)d rental ended.", "%(count)d rentals ended.", count
            ) % {"count": count},
        )


@admin.register(RentalGpu)
class RentalGpuAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Which GPU indices of its server each rental holds (matching assigns them, ending releases
    them): read only."""

    list_display = ("rental", "server", "index", "released_at")
    list_filter = (("released_at", admin.EmptyFieldListFilter),)
    search_fields = ("server__name", "server__seller__name", "rental__id")
    list_select_related = ("rental", "server__seller")


@admin.register(SshKey)
class SshKeyAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Buyers manage their keys on their account page; operators only read them."""

    list_display = ("name", "buyer", "fingerprint", "created_at")
    search_fields = ("buyer__email", "fingerprint")
    list_select_related = ("buyer",)


alert_threshold = usd_display(PriceAlert, "threshold_usd")


@admin.register(PriceAlert)
class PriceAlertAdmin(admin.ModelAdmin):
    """Buyers' price alerts, to look at (deleting one stops it): buyers set and stop them on their
    account page."""

    list_display = ("id", "buyer", "gpu_model", "gpus", alert_threshold, "state", "notified_at", "created_at")
    list_filter = ("state", "gpu_model")
    search_fields = ("buyer__email",)
    list_select_related = ("buyer", "gpu_model")
    readonly_fields = (
        "buyer", "gpu_model", "gpus", alert_threshold, "state", "notified_at", "notified_count", "created_at",
    )
    fields = readonly_fields
    exclude = ("unsubscribe_token",)
    ordering = ("-created_at", "-id")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
