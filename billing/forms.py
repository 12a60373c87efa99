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


class TopUpForm(forms.Form):
    currency = forms.ChoiceField(label=_("Currency"), choices=Currency.choices)
    preset = forms.ChoiceField(label=_("Amount"), widget=forms.RadioSelect)
    other_amount = NumberField(label=_("Another amount"), places=2, required=False)
    provider = forms.ChoiceField(label=_("Payment method"), widget=forms.RadioSelect)
    form_token = forms.UUIDField(widget=forms.HiddenInput)

    def __init__(
        self, *args, currency: str | None, providers: list[str], quote=None, **kwargs
    ):
        """`quote(amount, currency)` gives the total with VAT, shown beside each preset."""
        kwargs.setdefault("initial", {})
        kwargs["initial"].setdefault("form_token", uuid.uuid4())
        kwargs["initial"].setdefault("preset", "50")
        kwargs["initial"].setdefault("currency", currency or "EUR")
        kwargs["initial"].setdefault("provider", providers[0])
        super().__init__(*args, **kwargs)
        shown = currency or kwargs["initial"]["currency"]
        self.fields["preset"].choices = [
            (str(value), self._preset_label(Decimal(value), shown, quote))
            for value in settings.TOP_UP_PRESETS
        ] + [(OTHER, _("Another amount"))]
        self.fields["provider"].choices = [
            (value, label) for value, label in PaymentProvider.choices if value in providers
        ]
        if currency:
            # The wallet's currency is fixed: show it, but still validate what comes back.
            self.fields["currency"].widget = forms.HiddenInput()
            self.fields["currency"].initial = currency

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
        if data.get("preset") == OTHER:
            amount = data.get("other_amount")
            if amount is None and "other_amount" not in self.errors:
                self.add_error("other_amount", _("Enter the amount you want to top up."))
            data["amount_text"] = "" if amount is None else str(amount)
        else:
            data["amount_text"] = data.get("preset", "")
        return data
