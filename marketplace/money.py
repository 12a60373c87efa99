"""The one money helper module: which currencies exist, their minor units, rounding, parsing.

Amounts are `Decimal`, never float. Every amount that reaches the ledger is rounded once, half-up,
to its currency's minor unit (`money_round`). Every number typed by people (prices, amounts, hours,
GPU counts) goes through `number_parse`, which reads the page's notation and refuses what is not
a plain number instead of guessing; `parse_amount` is that parser for an amount of a currency.
"""

import re
from decimal import ROUND_HALF_UP, Decimal

from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from marketplace import formatting
from marketplace.errors import DomainError

CURRENCIES: tuple[str, ...] = ("EUR", "USD", "GBP")

# Digits after the decimal point of each currency (ISO 4217 minor unit).
MINOR_UNITS: dict[str, int] = {"EUR": 2, "USD": 2, "GBP": 2}

# Ledger and wallet columns are Decimal(14, 2): twelve digits before the point.
MAX_DIGITS = 14

# A number as people type it: optional sign, ASCII digits, one optional decimal separator ("." or
# ","). No exponent, no underscores, no other digits (all of which `Decimal()` would accept).
_PLAIN_NUMBER = re.compile(r"([+-]?)([0-9]*)(?:[.,]([0-9]*))?", re.ASCII)
# Digits grouped by thousands ("1.000", "1 000,50", "1,000.00", "1'000"): refused, never guessed.
_GROUPED_NUMBER = re.compile(
    r"[+-]?[0-9]{1,3}(?:[ .,'\u00a0\u202f\u2009][0-9]{3})+(?:[.,][0-9]*)?", re.ASCII
)
# What `Decimal()` reads as a number that is not one.
_NOT_FINITE = {"nan", "snan", "inf", "infinity"}
# Nobody types more: the longest price, amount or count the site takes is far shorter.
MAX_NUMBER_LENGTH = 40


class InvalidNumber(DomainError, ValueError):
    """Text that is not a number as the form asks for it. Codes: `not_a_number` (empty, letters,
    exponent, non-ASCII digits), `not_finite` (NaN, Infinity), `thousands_separator`,
    `too_many_decimals`, `too_large`. The message names the expected format in the page's language."""

    code = "not_a_number"


def _example(places: int, language: str | None) -> str:
    """A number as the field wants it, in the page's notation: `1234.50`, `1234,50`, `24`."""
    example = Decimal("1234.50") if places else Decimal(24)
    return formatting.number_input(example, places=places, language=language)


def _not_a_number(places: int, language: str | None, *, code: str = "not_a_number") -> InvalidNumber:
    if places == 0:
        message = _("Enter a whole number such as %(example)s.")
    else:
        message = _("Enter a number such as %(example)s.")
    return InvalidNumber(message % {"example": _example(places, language)}, code=code)


def number_parse(
    text: str, *, places: int, max_integer_digits: int = 12, language: str | None = None
) -> Decimal:
    """The number written in `text`, with at most `places` decimals (0: a whole number).

    The decimal separator may be "." or "," in every language ("0,50" in French, "0.50" in
    English, both read everywhere); thousands separators are refused, and so is more than one
    separator, since "1.500" is one and a half in English and fifteen hundred in Portuguese. Only
    ASCII digits. Raises `InvalidNumber`, whose message gives an example in the notation of
    `language` (the active language by default). Ranges are the caller's rules."""
    if isinstance(text, float):
        raise TypeError("Numbers are parsed from text, never from float.")
    cleaned = str(text).strip()
    match = _PLAIN_NUMBER.fullmatch(cleaned) if len(cleaned) <= MAX_NUMBER_LENGTH else None
    if match is None or not (match[2] or match[3]):
        if cleaned.lstrip("+-").lower() in _NOT_FINITE:
            raise _not_a_number(places, language, code="not_finite")
        if _GROUPED_NUMBER.fullmatch(cleaned):
            raise InvalidNumber(
                _("Write the number without thousands separators, for example %(example)s.")
                % {"example": _example(places, language)},
                code="thousands_separator",
            )
        raise _not_a_number(places, language)
    sign, whole, decimals = match[1], match[2] or "0", match[3] or ""
    if len(decimals) > places and places == 0:
        raise _not_a_number(places, language, code="too_many_decimals")
    if len(decimals) > places:
        message = ngettext(
            "Enter at most %(places)d decimal, for example %(example)s.",
            "Enter at most %(places)d decimals, for example %(example)s.",
            places,
        )
        raise InvalidNumber(
            message % {"places": places, "example": _example(places, language)},
            code="too_many_decimals",
        )
    if len(whole.lstrip("0")) > max_integer_digits:
        raise InvalidNumber(_("This number is too large."), code="too_large")
    return Decimal(f"{sign}{whole}.{decimals}" if decimals else f"{sign}{whole}")


class InvalidAmount(InvalidNumber):
    """Text that is not an amount of the given currency: the codes of `InvalidNumber`, prefixed
    with `amount_`. A `DomainError` and a `ValueError` too, for generic callers."""

    code = "amount_not_a_number"


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


def parse_amount(text: str, currency: str, *, language: str | None = None) -> Decimal:
    """The amount of `currency` written in `text` ("12.5", " 12,50 ", "-3"), read by `number_parse`
    with the currency's decimals, and rounded to them ("12.5" -> 12.50).

    Raises `InvalidAmount` with one of these codes: `amount_not_a_number` (empty, letters,
    exponent, non-ASCII digits), `amount_not_finite` (NaN, Infinity), `amount_thousands_separator`,
    `amount_too_many_decimals` (more decimals written than the currency has, "1.500" included:
    in Portuguese that would mean one thousand five hundred), `amount_too_large` (more than the
    ledger stores)."""
    places = minor_unit(currency)
    try:
        value = number_parse(
            text, places=places, max_integer_digits=MAX_DIGITS - places, language=language
        )
    except InvalidNumber as invalid:
        raise InvalidAmount(invalid.message, code=f"amount_{invalid.code}") from None
    return money_round(value, currency)
