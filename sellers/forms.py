from django import forms
from django.utils.translation import gettext_lazy as _

from marketplace.formatting import country_choices

from .models import SellerApplication


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
            "vat_id": _("The VAT ID of the company in the country above, for example PT999999999."),
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

    def service_fields(self) -> dict:
        return dict(self.cleaned_data)
