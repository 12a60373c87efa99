"""The current exchange rates and conversions from US dollars at them.

Prices are in USD; wallets are in EUR, USD or GBP. A rate says how many units of a currency one US
dollar buys from `valid_from` on; the current rate is the newest one already valid. A conversion
is rounded once, half-up, to the target currency's minor unit, and returns the rate row it used so
that the ledger transaction can keep it. Operators' rates are written by `billing.services.fx`.
"""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.utils import timezone

from marketplace.money import CURRENCIES, money_round

from ..exceptions import RateMissing
from ..models import ExchangeRate

BASE_CURRENCY = "USD"


@dataclass(frozen=True)
class Conversion:
    amount: Decimal
    rate: Decimal
    rate_id: int | None


def fx_rate_current(*, currency: str, at: datetime | None = None) -> ExchangeRate | None:
    """The newest rate of `currency` valid at `at` (now by default), or None. None for USD too:
    USD -> USD is 1 without a row."""
    if currency == BASE_CURRENCY:
        return None
    return (
        ExchangeRate.objects.filter(currency=currency, valid_from__lte=at or timezone.now())
        .order_by("-valid_from", "-id")
        .first()
    )


def fx_rates_current(*, currencies) -> dict[str, ExchangeRate]:
    """The current rate of each of `currencies` that has one (USD needs none), for many
    conversions at once (`fx_convert_from_usd(rates=...)`)."""
    rates = {}
    for currency in sorted(set(currencies) - {BASE_CURRENCY}):
        rate = fx_rate_current(currency=currency)
        if rate is not None:
            rates[currency] = rate
    return rates


def fx_convert_from_usd(
    *, amount_usd: Decimal, currency: str, rates: dict[str, ExchangeRate] | None = None
) -> Conversion:
    """`amount_usd` in `currency` at the current rate, rounded half-up to the minor unit. A caller
    converting many amounts passes the current `rates` it read once (`fx_rates_current`).

    Raises `RateMissing` when the currency has no valid rate yet.
    """
    if isinstance(amount_usd, float) or not isinstance(amount_usd, Decimal):
        raise TypeError("Convert Decimal amounts, never float.")
    if currency not in CURRENCIES:
        raise ValueError(f"Unknown currency {currency!r}.")
    if currency == BASE_CURRENCY:
        return Conversion(amount=money_round(amount_usd, currency), rate=Decimal(1), rate_id=None)
    rate = fx_rate_current(currency=currency) if rates is None else rates.get(currency)
    if rate is None:
        raise RateMissing(currency=currency)
    return Conversion(amount=money_round(amount_usd * rate.rate, currency), rate=rate.rate, rate_id=rate.pk)
