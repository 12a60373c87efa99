from django import forms
from django.utils.translation import gettext_lazy as _

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
