from datetime import UTC, date, datetime, time, timedelta

from django import forms
from django.conf import settings
from django.contrib.auth.forms import ReadOnlyPasswordHashWidget, UserChangeForm
from django.utils.translation import gettext_lazy as _

from marketplace.formatting import country_choices, country_name

from .models import ApiTokenScope, BillingType, Profile
from .vat_ids import VatIdInvalid, vat_id_validate


class ProfileForm(forms.ModelForm):
    billing_country = forms.ChoiceField(label=_("Billing country"), required=True)

    class Meta:
        model = Profile
        fields = (
            "name", "preferred_language", "billing_type", "billing_country", "address",
            "company_name", "vat_id",
        )
        widgets = {
            "billing_type": forms.RadioSelect,
            "address": forms.Textarea(attrs={"rows": 3}),
        }
        help_texts = {
            "preferred_language": _("The language of the emails we send you."),
            "vat_id": _("Businesses in the EU: with a valid VAT ID from another member state, "
                        "top-ups are invoiced under the reverse charge."),
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["billing_country"].choices = [("", "—")] + country_choices()
        self.fields["preferred_language"].choices = [
            (code, settings.LANGUAGE_NATIVE_NAMES[code]) for code, _name in settings.LANGUAGES
        ]
        self.fields["name"].required = True

    def clean(self):
        data = super().clean()
        if data.get("billing_type") != BillingType.BUSINESS:
            data["company_name"] = ""
            data["vat_id"] = ""
            return data
        if not data.get("company_name"):
            self.add_error("company_name", _("Businesses must give their company name."))
        vat_id, country = data.get("vat_id", ""), data.get("billing_country")
        if vat_id and country:
            try:
                data["vat_id"] = vat_id_validate(country=country, number=vat_id).number
            except VatIdInvalid as invalid:
                self.add_error("vat_id", self._vat_error(invalid))
        return data

    @staticmethod
    def _vat_error(invalid: VatIdInvalid) -> str:
        name = country_name(invalid.country)
        if invalid.wrong_country:
            return _("This VAT ID belongs to another country than %(country)s, your billing country.") % {
                "country": name
            }
        if invalid.pattern:
            return _(
                "This is not a valid VAT ID for %(country)s. Expected format: %(pattern)s "
                "(9 stands for a digit, X for a letter or a digit)."
            ) % {"country": name, "pattern": invalid.pattern}
        return _("This is not a valid VAT ID for %(country)s.") % {"country": name}


class PasswordSummaryWidget(ReadOnlyPasswordHashWidget):
    """Django's summary of a password hash without the `disabled` that its field passes on: HTML
    allows that attribute on form controls only, and the summary is a <div>."""

    def get_context(self, name, value, attrs):
        context = super().get_context(name, value, attrs)
        context["widget"]["attrs"].pop("disabled", None)
        return context


class UserAdminForm(UserChangeForm):
    """The admin's form of a user, its password summary valid HTML."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "password" in self.fields:
            self.fields["password"].widget = PasswordSummaryWidget()


class DayInput(forms.DateInput):
    """A date input that shows back only a real ISO day: a browser's date field can hold nothing
    else (HTML refuses `value="tomorrow"`), and the error beside it says what was wrong."""

    def format_value(self, value):
        text = super().format_value(value)
        try:
            date.fromisoformat(text or "")
        except ValueError:
            return None
        return text


class ApiTokenForm(forms.Form):
    """A new API token: its name, its scopes (`sell` only offered to whom may have it) and an
    optional last day. The service checks everything again."""

    name = forms.CharField(
        label=_("Name"), max_length=100,
        help_text=_("Say what uses it, such as “training cluster” or “price alerts”."),
    )
    scopes = forms.MultipleChoiceField(
        label=_("Scopes"), widget=forms.CheckboxSelectMultiple,
        error_messages={"required": _("Choose at least one scope.")},
    )
    expires_on = forms.DateField(
        label=_("Last day (optional)"), required=False,
        widget=DayInput(attrs={"type": "date"}, format="%Y-%m-%d"),
        help_text=_("The token stops working at the end of this day (UTC). Leave empty for a token "
                    "that works until you revoke it."),
    )

    def __init__(self, *args, can_sell: bool, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["scopes"].choices = [
            (scope.value, scope.label) for scope in ApiTokenScope if can_sell or scope != ApiTokenScope.SELL
        ]

    def clean_expires_on(self):
        day = self.cleaned_data.get("expires_on")
        if day is not None and day > date.today() + MAX_TOKEN_LIFE:
            raise forms.ValidationError(_("Choose a day within the next ten years."))
        return day

    def expires_at(self):
        """The end of the chosen day in UTC, or None."""
        day = self.cleaned_data.get("expires_on")
        if day is None:
            return None
        return datetime.combine(day + timedelta(days=1), time.min, tzinfo=UTC)


# The furthest last day the form offers (a date near year 9999 would not survive the arithmetic).
MAX_TOKEN_LIFE = timedelta(days=3653)
