from decimal import Decimal

import pytest

from marketplace.errors import DomainError
from marketplace.money import CURRENCIES, MINOR_UNITS, InvalidAmount, money_round, parse_amount


def test_currencies_and_minor_units():
    assert CURRENCIES == ("EUR", "USD", "GBP")
    assert MINOR_UNITS == {"EUR": 2, "USD": 2, "GBP": 2}


@pytest.mark.parametrize(
    ("amount", "rounded"),
    [
        ("2.645", "2.65"),
        ("2.644", "2.64"),
        ("2.625", "2.63"),  # half-up, where banker's rounding would give 2.62
        ("-2.645", "-2.65"),  # half away from zero
        ("0.005", "0.01"),
        ("0.0049", "0.00"),
        ("7", "7.00"),
    ],
)
def test_money_round_is_half_up_to_the_minor_unit(amount, rounded):
    result = money_round(Decimal(amount), "EUR")
    assert result == Decimal(rounded)
    assert str(result) == rounded


def test_money_round_refuses_floats_nan_and_unknown_currencies():
    with pytest.raises(TypeError):
        money_round(2.645, "EUR")
    with pytest.raises(ValueError):
        money_round(Decimal("NaN"), "EUR")
    with pytest.raises(ValueError):
        money_round(Decimal("1.00"), "JPY")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12.5", "12.50"), (" 7 ", "7.00"), ("0.01", "0.01"), ("-3.10", "-3.10"), ("+4", "4.00"),
        (".5", "0.50"), ("999999999999.99", "999999999999.99"), ("1,5", "1.50"), ("0,50", "0.50"),
    ],
)
def test_parse_amount_reads_plain_decimals(text, expected):
    value = parse_amount(text, "USD")
    assert value == Decimal(expected)
    assert str(value) == expected


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("", "amount_not_a_number"),
        ("abc", "amount_not_a_number"),
        ("1,000.00", "amount_thousands_separator"),
        ("1 000", "amount_thousands_separator"),
        ("١٠٠", "amount_not_a_number"),
        ("１００", "amount_not_a_number"),
        ("1e3", "amount_not_a_number"),
        ("1_000", "amount_not_a_number"),
        ("€5", "amount_not_a_number"),
        ("NaN", "amount_not_finite"),
        ("sNaN", "amount_not_finite"),
        ("Infinity", "amount_not_finite"),
        ("-inf", "amount_not_finite"),
        ("1.005", "amount_too_many_decimals"),
        ("1.500", "amount_too_many_decimals"),
        ("1000000000000", "amount_too_large"),
    ],
)
def test_parse_amount_refusals_have_a_code_and_a_message(text, code):
    with pytest.raises(InvalidAmount) as refused:
        parse_amount(text, "EUR")
    assert refused.value.code == code
    assert str(refused.value.message)
    assert isinstance(refused.value, DomainError)
    assert isinstance(refused.value, ValueError)


def test_parse_amount_refuses_floats_and_unknown_currencies():
    with pytest.raises(TypeError):
        parse_amount(1.5, "EUR")
    with pytest.raises(ValueError):
        parse_amount("1.50", "XYZ")
