import uuid
from decimal import Decimal

from django import forms
from django.conf import settings
from django.utils.translation import gettext_lazy as _

from accounts.models import Currency
from marketplace import formatting
from marketplace.forms import NumberField

from .models import PaymentProvider

OTHER = "other"
TOP_UP_CURRENCIES = tuple(value for value, _label in Currency.choices)


def top_up_range_text(currency: str, *, error: bool = False) -> str:
    """The allowed range of one top-up in `currency`, in the page's language."""
    low, high = (formatting.money(Decimal(value), currency) for value in settings.TOP_UP_LIMITS[currency])
    if error:
        return _("Top up between %(low)s and %(high)s.") % {"low": low, "high": high}
    return _("From %(low)s to %(high)s per top-up.") % {"low": low, "high": high}


class TopUpForm(forms.Form):
    currency = forms.ChoiceField(label=_("Currency"), choices=Currency.choices)
    preset = forms.ChoiceField(label=_("Amount"), widget=forms.RadioSelect)
    other_amount = NumberField(label=_("Another amount"), places=2, required=False)
    provider = forms.ChoiceField(label=_("Payment method"), widget=forms.RadioSelect)
    form_token = forms.UUIDField(widget=forms.HiddenInput)

    def __init__(
        self, *args, currency: str | None, providers: list[str], quote=None, chosen: str | None = None,
        **kwargs,
    ):
        """`currency` is the wallet's (fixed) or None before the first top-up, when `chosen` (the
        `?currency=` link the buyer followed, or the currency posted) decides the presets and range.
        `quote(amount, currency)` gives the total with VAT, shown beside each preset."""
        data = args[0] if args else kwargs.get("data")
        if not currency and data is not None and data.get("currency") in TOP_UP_CURRENCIES:
            chosen = data.get("currency")
        shown = currency or (chosen if chosen in TOP_UP_CURRENCIES else "EUR")
        self.shown_currency = shown
        presets = settings.TOP_UP_PRESETS[shown]
        kwargs.setdefault("initial", {})
        kwargs["initial"].setdefault("form_token", uuid.uuid4())
        kwargs["initial"].setdefault("preset", str(presets[1] if len(presets) > 1 else presets[0]))
        kwargs["initial"].setdefault("currency", shown)
        kwargs["initial"].setdefault("provider", providers[0])
        super().__init__(*args, **kwargs)
        self.fields["preset"].choices = [
            (str(value), self._preset_label(Decimal(value), shown, quote)) for value in presets
        ] + [(OTHER, _("Another amount"))]
        self.fields["provider"].choices = [
            (value, label) for value, label in PaymentProvider.choices if value in providers
        ]
        # The currency is chosen with the links above the form (they work without JavaScript), or
        # fixed by the wallet: the form carries it, and the service checks it again.
        self.fields["currency"].widget = forms.HiddenInput()
        self.fields["currency"].initial = shown

    @staticmethod
    def _preset_label(amount: Decimal, currency: str, quote) -> str:
        label = formatting.money(amount, currency)
        total = quote(amount, currency) if quote else amount
        if total == amount:
            return label
        return _("%(amount)s (%(total)s with VAT)") % {
            "amount": label, "total": formatting.money(total, currency)
        }

    def clean(self):
        data = super().clean()
        if "currency" in self.errors:  # a hidden field: its error is said above the form
            self.add_error(None, list(self.errors["currency"]))
        if data.get("preset") == OTHER:
            amount = data.get("other_amount")
            if amount is None and "other_amount" not in self.errors:
                self.add_error("other_amount", _("Enter the amount you want to top up."))
            elif amount is not None and data.get("currency") in TOP_UP_CURRENCIES:
                low, high = settings.TOP_UP_LIMITS[data["currency"]]
                if not Decimal(low) <= amount <= Decimal(high):
                    self.add_error("other_amount", top_up_range_text(data["currency"], error=True))
            data["amount_text"] = "" if amount is None else str(amount)
        else:
            data["amount_text"] = data.get("preset", "")
        return data
