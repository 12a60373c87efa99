"""VAT on top-ups: the EU standard rates and the rule that picks the treatment of a buyer.

EverXCloud is merchant of record and sells electronically supplied services, taxed where the
buyer is: an EU consumer pays their own country's standard rate; an EU business with a valid
VAT ID in another member state accounts for the VAT itself (reverse charge); a business in the
platform's own country pays the platform's rate; outside the EU there is no EU VAT. "Valid" means
confirmed by VIES lately (`accounts.vies.vat_id_confirmed`); while VIES has not confirmed a number,
VAT is charged and refunded once it does (`billing.services.vat_refunds`).

The table below is the one place the rates live. Update it, and its date, when a member state
changes its standard rate.
"""

import re
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from marketplace.money import money_round

from .exceptions import VatCountryInvalid
from .models import VatKind

# Standard rates in percent, by ISO 3166 country code, as in force on this date.
EU_STANDARD_RATES_DATE = date(2025, 8, 1)
EU_STANDARD_RATES: dict[str, Decimal] = {
    "AT": Decimal("20"),
    "BE": Decimal("21"),
    "BG": Decimal("20"),
    "HR": Decimal("25"),
    "CY": Decimal("19"),
    "CZ": Decimal("21"),
    "DK": Decimal("25"),
    "EE": Decimal("24"),
    "FI": Decimal("25.5"),
    "FR": Decimal("20"),
    "DE": Decimal("19"),
    "GR": Decimal("24"),  # VAT numbers of Greece start with EL, its ISO code is GR.
    "HU": Decimal("27"),
    "IE": Decimal("23"),
    "IT": Decimal("22"),
    "LV": Decimal("21"),
    "LT": Decimal("21"),
    "LU": Decimal("17"),
    "MT": Decimal("18"),
    "NL": Decimal("21"),
    "PL": Decimal("23"),
    "PT": Decimal("23"),
    "RO": Decimal("21"),
    "SK": Decimal("23"),
    "SI": Decimal("22"),
    "ES": Decimal("21"),
    "SE": Decimal("25"),
}
EU_MEMBER_STATES = frozenset(EU_STANDARD_RATES)

# VAT-number prefixes that differ from the ISO country code.
VAT_PREFIX_TO_COUNTRY = {"EL": "GR"}

_COUNTRY_CODE = re.compile(r"[A-Z]{2}")


@dataclass(frozen=True)
class VatTreatment:
    kind: str
    rate: Decimal  # percent: Decimal("23") is 23 %
    mention: Promise | str  # the legal sentence printed on the invoice; "" when none is needed
    country: str  # the country whose rate applies (the buyer's, or the platform's)


REVERSE_CHARGE_MENTION = _(
    "Reverse charge: VAT to be accounted for by the recipient, "
    "Article 196 of Council Directive 2006/112/EC."
)
OUTSIDE_SCOPE_MENTION = _("Outside the scope of EU VAT: no VAT charged.")
VAT_ID_UNCONFIRMED_REASON = _(
    "We could not confirm your VAT number %(vat_id)s with the EU's VIES service yet, so VAT is added. "
    "As soon as VIES confirms it, we refund this VAT to your balance with a credit note."
)
VAT_REFUND_MENTION = _(
    "VIES has confirmed the VAT number %(vat_id)s: the VAT charged on the invoice corrected is credited "
    "to the buyer's balance."
)


def reverse_charge_mention() -> Promise:
    """The invoice sentence of a reverse-charge supply, in the active language."""
    return REVERSE_CHARGE_MENTION


def outside_scope_mention() -> Promise:
    """The invoice sentence of a supply outside the scope of EU VAT, in the active language."""
    return OUTSIDE_SCOPE_MENTION


def vat_mention(kind: str) -> str:
    """The legal sentence an invoice or quote of this VAT treatment carries; "" for none."""
    mentions = {VatKind.REVERSE_CHARGE: REVERSE_CHARGE_MENTION, VatKind.OUTSIDE_SCOPE: OUTSIDE_SCOPE_MENTION}
    return str(mentions.get(kind, ""))


def vat_id_unconfirmed_reason(vat_id: str) -> str:
    """Why a business of another member state pays VAT: VIES has not confirmed its number yet."""
    return VAT_ID_UNCONFIRMED_REASON % {"vat_id": vat_id}


def vat_refund_mention(vat_id: str) -> str:
    """What a credit note of a VAT refund says, in the active language: the number VIES confirmed,
    and the reverse-charge sentence that now applies."""
    return f"{VAT_REFUND_MENTION % {'vat_id': vat_id}} {REVERSE_CHARGE_MENTION}"


def document_vat_mention(document) -> str:
    """The VAT sentence of an invoice or a credit note; a credit note of a VAT refund says which
    number VIES confirmed, and that the reverse charge applies."""
    vat_refund = getattr(document, "vat_refund", None)
    if vat_refund is not None:
        return vat_refund_mention(vat_refund.vat_id)
    return vat_mention(document.vat_kind)


def platform_country() -> str:
    """The member state the platform is established in (setting PLATFORM_COUNTRY, default PT)."""
    country = str(getattr(settings, "PLATFORM_COUNTRY", "PT")).upper()
    if country not in EU_MEMBER_STATES:
        raise ImproperlyConfigured(f"PLATFORM_COUNTRY must be an EU member state, not {country!r}.")
    return country


def vat_country_normalise(country: str) -> str:
    """"pt " -> "PT", "EL" -> "GR"; `VatCountryInvalid` for anything but two letters."""
    code = (country or "").strip().upper()
    if not _COUNTRY_CODE.fullmatch(code):
        raise VatCountryInvalid(country=country)
    return VAT_PREFIX_TO_COUNTRY.get(code, code)


def vat_treatment(*, country: str, is_business: bool, has_valid_vat_id: bool) -> VatTreatment:
    """How VAT applies to a buyer billed in `country` (ISO code; EL is read as GR)."""
    country = vat_country_normalise(country)
    if country not in EU_MEMBER_STATES:
        return VatTreatment(
            kind=VatKind.OUTSIDE_SCOPE, rate=Decimal(0), mention=OUTSIDE_SCOPE_MENTION, country=country
        )
    home = platform_country()
    if is_business and has_valid_vat_id and country != home:
        return VatTreatment(
            kind=VatKind.REVERSE_CHARGE, rate=Decimal(0), mention=REVERSE_CHARGE_MENTION, country=country
        )
    # Consumers, businesses without a valid VAT ID, and businesses in the platform's country
    # (the platform's rate, which is their own) pay the standard rate of their country.
    return VatTreatment(kind=VatKind.STANDARD, rate=EU_STANDARD_RATES[country], mention="", country=country)


def vat_amount(*, net: Decimal, rate: Decimal, currency: str) -> Decimal:
    """The VAT on `net` at `rate` percent, rounded once, half-up, to the currency's minor unit."""
    if not isinstance(net, Decimal) or not isinstance(rate, Decimal):
        raise TypeError("VAT is computed on Decimal amounts and rates, never float.")
    return money_round(net * rate / Decimal(100), currency)


def vat_split_gross(*, gross: Decimal, rate: Decimal, currency: str) -> tuple[Decimal, Decimal]:
    """A sum received with its VAT included, split into (net, VAT) at `rate` percent: the net is
    rounded once, half-up, to the currency's minor unit, and the VAT is what remains, so that the
    two add up to `gross` to the cent. 123.00 at 23 % -> (100.00, 23.00); 100.00 -> (81.30, 18.70)."""
    if not isinstance(gross, Decimal) or not isinstance(rate, Decimal):
        raise TypeError("VAT is computed on Decimal amounts and rates, never float.")
    net = money_round(gross * Decimal(100) / (Decimal(100) + rate), currency)
    return net, gross - net
