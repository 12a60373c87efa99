"""VAT identification numbers: format and checksum per country (python-stdnum).

The patterns below are for error messages only: 9 stands for a digit, X for a letter or
a digit. The checks themselves are python-stdnum's.
"""

from dataclasses import dataclass

import stdnum
from stdnum.eu import vat as eu_vat
from stdnum.exceptions import ValidationError as StdnumError
from stdnum.gb import vat as gb_vat

EU_MEMBER_STATES = frozenset({
    "AT", "BE", "BG", "HR", "CY", "CZ", "DK", "EE", "FI", "FR", "DE", "GR", "HU", "IE", "IT",
    "LV", "LT", "LU", "MT", "NL", "PL", "PT", "RO", "SK", "SI", "ES", "SE",
})

# ISO 3166 country -> the prefix its VAT numbers carry (Greece writes EL).
VAT_PREFIXES = {country: country for country in EU_MEMBER_STATES} | {"GR": "EL", "GB": "GB"}

VAT_PATTERNS = {
    "AT": "ATU99999999", "BE": "BE9999999999", "BG": "BG999999999 / BG9999999999",
    "HR": "HR99999999999", "CY": "CY99999999X", "CZ": "CZ99999999 / CZ9999999999",
    "DK": "DK99999999", "EE": "EE999999999", "FI": "FI99999999", "FR": "FRXX999999999",
    "DE": "DE999999999", "GR": "EL999999999", "HU": "HU99999999", "IE": "IE9999999X / IE9999999XX",
    "IT": "IT99999999999", "LV": "LV99999999999", "LT": "LT999999999 / LT999999999999",
    "LU": "LU99999999", "MT": "MT99999999", "NL": "NL999999999B99", "PL": "PL9999999999",
    "PT": "PT999999999", "RO": "RO99 … RO9999999999", "SK": "SK9999999999", "SI": "SI99999999",
    "ES": "ESX9999999X", "SE": "SE999999999999", "GB": "GB999999999",
}


@dataclass(frozen=True)
class VatIdCheck:
    number: str  # normalised, with its country prefix
    in_eu: bool


class VatIdInvalid(ValueError):
    def __init__(self, *, country: str, wrong_country: bool = False):
        super().__init__(country)
        self.country = country
        self.wrong_country = wrong_country
        self.pattern = VAT_PATTERNS.get(country, "")


def _compact(number: str) -> str:
    return "".join(ch for ch in number.upper() if ch.isalnum())


def vat_id_validate(*, country: str, number: str) -> VatIdCheck:
    """Check `number` as a VAT ID of `country`; return it normalised, or raise VatIdInvalid."""
    country = country.upper()
    compact = _compact(number)
    prefix = VAT_PREFIXES.get(country)
    if prefix is None:
        module = stdnum.get_cc_module(country.lower(), "vat")
        if module is None:
            return VatIdCheck(number=compact, in_eu=False)
        try:
            return VatIdCheck(number=module.compact(module.validate(compact)), in_eu=False)
        except StdnumError as error:
            raise VatIdInvalid(country=country) from error
    if compact[:2].isalpha() and compact[:2] != prefix:
        raise VatIdInvalid(country=country, wrong_country=True)
    if not compact.startswith(prefix):
        compact = prefix + compact
    try:
        if country == "GB":
            gb_vat.validate(compact)
        else:
            eu_vat.validate(compact)
    except StdnumError as error:
        raise VatIdInvalid(country=country) from error
    return VatIdCheck(number=compact, in_eu=country in EU_MEMBER_STATES)
