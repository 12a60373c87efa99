import uuid

from django import forms
from django.utils.translation import gettext_lazy as _

from sellers.models import Region

from .models import BID_GPU_COUNTS

GPU_CHOICES = [(count, str(count)) for count in BID_GPU_COUNTS]


class OrderFormBase(forms.Form):
    gpus = forms.TypedChoiceField(label=_("GPUs on one server"), choices=GPU_CHOICES, coerce=int)
    hours = forms.IntegerField(
        label=_("Hours"), required=False, min_value=1, max_value=24 * 366,
        help_text=_("Leave empty to run until you stop it."),
    )
    region = forms.ChoiceField(
        label=_("Region"), required=False, choices=[("", _("Any region"))] + list(Region.choices)
    )
    ssh_public_key = forms.CharField(
        label=_("Your SSH public key"), max_length=16384,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "autocomplete": "off"}),
        help_text=_("ed25519, ECDSA or RSA of at least 2048 bits: the rental's server lets this key in."),
    )
    form_token = forms.UUIDField(widget=forms.HiddenInput)

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("initial", {}).setdefault("form_token", uuid.uuid4())
        super().__init__(*args, **kwargs)


class BuyNowForm(OrderFormBase):
    """Buy at the best offer shown: the price seen for each size travels with the form, so the
    buyer never pays more than the page said; if the book moved up, nothing is bought."""

    price_1 = forms.DecimalField(widget=forms.HiddenInput, required=False, decimal_places=2)
    price_2 = forms.DecimalField(widget=forms.HiddenInput, required=False, decimal_places=2)
    price_4 = forms.DecimalField(widget=forms.HiddenInput, required=False, decimal_places=2)
    price_8 = forms.DecimalField(widget=forms.HiddenInput, required=False, decimal_places=2)

    def clean(self):
        data = super().clean()
        gpus = data.get("gpus")
        if gpus and not data.get(f"price_{gpus}"):
            raise forms.ValidationError(
                _("No single server offers %(count)d GPUs of this model right now.") % {"count": gpus},
                code="no_offer",
            )
        if gpus:
            data["max_price_usd"] = data[f"price_{gpus}"]
        return data


class BidForm(OrderFormBase):
    max_price_usd = forms.DecimalField(
        label=_("Maximum price per GPU-hour (US$)"), max_digits=8, decimal_places=2,
        widget=forms.NumberInput(attrs={"step": "0.01", "min": "0.01", "inputmode": "decimal"}),
    )
    expires_at = forms.DateTimeField(
        label=_("Expires (UTC)"), required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        help_text=_("Optional. Without it the bid rests until filled or cancelled."),
    )

    field_order = ("gpus", "max_price_usd", "hours", "region", "expires_at", "ssh_public_key")
