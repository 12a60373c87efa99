import json

from django import forms
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from accounts.vat_ids import VAT_PATTERNS
from catalog.models import GpuModel
from marketplace.formatting import country_choices, country_name
from marketplace.forms import NumberField

from .models import Region, SellerApplication


class ApplicationForm(forms.ModelForm):
    """The applicant's fields; checks beyond the widgets are the service's (application_fields_clean)."""

    country = forms.ChoiceField(label=_("Country of the company"), required=False)
    website = forms.URLField(label=_("Website"), required=False, assume_scheme="https")
    accept_terms = forms.BooleanField(label=_("I accept the seller terms."), required=False)

    class Meta:
        model = SellerApplication
        fields = (
            "legal_name", "country", "registration_number", "vat_id", "address", "contact_name",
            "contact_phone", "website", "datacentre_locations", "planned_inventory", "iban",
            "account_holder",
        )
        widgets = {
            "address": forms.Textarea(attrs={"rows": 3}),
            "datacentre_locations": forms.Textarea(attrs={"rows": 3}),
            "planned_inventory": forms.Textarea(attrs={"rows": 3}),
        }
        help_texts = {
            "datacentre_locations": _("The cities and data centres where your servers run."),
            "planned_inventory": _("The GPU models and counts you plan to offer, for example 8 × H100 SXM."),
            "iban": _("The bank account we pay your earnings to."),
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["country"].choices = [("", "—")] + country_choices()
        self.fields["accept_terms"].initial = bool(self.instance and self.instance.terms_accepted_at)
        for field in self.fields.values():
            field.required = False
        country = self.data.get("country") if self.is_bound else self.instance.country
        self.fields["vat_id"].help_text = vat_id_help(country or "")
        # site.js shows the chosen country's format as soon as the country changes.
        self.fields["country"].widget.attrs["data-vat-help"] = json.dumps(
            {code: vat_id_help(code) for code in ("", *VAT_PATTERNS)}, ensure_ascii=False
        )

    def service_fields(self) -> dict:
        return dict(self.cleaned_data)


def vat_id_help(country: str) -> str:
    """The VAT ID field's help: the format of `country`'s VAT numbers, or the general rule."""
    pattern = VAT_PATTERNS.get(country)
    if pattern is None:
        return gettext(
            "The VAT ID of the company in the country above. Choose the country first to see its "
            "format."
        )
    return gettext(
        "The format of a VAT ID in %(country)s: %(pattern)s (9 stands for a digit, X for a letter "
        "or a digit)."
    ) % {"country": country_name(country), "pattern": pattern}


SERVER_FORM_FIELDS = (
    "name", "gpu_count", "region", "host", "ssh_port", "city", "cpu_cores", "ram_gb", "disk_gb",
    "network_gbps",
)


class ServerForm(forms.Form):
    """A server's fields; the rules (GPU count 1 to 16, not below the GPUs rented, the host a DNS
    name or an IP address, the port 1 to 65535) are the service's."""

    gpu_model = forms.ModelChoiceField(label=_("GPU model"), queryset=None, empty_label="—")
    gpu_count = NumberField(
        label=_("Number of GPUs"), places=0, help_text=_("From 1 to 16 GPUs of the model.")
    )
    region = forms.ChoiceField(label=_("Region"), choices=Region.choices)
    name = forms.CharField(label=_("Name"), max_length=100,
                           help_text=_("Your name for the server, for example lis-h100-01."))
    host = forms.CharField(label=_("Connection host"), max_length=255,
                           help_text=_("The host name or IP address buyers connect to with SSH."))
    ssh_port = NumberField(label=_("SSH port"), places=0, initial=22)
    city = forms.CharField(label=_("City"), max_length=100, required=False)
    cpu_cores = NumberField(label=_("CPU cores"), places=0, required=False)
    ram_gb = NumberField(label=_("RAM (GB)"), places=0, required=False)
    disk_gb = NumberField(label=_("Disk (GB)"), places=0, required=False)
    network_gbps = NumberField(label=_("Network (Gbit/s)"), places=0, required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["gpu_model"].queryset = GpuModel.objects.order_by("name")

    def service_fields(self) -> dict:
        fields = {name: self.cleaned_data[name] for name in SERVER_FORM_FIELDS}
        fields["gpu_model_id"] = self.cleaned_data["gpu_model"].pk
        return fields


class OfferForm(forms.Form):
    """An ask; the price rules (above zero, at most US$ 100, cent tick) are the exchange's."""

    gpus = NumberField(label=_("GPUs offered"), places=0)
    price_usd = NumberField(
        label=_("Price per GPU-hour (US$)"), places=2, help_text=_("Prices move in steps of one US cent."),
    )


class PricingHelpForm(forms.Form):
    """The offer form's fields as the pricing help reads them while the seller types: both may be
    empty or wrong (the help then says what is wrong with the price and shows the market alone)."""

    gpus = NumberField(places=0, required=False)
    price_usd = NumberField(places=2, required=False)


class InvitationForm(forms.Form):
    email = forms.EmailField(label=_("Email address"), max_length=254,
                             help_text=_("They join once they sign in with this email address."))


class PayoutDetailsForm(forms.Form):
    """The owner's payout account; the IBAN is checked by the service (seller_payout_details_update)."""

    iban = forms.CharField(label=_("IBAN"), max_length=50)
    account_holder = forms.CharField(label=_("Account holder"), max_length=200)
