"""Form fields that every app's forms share, and the form renderer of the site."""

import re
from decimal import Decimal

from django import forms
from django.forms.renderers import DjangoTemplates

from marketplace import formatting
from marketplace.money import MAX_NUMBER_LENGTH, InvalidNumber, number_parse


class NumberField(forms.Field):
    """A number typed in the page's language ("0,50" in French, "0.50" in English), read by
    `marketplace.money.number_parse` and shown for editing by `formatting.number_input`.

    A text input, with the decimal keypad on phones (`inputmode`): a browser's number input
    drops a comma it does not expect ("0,50" became "050"). Cleans to a Decimal with at most
    `places` decimals, an int when `places` is 0, None when left empty. Ranges are the rules of
    the service the form feeds, which says what is wrong with a value."""

    widget = forms.TextInput

    def __init__(self, *, places: int = 2, **kwargs):
        self.places = places  # before Field.__init__, which asks widget_attrs
        super().__init__(**kwargs)

    def widget_attrs(self, widget) -> dict:
        attrs = super().widget_attrs(widget)
        if not widget.is_hidden:
            attrs.update({
                "inputmode": "decimal" if self.places else "numeric",
                "autocomplete": "off",
                "maxlength": str(MAX_NUMBER_LENGTH),
            })
        return attrs

    def to_python(self, value) -> Decimal | int | None:
        if value in self.empty_values or not str(value).strip():
            return None
        try:
            number = number_parse(str(value), places=self.places)
        except InvalidNumber as invalid:
            raise forms.ValidationError(invalid.message, code=invalid.code) from None
        return int(number) if self.places == 0 else number

    def prepare_value(self, value):
        """A number in the page's notation; text (what was typed) as it is."""
        if isinstance(value, Decimal | int) and not isinstance(value, bool):
            return formatting.number_input(value, places=self.places)
        return value


# A value sent back into a one-line field shows its line breaks as spaces (HTML forbids them in
# `value`), and a date-and-time field shows only a value the browser can read.
_LINE_BREAKS = re.compile(r"[\r\n\t]+")
_LOCAL_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?")


class DisplayBoundField(forms.BoundField):
    """What a form shows back of the values it was sent: never markup a page cannot hold. What
    the form validates (`data`) is left exactly as sent."""

    def value(self):
        value = super().value()
        widget = self.field.widget
        if not isinstance(value, str) or not isinstance(widget, forms.widgets.Input):
            return value
        if widget.input_type == "datetime-local" and not _LOCAL_DATETIME.fullmatch(value.strip()):
            return ""
        return _LINE_BREAKS.sub(" ", value)


class FormRenderer(DjangoTemplates):
    """The site's form renderer (`FORM_RENDERER`): Django's own, with `DisplayBoundField`."""

    bound_field_class = DisplayBoundField
