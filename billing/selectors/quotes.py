"""What an order will cost the buyer, in their wallet's currency, before they place it."""

from dataclasses import dataclass
from decimal import Decimal

from django.contrib.auth.models import AnonymousUser

from accounts.models import User
from marketplace import formatting

from ..exceptions import RateMissing
from .fx import fx_convert_from_usd
from .wallets import wallet_for_user


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
