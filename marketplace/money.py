"""The one money helper module: which currencies exist, their minor units, rounding, parsing.

Amounts are `Decimal`, never float. Every amount that reaches the ledger is rounded once, half-up,
to its currency's minor unit (`money_round`). Text typed by people goes through `parse_amount`,
which refuses what is not a plain decimal number instead of guessing.
"""

import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from django.utils.translation import gettext_lazy as _

from marketplace.errors import DomainError

CURRENCIES: tuple[str, ...] = ("EUR", "USD", "GBP")

# Digits after the decimal point of each currency (ISO 4217 minor unit).
MINOR_UNITS: dict[str, int] = {"EUR": 2, "USD": 2, "GBP": 2}

# Ledger and wallet columns are Decimal(14, 2): twelve digits before the point.
MAX_DIGITS = 14

# A plain decimal number: optional sign, digits, optional decimals. No exponent, no
# thousands separators, no underscores (all of which `Decimal()` would accept).
_PLAIN_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")


class InvalidAmount(DomainError, ValueError):
    """Text that is not an amount of the given currency. A `ValueError` too, for generic callers."""

    code = "amount_invalid"


def _currency_check(currency: str) -> str:
    if currency not in MINOR_UNITS:
        raise ValueError(f"Unknown currency {currency!r}; expected one of {', '.join(CURRENCIES)}.")
    return currency


def minor_unit(currency: str) -> int:
    """Decimals of the currency: 2 for EUR, USD and GBP."""
    return MINOR_UNITS[_currency_check(currency)]


def quantum(currency: str) -> Decimal:
    """The smallest amount of the currency, as a Decimal exponent: `Decimal("0.01")`."""
    return Decimal(1).scaleb(-minor_unit(currency))


def money_round(amount: Decimal, currency: str) -> Decimal:
    """Round half-up to the currency's minor unit: 2.645 -> 2.65, -2.645 -> -2.65 (away from zero)."""
    if isinstance(amount, float) or not isinstance(amount, Decimal | int):
        raise TypeError(f"Money amounts are Decimal, not {type(amount).__name__}.")
    amount = Decimal(amount)
    if not amount.is_finite():
        raise ValueError(f"{amount} is not an amount of money.")
    return amount.quantize(quantum(currency), rounding=ROUND_HALF_UP)


def is_rounded(amount: Decimal, currency: str) -> bool:
    """True when the amount has no more precision than the currency's minor unit."""
    return (
        isinstance(amount, Decimal)
        and amount.is_finite()
        and amount == amount.quantize(quantum(currency), rounding=ROUND_HALF_UP)
    )


def parse_amount(text: str, currency: str) -> Decimal:
    """The Decimal written in `text` ("12.5", " 12.50 ", "-3"), as an amount of `currency`.

    Raises `InvalidAmount` (a `DomainError` and a `ValueError`) with one of these codes:
    `amount_not_a_number` (empty, letters, exponent, separators), `amount_not_finite`
    (NaN, Infinity), `amount_too_many_decimals` (more decimals written than the currency
    has, "1.500" included: in Portuguese that would mean one thousand five hundred),
    `amount_too_large` (more than the ledger stores). Only "." is a decimal point: parsing
    the active language's own notation belongs to the form that reads it.
    """
    _currency_check(currency)
    if isinstance(text, float):
        raise TypeError("Amounts are parsed from text, never from float.")
    cleaned = str(text).strip()
    not_a_number = InvalidAmount(
        _("Enter an amount as a number, for example 25.00."), code="amount_not_a_number"
    )
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        raise not_a_number from None
    if not value.is_finite():
        raise InvalidAmount(_("Enter a real amount, for example 25.00."), code="amount_not_finite")
    if not _PLAIN_DECIMAL.fullmatch(cleaned):
        raise not_a_number
    places = minor_unit(currency)
    if -value.as_tuple().exponent > places:
        raise InvalidAmount(
            _("This currency has %(places)d decimals; enter at most %(places)d digits after the point.")
            % {"places": places},
            code="amount_too_many_decimals",
        )
    if abs(value) >= Decimal(10) ** (MAX_DIGITS - places):
        raise InvalidAmount(_("This amount is too large."), code="amount_too_large")
    return money_round(value, currency)
