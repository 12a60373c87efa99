import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone

from billing.exceptions import RateMissing
from billing.models import ExchangeRate
from billing.selectors import fx_convert_from_usd, fx_rate_current
from billing.services import fx_rates_load, fx_rates_read
from demo.seed import DEMO_RATES_PATH
from tests.factories import ExchangeRateFactory

pytestmark = pytest.mark.django_db

NOV_1 = datetime(2026, 11, 1, tzinfo=UTC)


def test_no_rate_means_rate_missing():
    assert fx_rate_current(currency="EUR") is None
    with pytest.raises(RateMissing) as refused:
        fx_convert_from_usd(amount_usd=Decimal("2.88"), currency="EUR")
    assert refused.value.code == "fx_rate_missing"
    assert "EUR" in str(refused.value.message)


def test_usd_to_usd_is_one_without_a_row():
    conversion = fx_convert_from_usd(amount_usd=Decimal("2.88"), currency="USD")
    assert (conversion.amount, conversion.rate, conversion.rate_id) == (Decimal("2.88"), Decimal(1), None)
    assert ExchangeRate.objects.count() == 0


def test_conversion_is_exact_and_keeps_the_rate_it_used():
    rate = ExchangeRateFactory(currency="EUR", rate=Decimal("0.92"), valid_from=NOV_1)
    conversion = fx_convert_from_usd(amount_usd=Decimal("2.88"), currency="EUR")
    # 2.88 x 0.92 = 2.6496 -> 2.65
    assert (conversion.amount, conversion.rate, conversion.rate_id) == (
        Decimal("2.65"), Decimal("0.92000000"), rate.pk
    )
    assert str(conversion.amount) == "2.65"


@pytest.mark.parametrize(
    ("amount_usd", "rate", "expected"),
    [
        ("1.25", "0.5", "0.63"),  # 0.625: half-up (banker's rounding would give 0.62)
        ("0.01", "0.5", "0.01"),  # 0.005 -> 0.01
        ("2.50", "0.79", "1.98"),  # 1.975
        ("3.00", "0.79", "2.37"),
        ("1.11", "0.92", "1.02"),  # 1.0212
        ("100.00", "0.91234567", "91.23"),  # 91.234567
        ("0.00", "0.92", "0.00"),
    ],
)
def test_conversion_rounds_half_up_once(amount_usd, rate, expected):
    ExchangeRateFactory(currency="GBP", rate=Decimal(rate), valid_from=NOV_1)
    assert fx_convert_from_usd(amount_usd=Decimal(amount_usd), currency="GBP").amount == Decimal(expected)


def test_the_current_rate_is_the_newest_already_valid():
    now = timezone.now()
    ExchangeRateFactory(currency="EUR", rate=Decimal("0.90"), valid_from=now - timedelta(days=2))
    current = ExchangeRateFactory(currency="EUR", rate=Decimal("0.91"), valid_from=now - timedelta(days=1))
    ExchangeRateFactory(currency="EUR", rate=Decimal("0.99"), valid_from=now + timedelta(days=1))
    ExchangeRateFactory(currency="GBP", rate=Decimal("0.80"), valid_from=now)
    assert fx_rate_current(currency="EUR") == current
    assert fx_rate_current(currency="EUR", at=now - timedelta(days=1, hours=12)).rate == Decimal("0.90")


def test_a_correction_for_the_same_moment_wins():
    fx_rates_load(rates={"EUR": Decimal("0.92")}, valid_from=NOV_1, source="first")
    fx_rates_load(rates={"EUR": Decimal("0.93")}, valid_from=NOV_1, source="correction")
    assert fx_rate_current(currency="EUR").rate == Decimal("0.93")


def test_float_amounts_are_refused():
    with pytest.raises(TypeError):
        fx_convert_from_usd(amount_usd=2.88, currency="USD")


def test_loading_the_same_rates_twice_adds_them_once():
    rates = {"EUR": Decimal("0.92"), "GBP": Decimal("0.79"), "USD": Decimal("1")}
    assert fx_rates_load(rates=rates, valid_from=NOV_1, source="file") == 2
    assert fx_rates_load(rates=rates, valid_from=NOV_1, source="file") == 0
    assert sorted(ExchangeRate.objects.values_list("currency", "rate", "valid_from")) == [
        ("EUR", Decimal("0.92000000"), NOV_1),
        ("GBP", Decimal("0.79000000"), NOV_1),
    ]


@pytest.mark.parametrize(
    "rates",
    [{"EUR": Decimal("0")}, {"EUR": Decimal("-1")}, {"EUR": Decimal("0.123456789")}, {"JPY": Decimal("150")},
     {"USD": Decimal("1.1")}, {"EUR": 0.92}, {"EUR": "NaN"}],
)
def test_bad_rates_are_refused_and_nothing_is_loaded(rates):
    with pytest.raises((ValueError, TypeError)):
        fx_rates_load(rates={"GBP": Decimal("0.79"), **rates}, valid_from=NOV_1, source="bad")
    assert ExchangeRate.objects.count() == 0


def test_naive_valid_from_is_refused():
    with pytest.raises(ValueError):
        fx_rates_load(rates={"EUR": Decimal("0.92")}, valid_from=datetime(2026, 11, 1), source="x")  # noqa: DTZ001


def test_the_demo_file_reads_as_decimals():
    rates = fx_rates_read(path=DEMO_RATES_PATH)
    assert rates.valid_from == NOV_1
    assert rates.source == "demo rates"
    assert rates.rates == {"EUR": Decimal("0.92"), "GBP": Decimal("0.79")}


def test_load_fx_rates_command_twice_gives_the_same_rows(capsys):
    # The test settings, like the embedded ones, default to the demo rates file.
    call_command("load_fx_rates")
    fields = ("id", "currency", "rate", "valid_from", "source")
    first = list(ExchangeRate.objects.order_by("id").values_list(*fields))
    call_command("load_fx_rates")
    assert list(ExchangeRate.objects.order_by("id").values_list(*fields)) == first
    assert [row[1:4] for row in first] == [
        ("EUR", Decimal("0.92000000"), NOV_1),
        ("GBP", Decimal("0.79000000"), NOV_1),
    ]
    output = capsys.readouterr().out
    assert "2 added, 0 already present" in output
    assert "0 added, 2 already present" in output


def test_load_fx_rates_reads_another_file(tmp_path):
    path = tmp_path / "rates.json"
    path.write_text(json.dumps({
        "base": "USD", "valid_from": "2026-12-01T00:00:00+00:00", "source": "ECB", "rates": {"EUR": 0.9312},
    }))
    call_command("load_fx_rates", str(path))
    rate = ExchangeRate.objects.get()
    assert (rate.currency, rate.rate, rate.source) == ("EUR", Decimal("0.93120000"), "ECB")


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        json.dumps({"base": "EUR", "valid_from": "2026-12-01T00:00:00Z", "rates": {"USD": "1.08"}}),
        json.dumps({"base": "USD", "valid_from": "2026-12-01T00:00:00", "rates": {"EUR": "0.92"}}),
        json.dumps({"base": "USD", "valid_from": "2026-12-01T00:00:00Z", "rates": {"EUR": "-0.92"}}),
        json.dumps({"base": "USD", "rates": {"EUR": "0.92"}}),
    ],
)
def test_load_fx_rates_refuses_bad_files(tmp_path, content):
    path = tmp_path / "rates.json"
    path.write_text(content)
    with pytest.raises(CommandError):
        call_command("load_fx_rates", str(path))
    assert ExchangeRate.objects.count() == 0


@override_settings(FX_RATES_DEFAULT_FILE=None)
def test_load_fx_rates_needs_a_file_where_there_is_no_default():
    # As in production: no demo rates loaded behind an operator's back.
    with pytest.raises(CommandError, match=r"Give the rates file to load: manage.py load_fx_rates <file>\."):
        call_command("load_fx_rates")
    assert ExchangeRate.objects.count() == 0


def test_load_fx_rates_refuses_a_missing_file(tmp_path):
    with pytest.raises(CommandError):
        call_command("load_fx_rates", str(tmp_path / "nope.json"))
