"""What an order will cost the buyer, in their wallet's currency, before they place it."""

from dataclasses import dataclass
from decimal import Decimal

from django.contrib.auth.models import AnonymousUser

from accounts.models import User
from marketplace import formatting
from marketplace.money import money_round

from ..exceptions import RateMissing
from .fx import BASE_CURRENCY, fx_convert_from_usd
from .wallets import wallet_for_user, wallet_runway


@dataclass(frozen=True)
class CostPreview:
    currency: str
    per_hour: Decimal
    per_hour_text: str
    total: Decimal | None
    total_text: str
    balance_text: str
    covers_first_hour: bool


def order_cost_preview(
    *, user: User | AnonymousUser, price_usd: Decimal, gpus: int, hours: int | None
) -> CostPreview | None:
    """The cost of `gpus` GPUs at `price_usd` per GPU-hour, per hour and for `hours`, converted
    at the current rate into the wallet's currency (US dollars before the first top-up)."""
    wallet = wallet_for_user(user=user) if user.is_authenticated else None
    currency = wallet.currency if wallet else "USD"
    per_hour_usd = price_usd * gpus
    try:
        per_hour = fx_convert_from_usd(amount_usd=per_hour_usd, currency=currency).amount
    except RateMissing:
        return None
    total = per_hour * hours if hours else None
    balance = wallet.balance if wallet else Decimal("0")
    return CostPreview(
        currency=currency,
        per_hour=per_hour,
        per_hour_text=formatting.money(per_hour, currency),
        total=total,
        total_text=formatting.money(total, currency) if total is not None else "",
        balance_text=formatting.money(balance, currency),
        covers_first_hour=balance >= per_hour,
    )


@dataclass(frozen=True)
class SpendPreview:
    """What an order buying at once spends, as its confirmation states it: the total in US dollars
    and in the wallet's currency (for the hours asked, else for one hour), the balance left after
    its first hour, and the runway: the full hours the balance pays at this order's rate together
    with the buyer's rentals already starting or running. Amounts in the wallet's currency are None
    when that currency has no rate yet."""

    currency: str
    per_hour_usd: Decimal
    total_usd: Decimal
    per_hour: Decimal | None
    total: Decimal | None
    balance: Decimal
    balance_after_first_hour: Decimal | None
    runway_hours: int | None
    other_rentals: int

    @property
    def covers_first_hour(self) -> bool:
        return self.balance_after_first_hour is not None and self.balance_after_first_hour >= 0


def order_spend_preview(*, user: User, price_usd: Decimal, gpus: int, hours: int | None) -> SpendPreview:
    """The spend of `gpus` GPUs at `price_usd` per GPU-hour for `hours` (None: until stopped), for
    `user`'s wallet (US dollars before the first top-up). At most three queries: the wallet, the
    buyer's live rentals and the current rate."""
    wallet = wallet_for_user(user=user)
    currency = wallet.currency if wallet else BASE_CURRENCY
    balance = wallet.balance if wallet else Decimal("0")
    per_hour_usd = money_round(price_usd * gpus, BASE_CURRENCY)
    total_usd = per_hour_usd * (hours or 1)
    runway = wallet_runway(wallet=wallet) if wallet else None
    try:
        per_hour = fx_convert_from_usd(amount_usd=per_hour_usd, currency=currency).amount
    except RateMissing:
        return SpendPreview(
            currency=currency, per_hour_usd=per_hour_usd, total_usd=total_usd, per_hour=None, total=None,
            balance=balance, balance_after_first_hour=None, runway_hours=None,
            other_rentals=runway.rentals if runway else 0,
        )
    burn = per_hour + (runway.per_hour or Decimal("0") if runway else Decimal("0"))
    return SpendPreview(
        currency=currency, per_hour_usd=per_hour_usd, total_usd=total_usd, per_hour=per_hour,
        total=per_hour * (hours or 1), balance=balance, balance_after_first_hour=balance - per_hour,
        runway_hours=int(balance // burn) if burn else None, other_rentals=runway.rentals if runway else 0,
    )


def wallet_price_convert(*, user: User, price_usd: Decimal) -> tuple[Decimal, str] | None:
    """`price_usd` in the currency of `user`'s wallet at the current rate, with that currency; None
    without a wallet in another currency than US dollars or without a rate. At most two queries."""
    wallet = wallet_for_user(user=user)
    if wallet is None or wallet.currency == BASE_CURRENCY:
        return None
    try:
        return fx_convert_from_usd(amount_usd=price_usd, currency=wallet.currency).amount, wallet.currency
    except RateMissing:
        return None
