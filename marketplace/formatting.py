"""The one place where numbers, money and units become text, by CLDR rules (Babel).

Every template and email formats through these functions (or the `fmt` template filters that
wrap them), so that French reads `1 008 Go/s` and `0,33 $US`, Portuguese `1.008 GB/s` and
`US$ 0,33`, and English `1,008 GB/s` and `$0.33`, each with CLDR's own spacing characters.

Which CLDR locale each kind of text uses, and why:
- Numbers, money, units and dates on Portuguese pages: Babel's `pt`. The reference pages the site
  grew from are written in these formats (`1.008 GB/s`, `US$ 0,33`, `1 de dezembro de 2026`), and
  `pt` and `pt_PT` share the lower-case month names; only billions differ (`BILLIONS_PATTERNS`).
- Country names on Portuguese pages: `pt_PT` (`TERRITORY_LOCALES`), because our Portuguese is
  European and `pt` spells them the Brazilian way (Polônia, Irã where Portugal writes Polónia, Irão).
- French follows `fr` and English `en` for everything.
"""

import functools
import re
import unicodedata
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from zoneinfo import ZoneInfo

from babel import Locale
from babel.dates import format_date, format_time
from babel.numbers import format_compact_decimal, format_currency, format_decimal, format_percent
from babel.units import format_unit
from django.utils import formats, timezone, translation
from django.utils.translation import pgettext

# Django language code -> Babel (CLDR) locale.
BABEL_LOCALES = {"en": "en", "pt": "pt", "fr": "fr"}

# Our Portuguese is European: billions are "mil milhões", abbreviated "mil M" with CLDR's
# no-break spaces, where Babel's `pt` data (Brazilian) would write "bi".
BILLIONS_PATTERNS = {"pt": "{number}\u00a0mil\u00a0M"}

# Country names follow European Portuguese (CLDR `pt_PT`); the other languages keep BABEL_LOCALES.
TERRITORY_LOCALES = {"pt": "pt_PT"}

NO_FIGURE = "—"


def babel_locale(language: str | None = None) -> str:
    language = (language or translation.get_language() or "en").split("-")[0]
    return BABEL_LOCALES.get(language, "en")


# Pages format the same prices and figures over and over (a price level, a GPU's memory), and each
# Babel call costs tens of microseconds: the answers are kept, by value, type and locale.
@functools.lru_cache(maxsize=8192, typed=True)
def _decimal(value, locale: str) -> str:
    return format_decimal(value, locale=locale)


@functools.lru_cache(maxsize=8192, typed=True)
def _currency(amount, currency: str, locale: str) -> str:
    return format_currency(amount, currency, locale=locale)


def number(value: int | Decimal, *, language: str | None = None) -> str:
    try:
        return _decimal(value, babel_locale(language))
    except TypeError:  # unhashable (a signalling NaN): format it afresh
        return format_decimal(value, locale=babel_locale(language))


def number_exact(value: int | Decimal, *, language: str | None = None) -> str:
    """A number with every decimal it holds but without the stored trailing zeros (an exchange rate
    of 0.92000000 -> `0.92`, 1.23456789 -> `1.23456789`), where number() keeps three."""
    exact = Decimal(value).normalize()
    if exact == exact.to_integral_value():
        exact = exact.quantize(Decimal(1))  # 1E+2 -> 100
    return format_decimal(exact, locale=babel_locale(language), decimal_quantization=False)


def number_input(value: int | Decimal, *, places: int, language: str | None = None) -> str:
    """A number as a form field shows it for editing: `places` decimals, the language's decimal
    separator and no grouping, so that it reads back as typed (`0.79`, `0,79`; `1234,50`)."""
    pattern = "0." + "0" * places if places else "0"
    return format_decimal(Decimal(value), format=pattern, locale=babel_locale(language))


def percent(value: Decimal, *, language: str | None = None) -> str:
    """A percentage given in percent (10 -> `10%`, `10 %` in French), as CLDR writes it."""
    return format_percent(Decimal(value) / 100, locale=babel_locale(language), decimal_quantization=False)


def share(value: Decimal, *, language: str | None = None) -> str:
    """A share from 0 to 1 as a percentage with the decimals it has (0.995 -> `99.5%`, 0.950 ->
    `95%`; `99,5 %` in French, `99,5%` in Portuguese), as CLDR writes it."""
    # normalize() drops the stored zeros (0.950 -> 0.95), so that 95 % does not read 95.0 %.
    return format_percent(
        Decimal(value).normalize(), locale=babel_locale(language), decimal_quantization=False
    )


def reliability(value: Decimal | None, *, language: str | None = None) -> str:
    """A server's or seller's reliability: its share as a percentage, "new" while it has none."""
    if value is None:
        with translation.override(language or translation.get_language()):
            return pgettext("reliability without a score yet", "new")
    return share(value, language=language)


def money(amount: Decimal, currency: str, *, language: str | None = None) -> str:
    """An amount in a currency with the currency's usual decimals: `$0.33`, `0,33 $US`."""
    try:
        return _currency(amount, currency, babel_locale(language))
    except TypeError:  # unhashable (a signalling NaN): format it afresh
        return format_currency(amount, currency, locale=babel_locale(language))


def money_signed(amount: Decimal, currency: str, *, language: str | None = None) -> str:
    """An amount with its sign, as a ledger entry reads: `+$5.00`, `-$5.00`; `+5,00 £GB`. CLDR
    writes the minus; the plus is the same sign put before the amount for a credit."""
    text = money(amount, currency, language=language)
    return f"+{text}" if amount > 0 else text


def money_fine(
    amount: Decimal, currency: str, *, places: int = 4, language: str | None = None
) -> str:
    """Small unit prices (per GB of memory) that need more decimals than the currency has."""
    quantum = Decimal(1).scaleb(-places)
    value = Decimal(amount).quantize(quantum, rounding=ROUND_HALF_UP)
    return format_currency(
        value, currency, locale=babel_locale(language), decimal_quantization=False
    )


def usd(amount: Decimal, *, language: str | None = None) -> str:
    return money(amount, "USD", language=language)


def price_from(amount_usd: Decimal, *, language: str | None = None) -> str:
    """`from $0.33`, `a partir de US$ 0,33`, `dès 0,33 $US`."""
    with translation.override(language or translation.get_language()):
        return pgettext("lowest price", "from %(price)s") % {
            "price": usd(amount_usd, language=language)
        }


def gigabytes(value: int | Decimal, *, language: str | None = None) -> str:
    """`24 GB`, `24 Go`."""
    return format_unit(value, "digital-gigabyte", length="short", locale=babel_locale(language))


def bandwidth(value: int | Decimal, *, language: str | None = None) -> str:
    """`1,008 GB/s`, `1 008 Go/s`: CLDR's short gigabyte with the per-second suffix, which is
    `/s` in all three languages (Babel has no per-second compound for digital units)."""
    return f"{gigabytes(value, language=language)}/s"


def tflops(value: Decimal | None, *, language: str | None = None) -> str:
    if value is None:
        return NO_FIGURE
    return f"{number(value.normalize(), language=language)}\u00a0TFLOPS"


def billions(count: int, *, language: str | None = None) -> str:
    """A count of billions, compact: `15B`, `15 Md`, `15 mil M`."""
    locale = babel_locale(language)
    pattern = BILLIONS_PATTERNS.get(locale)
    if pattern:
        return pattern.format(number=number(count, language=language))
    return format_compact_decimal(count * 10**9, format_type="short", locale=locale)


def parameters(count_billions: int, *, language: str | None = None) -> str:
    """An approximate model size in parameters: `≈ 15B`, `≈ 15 Md`, `≈ 15 mil M`."""
    if count_billions <= 0:
        return NO_FIGURE
    return f"≈ {billions(count_billions, language=language)}"


def _territories(language: str | None):
    locale = babel_locale(language)
    return Locale.parse(TERRITORY_LOCALES.get(locale, locale)).territories


def country_name(code: str, *, language: str | None = None) -> str:
    return _territories(language).get(code.upper(), code.upper())


def country_choices(*, language: str | None = None) -> list[tuple[str, str]]:
    """Every country (ISO 3166 alpha-2) named in the active language, in alphabetical order."""
    territories = _territories(language)
    # Skip CLDR's groupings and placeholders: numeric regions, the EU, the UN, unknown.
    skipped = {"EU", "EZ", "UN", "ZZ", "QO", "XA", "XB", "XK"}
    countries = [
        (code, name) for code, name in territories.items()
        if len(code) == 2 and code.isalpha() and code not in skipped
    ]

    def sort_key(item):
        return unicodedata.normalize("NFKD", item[1]).encode("ascii", "ignore").decode().casefold()

    return sorted(countries, key=sort_key)


def moment(value: datetime) -> str:
    """An aware date and time in the current time zone (the one a middleware activates for the
    user, else the site's), in the active language's DATETIME_FORMAT, with the zone's abbreviation:
    `3 de dezembro de 2026 às 22:20 UTC`."""
    local = timezone.localtime(value)
    text = formats.date_format(local, "DATETIME_FORMAT")
    return f"{_first_of_month(text, local, babel_locale())} {local.tzname()}"


def datetime_long(value: datetime) -> str:
    """A date and time in the active language's DATETIME_FORMAT, in the zone `value` is in (no
    conversion, as Django's `date_format`): `3 décembre 2026 14:05`, `1er décembre 2026 09:00`."""
    return _first_of_month(formats.date_format(value, "DATETIME_FORMAT"), value, babel_locale())


_LEADING_ONE = re.compile(r"^(?:le\s)?1(?=[\s\u00a0\u202f])")


def _first_of_month(text: str, value, locale: str) -> str:
    """French writes the first of a month as an ordinal, `1er décembre 2026`, and every other
    day as a plain number; CLDR's patterns have no ordinal, so it is added here."""
    if locale != "fr" or value.day != 1:
        return text
    return _LEADING_ONE.sub(lambda found: found.group(0) + "er", text, count=1)


# --- dates and times -------------------------------------------------------------------------------


def _local(value, zone):
    """`value` (an aware datetime) in `zone` (a tzinfo or an IANA name), else the active zone."""
    if isinstance(zone, str):
        zone = ZoneInfo(zone)
    return timezone.localtime(value, zone or timezone.get_current_timezone())


def day(value, *, language: str | None = None, zone=None) -> str:
    """A day written out in the language (CLDR's long date): `3 December 2026`, `3 de dezembro de
    2026`, `3 décembre 2026`. A datetime is first taken to the zone (the active one by default)."""
    if isinstance(value, datetime):
        value = _local(value, zone).date()
    locale = babel_locale(language)
    return _first_of_month(format_date(value, "long", locale=locale), value, locale)


def datetime_zone(value, *, language: str | None = None, zone=None) -> str:
    """A moment in the reader's zone (the active one by default) with the zone's abbreviation:
    `3 Dec 2026, 14:05 WET`, `3 déc. 2026, 15:05 CET`. An empty value gives the no-figure dash."""
    if value is None:
        return NO_FIGURE
    local = _local(value, zone)
    locale = babel_locale(language)
    when = format_time(local, "HH:mm", locale=locale)
    date_text = _first_of_month(format_date(local, "medium", locale=locale), local, locale)
    return f"{date_text}, {when} {local.tzname()}"
