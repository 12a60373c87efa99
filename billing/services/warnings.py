"""Low-balance warnings: one email when a wallet's balance covers fewer hours of its owner's running
rentals, at their current burn rate, than the owner's threshold (`Profile.low_balance_warning_hours`;
settings.LOW_BALANCE_WARNING_HOURS for a wallet whose owner has no profile).

The wallet remembers the warning (`Wallet.low_balance_warned_at`), so the check that runs every few
minutes sends one email, not one per run. A later check that finds the balance covering the
threshold again (a top-up, a rental that ended) clears the mark, and the next fall warns anew.
Marking is a conditional update (`... WHERE low_balance_warned_at IS NULL`): two checks running at
once send one email between them. The mark and the email (an outbox row keyed by the wallet and the
mark's time) are written in one transaction: a warning marked is a warning sent, however long the
mail server or the broker is away.
"""

from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from accounts.models import Profile, Wallet
from exchange.models import Rental, RentalState
from marketplace import formatting
from marketplace.emails import absolute_url, email_send

from ..selectors.fx import BASE_CURRENCY
from ..selectors.wallets import Runway, wallets_runway

BURNING = (RentalState.STARTING, RentalState.RUNNING)


def low_balance_warnings_send(*, now: datetime | None = None) -> int:
    """Warn every buyer whose balance has fallen below the threshold since their last warning, and
    clear the mark of wallets that cover it again. Returns how many warnings were written to the
    outbox (each with its mark). A constant number of queries to find them, whatever the number of
    wallets; one update per wallet whose mark changes. Wallets whose currency has no rate are left
    as they are."""
    now = now or timezone.now()
    wallets = list(
        Wallet.objects.filter(
            Q(user_id__in=Rental.objects.filter(state__in=BURNING).values("buyer_id"))
            | Q(low_balance_warned_at__isnull=False)
        ).select_related("user__profile").order_by("pk")
    )
    runways = wallets_runway(wallets=wallets)
    warned = 0
    for wallet in wallets:
        runway = runways.get(wallet.pk)
        if runway is not None and runway.hours is None:
            continue  # no exchange rate for the wallet's currency: nothing can be said
        low = runway is not None and runway.hours < _threshold(wallet)
        if low and wallet.low_balance_warned_at is None:
            with transaction.atomic():
                marked = Wallet.objects.filter(pk=wallet.pk, low_balance_warned_at__isnull=True).update(
                    low_balance_warned_at=now
                )
                if marked:
                    _warning_email(wallet=wallet, runway=runway, marked_at=now)
            warned += marked
        elif not low and wallet.low_balance_warned_at is not None:
            Wallet.objects.filter(pk=wallet.pk, low_balance_warned_at__isnull=False).update(
                low_balance_warned_at=None
            )
    return warned


def _threshold(wallet: Wallet) -> int:
    """The owner's own threshold in hours (the profile came with the wallet)."""
    try:
        return wallet.user.profile.low_balance_warning_hours
    except Profile.DoesNotExist:
        return settings.LOW_BALANCE_WARNING_HOURS


def _warning_email(*, wallet: Wallet, runway: Runway, marked_at: datetime) -> None:
    """Email the wallet's owner, in their language, what their balance still covers at the current
    burn rate and where to top up: once per mark."""
    email_send(
        template="billing/email/low_balance", user=wallet.user,
        key=f"low-balance:{wallet.pk}:{marked_at.isoformat()}",
        context=lambda: {
            "hours": runway.hours,
            "hours_text": formatting.number(runway.hours),
            "balance": formatting.money(wallet.balance, wallet.currency),
            "rate": formatting.usd(runway.per_hour_usd),
            # The same hour in the wallet's currency, when it is not dollars.
            "rate_wallet": (
                formatting.money(runway.per_hour, wallet.currency) if wallet.currency != BASE_CURRENCY else ""
            ),
            "top_up_url": absolute_url(reverse("billing:top-up")),
        },
    )
