import uuid
from datetime import timedelta
from decimal import Decimal

from django import forms
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from catalog.models import GpuModel
from marketplace import formatting
from marketplace.forms import NumberField
from sellers.isolation import ANY_LEVEL, LEVELS_BY_STRENGTH, IsolationLevel, levels_of_text
from sellers.models import Region
from sellers.selectors import container_template_default, container_templates_published

from .exceptions import BidRejected, SshKeyRejected
from .models import BID_GPU_COUNTS
from .services import (
    container_template_choose,
    isolation_levels_parse,
    min_reliability_parse,
    ssh_key_name_clean,
)

GPU_CHOICES = [(count, str(count)) for count in BID_GPU_COUNTS]

# The minimum reliabilities the trade page offers, as shares (the API takes any share).
RELIABILITY_MINIMUMS = (Decimal("0.9"), Decimal("0.95"), Decimal("0.99"))


def reliability_choices() -> list[tuple[str, str]]:
    """Any server, or one of the minimums, each named as a percentage in the page's language."""
    return [("", _("Any reliability"))] + [
        (str(minimum), formatting.share(minimum)) for minimum in RELIABILITY_MINIMUMS
    ]


# How long a bid placed on the trade page may rest in the book, by the value its form posts. A
# choice rather than a date: the browser's date picker follows the browser's locale, not the page's
# language. The exchange sets no longest expiry (only "in the future"); "" rests until filled or
# cancelled. The API takes any `expires_at`.
BID_EXPIRIES = {
    "1h": timedelta(hours=1), "6h": timedelta(hours=6), "24h": timedelta(hours=24),
    "3d": timedelta(days=3), "7d": timedelta(days=7),
}


def expiry_choices() -> list[tuple[str, str]]:
    """The expiries of `BID_EXPIRIES` in the page's language (up to a day in hours, as buyers count
    them: "in 24 hours"), then "never"."""
    choices = []
    for value, duration in BID_EXPIRIES.items():
        if duration <= timedelta(days=1):
            hours = duration // timedelta(hours=1)
            label = ngettext("In %(count)s hour", "In %(count)s hours", hours) % {
                "count": formatting.number(hours)
            }
        else:
            days = duration.days
            label = ngettext("In %(count)s day", "In %(count)s days", days) % {
                "count": formatting.number(days)
            }
        choices.append((value, label))
    return choices + [("", _("Never (until cancelled)"))]


class MinReliabilityField(forms.ChoiceField):
    """A minimum reliability picked from `reliability_choices`, sent as a share ("0.95"). Cleans to
    a Decimal, None for any server. Any share a bid may ask is taken, not only those listed: the
    rule is the exchange's (`min_reliability_parse`, which says what is wrong with a value)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("label", _("Minimum reliability"))
        super().__init__(choices=reliability_choices, required=False, **kwargs)

    def to_python(self, value) -> Decimal | None:
        try:
            return min_reliability_parse(super().to_python(value))
        except BidRejected as refused:
            raise forms.ValidationError(refused.message, code=refused.code) from None

    def validate(self, value) -> None:
        forms.Field.validate(self, value)  # any share, not only those listed


def isolation_choices() -> list[tuple[str, str]]:
    """The isolation levels, strongest first, named in the page's language."""
    return [(level.value, level.label) for level in LEVELS_BY_STRENGTH]


def isolation_levels_named(levels: str) -> str:
    """Levels as a bid stores them ("container,whole"), named in the page's language."""
    return ", ".join(str(IsolationLevel(value).label) for value in levels_of_text(levels))


class PostedCheckboxes(forms.CheckboxSelectMultiple):
    """Checkboxes that always post: an empty value of their name before them, so that a form with
    none ticked differs from a form without them (a client that predates them: its default)."""

    def render(self, name, value, attrs=None, renderer=None):
        return format_html('<input type="hidden" name="{}" value="">', name) + super().render(
            name, value, attrs=attrs, renderer=renderer
        )

    def value_from_datadict(self, data, files, name):
        return super().value_from_datadict(data, files, name) if name in data else None


class IsolationLevelsField(forms.MultipleChoiceField):
    """The isolation levels an order accepts, as checkboxes, all ticked at first. Cleans to the
    levels as a bid stores them (`isolation_levels_parse`); none ticked is refused, a form sent
    without the checkboxes accepts every level."""

    widget = PostedCheckboxes

    def __init__(self, **kwargs):
        kwargs.setdefault("label", _("Isolation levels"))
        kwargs.setdefault("initial", [level.value for level in LEVELS_BY_STRENGTH])
        super().__init__(choices=isolation_choices, required=False, **kwargs)

    def bound_data(self, data, initial):
        return initial if data is None else data

    def clean(self, value) -> str:
        if value is None:
            return ANY_LEVEL
        try:
            return isolation_levels_parse([chosen for chosen in value if chosen != ""])
        except BidRejected as refused:
            raise forms.ValidationError(refused.message, code=refused.code) from None


class TradeFilterForm(forms.Form):
    """What the trade page shows: only offers of servers at least this reliable, and at these
    isolation levels. A filter of the page (its query string), carried into the order forms, where
    the buyer sees it."""

    min_reliability = forms.TypedChoiceField(
        label=_("Minimum reliability"), choices=reliability_choices, required=False,
        coerce=Decimal, empty_value=None,
    )
    # Read by `isolation_filter_parse` (which also takes "container,whole"); shown as checkboxes.
    isolation = forms.MultipleChoiceField(
        label=_("Isolation levels"), choices=isolation_choices, required=False,
        widget=forms.CheckboxSelectMultiple,
    )

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("auto_id", "filter_%s")
        super().__init__(*args, **kwargs)

    def minimum(self) -> Decimal | None:
        """The minimum chosen, None for any server (also when the query string holds anything
        else: a filter that cannot be read filters nothing)."""
        return self.cleaned_data["min_reliability"] if self.is_valid() else None


class OrderTermsForm(forms.Form):
    """What an order asks for. The rules of each value (GPUs 1, 2, 4 or 8, the hours, the price's
    range and tick) are the exchange's (`bid_terms_check`), which the views ask after the form."""

    gpus = forms.TypedChoiceField(label=_("GPUs on one server"), choices=GPU_CHOICES, coerce=int)
    hours = NumberField(
        label=_("Hours"), places=0, required=False, help_text=_("Leave empty to run until you stop it."),
    )
    region = forms.ChoiceField(
        label=_("Region"), required=False, choices=[("", _("Any region"))] + list(Region.choices)
    )
    min_reliability = MinReliabilityField(
        help_text=_("Only servers at least this reliable. New servers, without a score yet, do not qualify."),
    )
    isolation = IsolationLevelsField(
        help_text=_("Only servers that keep renters apart at one of these levels (see the market rules)."),
    )
    template = forms.ChoiceField(
        label=_("Container template"), required=False,
        help_text=_("What your rental runs when a server sold as “Container” fills the order: only "
                    "servers holding it do."),
        error_messages={"invalid_choice": _("Choose one of the container templates listed.")},
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.templates = container_templates_published()
        if not self.templates:  # nothing to choose: containers run their server's own
            del self.fields["template"]
            return
        self.fields["template"].choices = [(template.slug, template.name) for template in self.templates]
        default = container_template_default(self.templates)
        self.fields["template"].initial = default.slug

    def clean_template(self):
        try:
            return container_template_choose(self.cleaned_data["template"])
        except BidRejected as refused:
            raise forms.ValidationError(refused.message, code=refused.code) from None

    def clean(self):
        data = super().clean()
        data.setdefault("template", None)
        return data


class BidTermsForm(OrderTermsForm):
    """The terms of a bid: what the cost preview reads (never an SSH key)."""

    max_price_usd = NumberField(label=_("Maximum price per GPU-hour (US$)"), places=2)

    field_order = ("gpus", "max_price_usd", "hours", "region", "min_reliability", "isolation", "template")


class OrderForm(forms.Form):
    """What placing an order needs besides its terms. `confirmed_price_usd` is the price per
    GPU-hour of the confirmation page the buyer accepted, for an order that buys at once.

    The key the rental's server lets in is one of the buyer's saved keys (`saved_keys`, theirs
    only: another id is no choice) or one pasted, which `save_key_as` names to save it once the
    order is placed. Cleaned, `ssh_public_key` holds the key either way."""

    ssh_key = forms.ChoiceField(
        label=_("Your SSH key"), required=False, widget=forms.RadioSelect,
        error_messages={"invalid_choice": _("Choose one of your saved keys, or paste a key.")},
    )
    ssh_public_key = forms.CharField(
        label=_("Your SSH public key"), max_length=16384, required=False,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "autocomplete": "off"}),
        help_text=_("ed25519, ECDSA or RSA of at least 2048 bits: the rental's server lets this key in."),
    )
    save_key_as = forms.CharField(
        label=_("Save this key as (optional)"), max_length=100, required=False,
        help_text=_("A name, for example the computer the key is on: your next orders offer it."),
    )
    form_token = forms.UUIDField(widget=forms.HiddenInput)
    confirmed_price_usd = NumberField(places=2, required=False, widget=forms.HiddenInput)
    # The trade page shows the buy and the bid form together: each needs ids of its own, so that a
    # label names its own field. The field names (what the page posts) stay the same.
    id_pattern = "id_%s"

    def __init__(self, *args, saved_keys=(), **kwargs):
        kwargs.setdefault("initial", {}).setdefault("form_token", uuid.uuid4())
        kwargs.setdefault("auto_id", self.id_pattern)
        super().__init__(*args, **kwargs)
        self.saved_keys = {str(key.pk): key for key in saved_keys}
        if not self.saved_keys:
            del self.fields["ssh_key"]
            return
        self.fields["ssh_key"].choices = [
            (pk, f"{key.name} · {key.fingerprint}") for pk, key in self.saved_keys.items()
        ] + [("", _("Another key, pasted below"))]
        self.fields["ssh_key"].initial = next(iter(self.saved_keys))
        self.fields["ssh_public_key"].label = _("Or paste a public key")

    def clean(self):
        data = super().clean()
        chosen = self.saved_keys.get(data.get("ssh_key") or "")
        if chosen is not None:
            data["ssh_public_key"], data["save_key_as"] = chosen.public_key, ""
        elif "ssh_key" not in self.errors and not data.get("ssh_public_key", "").strip():
            message = (
                _("Choose one of your saved keys, or paste a key.") if self.saved_keys
                else _("Paste your SSH public key: the rental's server lets only this key in.")
            )
            self.add_error("ssh_public_key", message)
        elif data.get("save_key_as"):
            try:
                data["save_key_as"] = ssh_key_name_clean(data["save_key_as"])
            except SshKeyRejected as rejected:
                self.add_error("save_key_as", rejected.message)
        return data


class BuyNowForm(OrderForm, OrderTermsForm):
    """Buy at the best offer. The best price of each size that the page shows (all regions) travels
    with the form: the buyer never pays more than the page or the confirmation said."""

    price_1 = NumberField(places=2, required=False, widget=forms.HiddenInput)
    price_2 = NumberField(places=2, required=False, widget=forms.HiddenInput)
    price_4 = NumberField(places=2, required=False, widget=forms.HiddenInput)
    price_8 = NumberField(places=2, required=False, widget=forms.HiddenInput)

    field_order = (
        "gpus", "hours", "region", "min_reliability", "isolation", "template", "ssh_key", "ssh_public_key",
        "save_key_as",
    )
    id_pattern = "buy_%s"

    def price_agreed(self):
        """The most the buyer agreed to pay per GPU-hour: the confirmed price, else the price the
        page showed for the size chosen; None when neither."""
        data = self.cleaned_data
        if data.get("confirmed_price_usd") is not None:
            return data["confirmed_price_usd"]
        return data.get(f"price_{data['gpus']}")


class BidForm(OrderForm, BidTermsForm):
    """A resting bid. `cleaned_data["expires_at"]` is the moment its `expires_in` ends, counted from
    when the form is cleaned (a confirmed bid counts again from its confirmation), None for never."""

    expires_in = forms.ChoiceField(
        # "Never" is listed last but chosen unless the buyer picks another: a browser would
        # otherwise choose the first, an hour.
        label=_("Expires"), choices=expiry_choices, required=False, initial="",
        help_text=_("If no offer has matched it by then, the bid leaves the book."),
        error_messages={"invalid_choice": _("Choose one of the expiry times listed.")},
    )

    field_order = (
        "gpus", "max_price_usd", "hours", "region", "min_reliability", "isolation", "template", "expires_in",
        "ssh_key", "ssh_public_key", "save_key_as",
    )
    id_pattern = "bid_%s"

    def clean(self):
        data = super().clean()
        duration = BID_EXPIRIES.get(data.get("expires_in") or "")
        data["expires_at"] = timezone.now() + duration if duration is not None else None
        return data


class SshKeyForm(forms.Form):
    """A public key to save. Its rules (name, key type and strength) are `ssh_key_add`'s."""

    name = forms.CharField(
        label=_("Name"), max_length=100, help_text=_("For example the computer the key is on.")
    )
    public_key = forms.CharField(
        label=_("SSH public key"), max_length=16384,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "autocomplete": "off"}),
        help_text=_("The one line of your public key file, for example ~/.ssh/id_ed25519.pub."),
    )


class PriceAlertForm(forms.Form):
    """An alert to set: a GPU model, a size and a threshold. Their rules are `price_alert_set`'s.
    On the trade page the model is the page's, in a hidden field (`model_hidden`)."""

    gpu_model = forms.ModelChoiceField(
        label=_("GPU model"), queryset=GpuModel.objects.order_by("position", "name"),
        empty_label=None, error_messages={"invalid_choice": _("We do not list this GPU model.")},
    )
    gpus = forms.TypedChoiceField(label=_("GPUs on one server"), choices=GPU_CHOICES, coerce=int)
    threshold_usd = NumberField(
        label=_("Alert me at or below (US$ per GPU-hour)"), places=2,
        help_text=_("We email you once when the best offer for this size reaches this price."),
    )

    def __init__(self, *args, model_hidden: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        if model_hidden:
            self.fields["gpu_model"].widget = forms.HiddenInput()
