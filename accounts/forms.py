from datetime import UTC, date, datetime, time, timedelta

from django import forms
from django.conf import settings
from django.contrib.auth.forms import AdminPasswordChangeForm, ReadOnlyPasswordHashWidget, UserChangeForm
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from marketplace.formatting import country_choices, country_name

from .models import LOW_BALANCE_HOURS_RANGE, ApiTokenScope, BillingType, Profile
from .time_zones import time_zone_is_known, time_zone_names
from .vat_ids import VatIdInvalid, vat_id_validate


class WholeNumberInput(forms.NumberInput):
    """A number input that shows back only a whole number: HTML refuses `value="três"` there (the
    error beside it says what was wrong)."""

    def format_value(self, value):
        text = super().format_value(value)
        return text if text and text.lstrip("-").isdigit() else None


class SignupTimeZoneForm(forms.Form):
    """What allauth's sign-up form adds (settings.ACCOUNT_SIGNUP_FORM_CLASS): the browser's time zone,
    filled in by static/js/site.js. Without JavaScript, or with a name we do not know, it is empty and
    the profile gets the language's usual zone (accounts.time_zones.time_zone_proposed)."""

    time_zone = forms.CharField(required=False, strip=True, widget=forms.HiddenInput(
        attrs={"data-browser-time-zone": ""}
    ))

    def clean_time_zone(self) -> str:
        value = self.cleaned_data.get("time_zone", "")
        return value if time_zone_is_known(value) else ""

    def signup(self, request, user) -> None:
        """allauth calls this after saving the user; the adapter has already used the zone."""


class ProfileForm(forms.ModelForm):
    billing_country = forms.ChoiceField(label=_("Billing country"), required=True)
    # Both optional: a form sent without them (an older page) keeps what the profile has.
    time_zone = forms.ChoiceField(
        label=_("Time zone"), required=False, help_text=_("Every page shows dates and times in this zone.")
    )
    low_balance_warning_hours = forms.IntegerField(
        label=_("Low-balance warning"), required=False, widget=WholeNumberInput,
        min_value=LOW_BALANCE_HOURS_RANGE[0],
        max_value=LOW_BALANCE_HOURS_RANGE[1],
        help_text=_("We email you when your balance covers fewer hours than this of your running "
                    "rentals (from 1 to 720 hours)."),
        error_messages={
            "min_value": _("Choose between 1 and 720 hours."),
            "max_value": _("Choose between 1 and 720 hours."),
            "invalid": _("Enter a whole number of hours between 1 and 720."),
        },
    )

    class Meta:
        model = Profile
        fields = (
            "name", "preferred_language", "billing_type", "billing_country", "address",
            "company_name", "vat_id", "time_zone", "low_balance_warning_hours",
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
        self.fields["time_zone"].choices = [(name, name.replace("_", " ")) for name in time_zone_names()]
        self.fields["time_zone"].error_messages["invalid_choice"] = _("Choose a time zone from the list.")

    def clean_time_zone(self) -> str:
        return self.cleaned_data.get("time_zone") or self.instance.time_zone

    def clean_low_balance_warning_hours(self) -> int:
        hours = self.cleaned_data.get("low_balance_warning_hours")
        return self.instance.low_balance_warning_hours if hours is None else hours

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
    allows that attribute on form controls only, and the summary is a <div>. Its template puts the
    language's colon after each label (French "algorithme\u00a0: md5"), where Django glues ":"."""

    template_name = "accounts/widgets/password_summary.html"

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


class UserPasswordAdminForm(AdminPasswordChangeForm):
    """Django's form for an operator setting a user's password, with the help of its "password-based
    authentication" switch in the page's language: Django joins that help to an English warning when
    it imports the form, which freezes it in English."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "usable_password" in self.fields:
            self.fields["usable_password"].help_text = format_html(
                '{}<ul id="id_unusable_warning" class="messagelist"><li class="warning">{}</li></ul>',
                _("Whether the user will be able to authenticate using a password or not. If disabled, they "
                  "may still be able to authenticate using other backends, such as Single Sign-On or LDAP."),
                _("If disabled, the current password for this user will be lost."),
            )


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
