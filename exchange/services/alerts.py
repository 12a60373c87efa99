"""Buyers' price alerts: "tell me when G GPUs of this model on one server cost at most this".

An alert is armed until the best ask of its model and size (the cheapest offer with at least G free
GPUs on one server) is at or below its threshold; `price_alerts_check` then writes one email to the
outbox and marks it triggered in the same transaction. It stays triggered, silent, until the best
ask is above the threshold again (or nothing can fill its size), which arms it for the next crossing.
"""

import secrets
from dataclasses import dataclass
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from accounts.models import User
from catalog.models import GpuModel
from marketplace import formatting
from marketplace.emails import absolute_url, email_send

from ..exceptions import PriceAlertNotFound, PriceAlertRejected
from ..models import BID_GPU_COUNTS, PriceAlert, PriceAlertState
from ..selectors import best_asks_by_size_all
from .offers import price_message, price_problem

MAX_PRICE_ALERTS = 20


def _duplicate() -> PriceAlertRejected:
    return PriceAlertRejected(
        _("You already have an alert for this GPU, size and price."), code="alert_duplicate"
    )


def _not_found() -> PriceAlertNotFound:
    return PriceAlertNotFound(_("We could not find this price alert."))


def price_alert_set(*, buyer, gpu_model_id: int, gpus: int, threshold_usd: Decimal) -> PriceAlert:
    """Set an armed alert for the buyer. Raises `PriceAlertRejected` (nothing is written then)."""
    if isinstance(gpus, bool) or gpus not in BID_GPU_COUNTS:
        raise PriceAlertRejected(
            _("An alert is for 1, 2, 4 or 8 GPUs on one server."), code="gpus_not_allowed"
        )
    problem = price_problem(threshold_usd)
    if problem:
        raise PriceAlertRejected(price_message(problem), code=problem)
    if not GpuModel.objects.filter(pk=gpu_model_id).exists():
        raise PriceAlertRejected(_("We do not list this GPU model."), code="gpu_model_unknown")
    with transaction.atomic():
        # The buyer's row serialises two additions at once, so the limit holds.
        list(User.objects.select_for_update().filter(pk=buyer.pk).values_list("pk"))
        if PriceAlert.objects.filter(buyer=buyer).count() >= MAX_PRICE_ALERTS:
            raise PriceAlertRejected(
                _("You can have at most %(max)d price alerts: stop one first.") % {"max": MAX_PRICE_ALERTS},
                code="alerts_too_many",
            )
        try:
            with transaction.atomic():
                return PriceAlert.objects.create(
                    buyer=buyer, gpu_model_id=gpu_model_id, gpus=gpus, threshold_usd=threshold_usd,
                    unsubscribe_token=secrets.token_urlsafe(32),
                )
        except IntegrityError:
            raise _duplicate() from None


def price_alert_stop(*, buyer, alert_id: int) -> None:
    """Delete one of the buyer's alerts. Raises `PriceAlertNotFound` (also for another's alert)."""
    deleted, _rows = PriceAlert.objects.filter(buyer=buyer, pk=alert_id).delete()
    if not deleted:
        raise _not_found()


def price_alert_stop_by_token(*, token: str) -> PriceAlert:
    """Delete the alert an email's unsubscribe link names (no sign-in needed: the token is the
    proof). Returns the alert as it was. Raises `PriceAlertNotFound`, also for a link used twice."""
    alert = PriceAlert.objects.select_related("gpu_model").filter(unsubscribe_token=str(token or "")).first()
    if alert is None:
        raise _not_found()
    deleted, _rows = PriceAlert.objects.filter(pk=alert.pk).delete()
    if not deleted:
        raise _not_found()
    return alert


@dataclass(frozen=True)
class AlertsChecked:
    notified: int
    rearmed: int


def _price_alert_email(*, alert: PriceAlert, price: Decimal) -> None:
    email_send(
        template="exchange/email/price_alert", user=alert.buyer,
        key=f"price-alert:{alert.pk}:{alert.notified_count}",
        context=lambda: {
            "alert": alert, "gpu": alert.gpu_model.name, "gpus": alert.gpus,
            "price": formatting.usd(price), "threshold": formatting.usd(alert.threshold_usd),
            "trade_url": absolute_url(reverse("exchange:trade", kwargs={"slug": alert.gpu_model.slug})),
            "alerts_url": absolute_url(reverse("exchange:price-alerts")),
            "unsubscribe_url": absolute_url(
                reverse("exchange:price-alert-unsubscribe", kwargs={"token": alert.unsubscribe_token})
            ),
        },
    )


@transaction.atomic
def price_alerts_check() -> AlertsChecked:
    """Compare every alert with the best ask of its model and size now: email (through the outbox,
    in this transaction) those armed whose price is at or below their threshold and mark them
    triggered; arm again those triggered whose price is above it, or that nothing can fill.

    Safe to run twice at once: the alerts are locked (SKIP LOCKED), so a second check skips those
    the first holds, and sees them triggered once it commits. Three queries whatever the number of
    alerts (the alerts, the prices, the update), plus one outbox row per email."""
    alerts = list(
        PriceAlert.objects.select_for_update(skip_locked=True, of=("self",))
        .select_related("buyer__profile", "gpu_model")
        .order_by("id")
    )
    if not alerts:
        return AlertsChecked(notified=0, rearmed=0)
    prices = best_asks_by_size_all()
    now = timezone.now()
    changed, notified = [], 0
    for alert in alerts:
        price = prices.get(alert.gpu_model_id, {}).get(alert.gpus)
        at_or_below = price is not None and price <= alert.threshold_usd
        if alert.state == PriceAlertState.ARMED and at_or_below:
            alert.state, alert.notified_at = PriceAlertState.TRIGGERED, now
            alert.notified_count += 1
            _price_alert_email(alert=alert, price=price)
            changed.append(alert)
            notified += 1
        elif alert.state == PriceAlertState.TRIGGERED and not at_or_below:
            alert.state = PriceAlertState.ARMED
            changed.append(alert)
    if changed:
        PriceAlert.objects.bulk_update(changed, ["state", "notified_at", "notified_count"])
    return AlertsChecked(notified=notified, rearmed=len(changed) - notified)
