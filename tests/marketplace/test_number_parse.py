"""The one parser of numbers people type (prices, amounts, hours, GPU counts), in every language."""

from decimal import Decimal

import pytest
from django import forms
from django.utils import translation
from hypothesis import given, settings
from hypothesis import strategies as st

from marketplace import formatting
from marketplace.forms import NumberField
from marketplace.money import InvalidNumber, number_parse

LANGUAGES = ("en", "pt", "fr")
EXAMPLES = {"en": "1234.50", "pt": "1234,50", "fr": "1234,50"}


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0,50", "0.50"), ("0.50", "0.50"), (" 12,5 ", "12.5"), ("7", "7"), (",5", "0.5"), ("5.", "5"),
        ("-3,10", "-3.10"), ("+4", "4"), ("000012", "12"), ("999999999999.99", "999999999999.99"),
    ],
)
def test_both_decimal_separators_are_read_in_every_language(language, text, expected):
    with translation.override(language):
        assert number_parse(text, places=2) == Decimal(expected)


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("1 000,50", "thousands_separator"), ("1,000.50", "thousands_separator"),
        ("1.000,50", "thousands_separator"), ("1\u00a0000", "thousands_separator"),
        ("1\u202f000", "thousands_separator"), ("1'000", "thousands_separator"),
        ("1.000.000", "thousands_separator"),
        ("1.500", "too_many_decimals"), ("2,505", "too_many_decimals"),
        ("١٠٠", "not_a_number"), ("１００", "not_a_number"), ("٢,٥٠", "not_a_number"),
        ("1e3", "not_a_number"),
        ("1E-2", "not_a_number"), ("0x10", "not_a_number"), ("1_000", "not_a_number"), ("", "not_a_number"),
        ("   ", "not_a_number"), (".", "not_a_number"), ("-", "not_a_number"), ("1,2,3", "not_a_number"),
        ("€5", "not_a_number"), ("5 $", "not_a_number"), ("−5", "not_a_number"),
        ("x" * 10_240, "not_a_number"),
        ("1" * 41, "not_a_number"), ("NaN", "not_finite"), ("sNaN", "not_finite"),
        ("-Infinity", "not_finite"), ("inf", "not_finite"),
        ("9999999999999", "too_large"), ("99999999999999999999999999999", "too_large"),
    ],
)
def test_refusals_name_the_format_of_the_pages_language(language, text, code):
    with translation.override(language), pytest.raises(InvalidNumber) as refused:
        number_parse(text, places=2)
    assert refused.value.code == code
    if code != "too_large":
        assert EXAMPLES[language] in str(refused.value.message)


@pytest.mark.parametrize(("text", "expected"), [("24", 24), ("0", 0), ("-2", -2), ("12.", 12)])
def test_whole_numbers(text, expected):
    assert number_parse(text, places=0) == expected


@pytest.mark.parametrize("text", ["1,5", "1.000", "0.5", "٣", "２"])
def test_whole_numbers_refuse_decimals_and_other_digits(text):
    with translation.override("fr"), pytest.raises(InvalidNumber) as refused:
        number_parse(text, places=0)
    assert "24" in str(refused.value.message)


@given(st.text(max_size=60))
@settings(max_examples=300, deadline=None)
def test_any_text_is_a_plain_number_or_a_refusal(text):
    try:
        value = number_parse(text, places=2)
    except InvalidNumber as refused:
        assert refused.code and str(refused.message)
    else:
        assert value.is_finite() and -value.as_tuple().exponent <= 2
        assert all("0" <= char <= "9" or char in "+-.," for char in text.strip())


@pytest.mark.parametrize(
    ("language", "expected"), [("en", "0.79"), ("pt", "0,79"), ("fr", "0,79")]
)
def test_inputs_are_prefilled_in_the_pages_notation_and_read_back(language, expected):
    assert formatting.number_input(Decimal("0.79"), places=2, language=language) == expected
    assert formatting.number_input(Decimal("12345.5"), places=2, language=language).startswith("12345")
    with translation.override(language):
        assert number_parse(expected, places=2) == Decimal("0.79")


class PriceForm(forms.Form):
    price = NumberField(places=2)
    hours = NumberField(places=0, required=False)


def test_the_fields_are_text_inputs_for_the_phones_keypads_prefilled_in_the_pages_notation():
    with translation.override("fr"):
        html = str(PriceForm(initial={"price": Decimal("0.79"), "hours": 24}))
    assert '<input type="text" name="price" value="0,79" inputmode="decimal"' in html
    assert '<input type="text" name="hours" value="24" inputmode="numeric"' in html


def test_the_fields_clean_to_numbers_and_keep_what_was_typed_on_error():
    with translation.override("fr"):
        form = PriceForm({"price": "0,50", "hours": "8"})
        assert form.is_valid() and form.cleaned_data == {"price": Decimal("0.50"), "hours": 8}
        form = PriceForm({"price": "1 000,50", "hours": ""})
        assert not form.is_valid() and form.cleaned_data == {"hours": None}
        assert 'value="1 000,50"' in str(form["price"])
        assert "1234,50" in form.errors["price"][0]
