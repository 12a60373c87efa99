from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils.functional import Promise

from billing.exceptions import VatCountryInvalid
from billing.models import VatKind as ModelVatKind
from billing.vat import (
    EU_MEMBER_STATES,
    EU_STANDARD_RATES,
    EU_STANDARD_RATES_DATE,
    VatKind,
    outside_scope_mention,
    reverse_charge_mention,
    vat_amount,
    vat_treatment,
)


@pytest.fixture(autouse=True)
def portugal(settings):
    settings.PLATFORM_COUNTRY = "PT"


def test_the_table_has_the_27_member_states_with_its_date():
    assert len(EU_MEMBER_STATES) == 27
    assert EU_STANDARD_RATES_DATE.isoformat() == "2025-08-01"
    assert EU_STANDARD_RATES["FI"] == Decimal("25.5")
    assert EU_STANDARD_RATES["HU"] == Decimal("27")
    assert EU_STANDARD_RATES["LU"] == Decimal("17")
    assert EU_STANDARD_RATES["GR"] == Decimal("24")
    assert "EL" not in EU_STANDARD_RATES and "GB" not in EU_STANDARD_RATES


@pytest.mark.parametrize(
    ("country", "is_business", "has_valid_vat_id", "kind", "rate"),
    [
        ("PT", False, False, VatKind.STANDARD, "23"),  # consumer in the platform's country
        ("DE", False, False, VatKind.STANDARD, "19"),  # EU consumer: their country's rate
        ("FR", False, False, VatKind.STANDARD, "20"),
        ("FI", False, False, VatKind.STANDARD, "25.5"),
        ("DE", True, True, VatKind.REVERSE_CHARGE, "0"),  # EU business, valid VAT ID, elsewhere
        ("DE", True, False, VatKind.STANDARD, "19"),  # no valid VAT ID: like a consumer
        ("DE", False, True, VatKind.STANDARD, "19"),  # a consumer's VAT ID changes nothing
        ("PT", True, True, VatKind.STANDARD, "23"),  # business in the platform's country
        ("PT", True, False, VatKind.STANDARD, "23"),
        ("US", False, False, VatKind.OUTSIDE_SCOPE, "0"),
        ("US", True, True, VatKind.OUTSIDE_SCOPE, "0"),
        ("GB", False, False, VatKind.OUTSIDE_SCOPE, "0"),
        ("GB", True, True, VatKind.OUTSIDE_SCOPE, "0"),
        ("CH", False, False, VatKind.OUTSIDE_SCOPE, "0"),
        ("NO", True, False, VatKind.OUTSIDE_SCOPE, "0"),
        ("GR", False, False, VatKind.STANDARD, "24"),
        ("EL", True, False, VatKind.STANDARD, "24"),  # the Greek VAT prefix is read as GR
        ("de", False, False, VatKind.STANDARD, "19"),
    ],
)
def test_vat_treatment(country, is_business, has_valid_vat_id, kind, rate):
    treatment = vat_treatment(country=country, is_business=is_business, has_valid_vat_id=has_valid_vat_id)
    assert (treatment.kind, treatment.rate) == (kind, Decimal(rate))


def test_reverse_charge_and_outside_scope_carry_their_legal_mention():
    reverse = vat_treatment(country="DE", is_business=True, has_valid_vat_id=True)
    assert isinstance(reverse.mention, Promise)
    assert "Reverse charge" in str(reverse.mention)
    assert "Article 196 of Council Directive 2006/112/EC" in str(reverse.mention)
    outside = vat_treatment(country="US", is_business=False, has_valid_vat_id=False)
    assert "Outside the scope of EU VAT" in str(outside.mention)
    assert vat_treatment(country="DE", is_business=False, has_valid_vat_id=False).mention == ""


def test_the_platform_country_is_a_setting(settings):
    settings.PLATFORM_COUNTRY = "DE"
    german_business = vat_treatment(country="DE", is_business=True, has_valid_vat_id=True)
    assert (german_business.kind, german_business.rate) == (VatKind.STANDARD, Decimal("19"))
    portuguese_business = vat_treatment(country="PT", is_business=True, has_valid_vat_id=True)
    assert (portuguese_business.kind, portuguese_business.rate) == (VatKind.REVERSE_CHARGE, Decimal("0"))


def test_the_platform_country_defaults_to_portugal(settings):
    del settings.PLATFORM_COUNTRY
    treatment = vat_treatment(country="PT", is_business=True, has_valid_vat_id=True)
    assert treatment.kind == VatKind.STANDARD


def test_a_platform_outside_the_eu_is_a_configuration_error(settings):
    settings.PLATFORM_COUNTRY = "US"
    with pytest.raises(ImproperlyConfigured):
        vat_treatment(country="DE", is_business=True, has_valid_vat_id=True)


@pytest.mark.parametrize("country", ["", "  ", "P", "PRT", "12", None])
def test_a_missing_or_malformed_country_is_refused(country):
    with pytest.raises(VatCountryInvalid) as refused:
        vat_treatment(country=country, is_business=False, has_valid_vat_id=False)
    assert refused.value.code == "vat_country_invalid"


@pytest.mark.parametrize(
    ("net", "rate", "expected"),
    [
        ("50.00", "23", "11.50"),
        ("12.34", "19", "2.34"),  # 2.3446
        ("0.10", "25", "0.03"),  # 0.025: half-up, once
        ("1.00", "25.5", "0.26"),  # 0.255
        ("10.05", "25.5", "2.56"),  # 2.56275
        ("100.00", "0", "0.00"),
    ],
)
def test_vat_amount_is_rounded_once_half_up(net, rate, expected):
    amount = vat_amount(net=Decimal(net), rate=Decimal(rate), currency="EUR")
    assert amount == Decimal(expected)
    assert str(amount) == expected


def test_vat_amount_refuses_floats():
    with pytest.raises(TypeError):
        vat_amount(net=50.0, rate=Decimal("23"), currency="EUR")


def test_the_mentions_are_also_callables_for_invoices():
    assert ModelVatKind is VatKind
    assert "Article 196" in str(reverse_charge_mention())
    assert "Outside the scope of EU VAT" in str(outside_scope_mention())
