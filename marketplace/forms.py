"""Form fields that every app's forms share."""

from decimal import Decimal

from django import forms

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
