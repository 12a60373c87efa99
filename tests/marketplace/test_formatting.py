from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import translation

from marketplace import formatting

NBSP = "\u00a0"
NNBSP = "\u202f"

PINNED = {
    "en": ("1,008 GB/s", "24 GB", "from $0.33", "≈ 15B"),
    "pt": ("1.008 GB/s", "24 GB", f"a partir de US${NBSP}0,33", f"≈ 15{NBSP}mil{NBSP}M"),
    "fr": (f"1{NNBSP}008{NNBSP}Go/s", f"24{NNBSP}Go", f"dès 0,33{NBSP}$US", f"≈ 15{NBSP}Md"),
}


@pytest.mark.parametrize("language", PINNED)
def test_pinned_strings_use_cldr_spacing(language):
    bandwidth, memory, price, params = PINNED[language]
    assert formatting.bandwidth(1008, language=language) == bandwidth
    assert formatting.gigabytes(24, language=language) == memory
    assert formatting.price_from(Decimal("0.33"), language=language) == price
    assert formatting.parameters(15, language=language) == params


@pytest.mark.parametrize(
    ("language", "expected"),
    [("en", "$4.19"), ("pt", f"US${NBSP}4,19"), ("fr", f"4,19{NBSP}$US")],
)
def test_usd(language, expected):
    assert formatting.usd(Decimal("4.19"), language=language) == expected


@pytest.mark.parametrize(
    ("language", "expected"),
    [("en", "989.5\u00a0TFLOPS"), ("pt", "989,5\u00a0TFLOPS"), ("fr", "989,5\u00a0TFLOPS")],
)
def test_tflops(language, expected):
    assert formatting.tflops(Decimal("989.50"), language=language) == expected


def test_missing_figures_show_a_dash():
    assert formatting.tflops(None, language="en") == "—"
    assert formatting.parameters(0, language="fr") == "—"


def test_small_unit_prices_keep_four_decimals():
    assert formatting.money_fine(Decimal("4.19") / 141, "USD", language="en") == "$0.0297"
    assert formatting.money_fine(Decimal("0.33") / 24, "USD", language="fr") == f"0,0138{NBSP}$US"


def test_unknown_language_falls_back_to_english():
    assert formatting.bandwidth(1008, language="de") == "1,008 GB/s"


@pytest.mark.parametrize(("language", "expected"), [("en", "10%"), ("pt", "10%"), ("fr", "10\u00a0%")])
def test_percent(language, expected):
    assert formatting.percent(Decimal("10"), language=language) == expected


@pytest.mark.parametrize(
    ("language", "expected"),
    [("en", ("99.5%", "95%", "100%", "new")), ("pt", ("99,5%", "95%", "100%", "novo")),
     ("fr", (f"99,5{NBSP}%", f"95{NBSP}%", f"100{NBSP}%", "nouveau"))],
)
def test_reliability_is_a_share_as_a_percentage_and_new_without_one(language, expected):
    shown = tuple(
        formatting.reliability(value, language=language)
        for value in (Decimal("0.995"), Decimal("0.950"), Decimal("1.000"), None)
    )
    assert shown == expected


@pytest.mark.parametrize(("language", "expected"), [
    # European Portuguese spellings (CLDR pt_PT), not the Brazilian ones of CLDR pt.
    ("pt", ("Arménia", "Polónia", "Irão", "Quénia")),
    ("fr", ("Arménie", "Pologne", "Iran", "Kenya")),
    ("en", ("Armenia", "Poland", "Iran", "Kenya")),
])
def test_country_names_follow_the_language(language, expected):
    names = tuple(formatting.country_name(code, language=language) for code in ("AM", "PL", "IR", "KE"))
    assert names == expected
    assert set(expected) <= {name for _code, name in formatting.country_choices(language=language)}


@pytest.mark.parametrize(("language", "first", "second"), [
    ("fr", "1er décembre 2026", "2 décembre 2026"),
    ("pt", "1 de dezembro de 2026", "2 de dezembro de 2026"),
])
def test_french_writes_the_first_of_a_month_as_an_ordinal(language, first, second):
    assert formatting.day(date(2026, 12, 1), language=language) == first
    assert formatting.day(date(2026, 12, 2), language=language) == second
    assert formatting.day(date(2026, 12, 11), language=language).startswith("11 ")
    with translation.override(language):
        noon = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
        short = "1er déc." if language == "fr" else "1 de dez."
        assert formatting.datetime_zone(noon, zone="UTC").startswith(short)
        assert formatting.datetime_long(noon).startswith(first.split(" 2026")[0])
        assert formatting.datetime_long(noon + timedelta(days=10)).startswith("11 ")


@pytest.mark.parametrize(("value", "language", "shown"), [
    ("0.92000000", "en", "0.92"),
    ("1.23456789", "pt", "1,23456789"),
    ("1234.50000000", "fr", "1\u202f234,5"),
    ("100.00000000", "en", "100"),
    ("1300", "pt", "1.300"),
])
def test_an_exact_number_keeps_every_decimal_it_holds_and_drops_the_stored_zeros(value, language, shown):
    assert formatting.number_exact(Decimal(value), language=language) == shown
