from decimal import Decimal

from django import forms
from django.utils.translation import gettext_lazy as _

from exchange.services import MAX_BID_HOURS
from marketplace import formatting
from marketplace.forms import NumberField

from .fit import METHOD_LABELS
from .models import GpuModel
from .workloads import WORKLOADS

COMPARE_MIN = 2
COMPARE_MAX = 4


class CompareForm(forms.Form):
    workload = forms.ChoiceField(label=_("Workload"))
    gpu = forms.MultipleChoiceField(
        label=_("GPUs to compare"),
        widget=forms.CheckboxSelectMultiple,
        error_messages={
            "invalid_choice": _("We do not list a GPU called “%(value)s”. Pick one from the list."),
            "required": _("Choose at least two GPUs to compare."),
        },
    )

    def __init__(self, *args, gpus: list[GpuModel], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["workload"].choices = [(w.slug, w.nav_title) for w in WORKLOADS]
        self.fields["workload"].error_messages["invalid_choice"] = _(
            "We have no workload called “%(value)s”. Pick one from the list."
        )
        self.fields["gpu"].choices = [(gpu.slug, gpu.name) for gpu in gpus]

    def clean_gpu(self) -> list[str]:
        slugs = list(dict.fromkeys(self.cleaned_data["gpu"]))
        if len(slugs) < COMPARE_MIN:
            raise forms.ValidationError(_("Choose at least two GPUs to compare."), code="too_few")
        if len(slugs) > COMPARE_MAX:
            raise forms.ValidationError(
                _("You can compare at most four GPUs at a time."), code="too_many"
            )
        return slugs


# The model sizes, in billions of parameters, the fit calculator offers to pick.
COMMON_MODEL_SIZES = (1, 3, 7, 8, 13, 14, 32, 34, 70, 72, 123, 405)
MAX_MODEL_BILLIONS = 10000
MAX_FIT_HOURS = MAX_BID_HOURS  # what an order may ask: the "Rent this" link carries the hours


class FitForm(forms.Form):
    """The fit calculator's question: a model size, a method and, if wanted, a number of hours."""

    params_b = NumberField(
        label=_("Model size, in billions of parameters"), places=1,
        error_messages={"required": _("Enter the size of the model, for example 7 or 70.")},
    )
    method = forms.ChoiceField(
        label=_("Method"), choices=[(str(m), label) for m, label in METHOD_LABELS.items()],
        error_messages={"invalid_choice": _("Choose one of the methods listed.")},
    )
    hours = NumberField(
        label=_("Hours (optional)"), places=0, required=False,
        help_text=_("Leave empty to see the cost of one hour."),
    )

    def clean_params_b(self) -> Decimal:
        size = self.cleaned_data["params_b"]
        if not Decimal("0.1") <= size <= MAX_MODEL_BILLIONS:
            raise forms.ValidationError(
                _("The model size must be from 0.1 to %(max)s billion parameters."),
                code="params_out_of_range", params={"max": formatting.number(MAX_MODEL_BILLIONS)},
            )
        return size

    def clean_hours(self) -> int | None:
        hours = self.cleaned_data["hours"]
        if hours is not None and not 1 <= hours <= MAX_FIT_HOURS:
            raise forms.ValidationError(
                _("The number of hours must be a whole number from 1 to %(max)s, or empty."),
                code="hours_out_of_range", params={"max": formatting.number(MAX_FIT_HOURS)},
            )
        return hours
