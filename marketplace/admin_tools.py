"""What every operator action in the admin shares: a form that asks for the reason (and, where
money moves, the amount) before anything happens, then one service call per selected object.

The services check the operator's role, write the audit entry and refuse bad input with a
translated `DomainError`; this module only shows their answers. Each form carries a one-time
`request_key`, which money services put in their idempotency key: a form sent twice (a double
click, a reload) moves money once.
"""

from collections.abc import Callable
from uuid import uuid4

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse
from django.templatetags.static import static
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from marketplace import formatting
from marketplace.errors import DomainError


class ReadOnlyAdminMixin:
    """History is append-only: nobody adds, changes or deletes these rows through the admin, not
    even a superuser. They change through the services (and the admin actions that call them)."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


# --- figures in the page's language --------------------------------------------------------------
# Django shows a DecimalField as a bare number in its own notation (and a MoneyField as django-money's
# text run through that notation again: `-0,63 €,00`); these columns and read-only fields write it
# through marketplace/formatting.py instead, with its currency, as the rest of the site does. Each is
# named and sorted as the model's field is.


def _figure(model, field: str, show: Callable[[object, object], str]):
    def display(obj):
        value = getattr(obj, field)
        # A read-only field would show None as "None": an empty one reads as the site's "no figure".
        return formatting.NO_FIGURE if value is None else show(obj, getattr(value, "amount", value))

    display.__name__ = field  # the cell's and the read-only row's CSS class, as for the field itself
    return admin.display(description=model._meta.get_field(field).verbose_name, ordering=field)(display)


def money_display(model, field: str, currency: str = "currency"):
    """An amount in the currency that `currency` (a field of the same row) names: `-€0.63`, `-0,63 €`."""
    return _figure(model, field, lambda obj, value: formatting.money(value, getattr(obj, currency)))


def usd_display(model, field: str):
    """An amount in US dollars: `$0.33`, `0,33 $US`, `US$ 0,33`."""
    return _figure(model, field, lambda obj, value: formatting.usd(value))


def number_display(model, field: str):
    """A number with all the decimals it has (an exchange rate), without the stored trailing zeros."""
    return _figure(model, field, lambda obj, value: formatting.number_exact(value))


def percent_display(model, field: str):
    """A rate given in percent (a VAT rate of 23.00 -> `23%`, `23 %`)."""
    return _figure(model, field, lambda obj, value: formatting.percent(value))


def share_display(model, field: str):
    """A share from 0 to 1 (a reliability) as a percentage."""
    return _figure(model, field, lambda obj, value: formatting.share(value))


def yes_no_icon(value: bool | None) -> str:
    """Django's yes/no/unknown icon, its text in the page's language (Django writes alt="True")."""
    icon, text = {
        True: ("yes", gettext("Yes")), False: ("no", gettext("No")), None: ("unknown", gettext("Unknown")),
    }[value]
    return format_html('<img src="{}" alt="{}">', static(f"admin/img/icon-{icon}.svg"), text)


def yes_no_display(model, field: str):
    """A boolean field as Django's icon, with a translated text."""

    def display(obj):
        return yes_no_icon(getattr(obj, field))

    display.__name__ = field
    return admin.display(description=model._meta.get_field(field).verbose_name, ordering=field)(display)


class ReasonForm(forms.Form):
    reason = forms.CharField(
        label=_("Reason"),
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        max_length=1000,
        help_text=_("Recorded in the audit log with your name and the time."),
    )
    request_key = forms.CharField(widget=forms.HiddenInput, max_length=64)


class OptionalReasonForm(ReasonForm):
    reason = forms.CharField(
        label=_("Note (optional)"),
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        max_length=1000,
        required=False,
        help_text=_("Recorded in the audit log with your name and the time."),
    )


class AmountReasonForm(ReasonForm):
    amount = forms.CharField(label=_("Amount"), max_length=30)
    field_order = ("amount", "reason", "request_key")


class OperatorPermissions:
    """The operator roles as the admin's action permissions (`@admin.action(permissions=...)`)."""

    def has_decide_seller_permission(self, request) -> bool:
        return request.user.has_perm("sellers.decide_seller")

    def has_move_money_permission(self, request) -> bool:
        return request.user.has_perm("billing.move_money")

    def has_operate_market_permission(self, request) -> bool:
        return request.user.has_perm("exchange.operate_market")


def fresh_initial() -> dict:
    return {"request_key": uuid4().hex}


def action_run(modeladmin, request, objects, *, perform: Callable[[object], object],
               done_message: Callable[[int], str]) -> None:
    """Call `perform(obj)` for each object; report each refusal by the object's name, then the count
    of those done."""
    done = 0
    for obj in objects:
        try:
            perform(obj)
        except DomainError as refused:
            modeladmin.message_user(request, f"{obj}: {refused.message}", messages.ERROR)
        else:
            done += 1
    if done:
        modeladmin.message_user(request, done_message(done), messages.SUCCESS)


def action_with_form(
    modeladmin,
    request,
    queryset,
    *,
    form_class: type[forms.Form],
    title: str,
    intro: str,
    perform: Callable[[object, dict], object],
    done_message: Callable[[int], str],
    single: bool = False,
    refusal_field: str | None = None,
    template: str = "admin/operator_action_form.html",
):
    """Show `form_class` for the selected objects; once it is valid, call `perform(obj, data)` for
    each and report every refusal by name. Returns None (back to the list) or the form page.

    With `single` and a `refusal_field`, a refusal keeps the form open instead, with the operator's
    values and the service's message on that field, so that the operator corrects it in place."""
    objects = list(queryset)
    if single and len(objects) != 1:
        modeladmin.message_user(request, _("Select exactly one row for this action."), messages.WARNING)
        return None
    form = form_class(request.POST) if request.POST.get("confirm") == "yes" else None
    if form is not None and form.is_valid():
        data = form.cleaned_data
        if not (single and refusal_field):
            action_run(modeladmin, request, objects, perform=lambda obj: perform(obj, data),
                       done_message=done_message)
            return None
        try:
            perform(objects[0], data)
        except DomainError as refused:
            form.add_error(refusal_field, refused.message)
        else:
            modeladmin.message_user(request, done_message(1), messages.SUCCESS)
            return None
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "intro": intro,
        "form": form or form_class(initial=fresh_initial()),
        "objects": objects,
        "action": request.POST.get("action", ""),
        "opts": modeladmin.model._meta,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    return TemplateResponse(request, template, context)


def form_page(modeladmin, request, *, title: str, intro: str, form, template="admin/operator_form.html",
              extra: dict | None = None) -> TemplateResponse:
    """A page of the admin with one operator form (crediting by reference, loading rates...)."""
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "intro": intro,
        "form": form,
        "opts": modeladmin.model._meta,
        **(extra or {}),
    }
    return TemplateResponse(request, template, context)
