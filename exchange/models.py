from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from sellers.models import Server


class Offer(models.Model):
    """An ask: GPUs of one server offered at a price per GPU-hour in US dollars."""

    server = models.ForeignKey(
        Server, on_delete=models.PROTECT, related_name="offers", verbose_name=_("server")
    )
    gpus_offered = models.PositiveSmallIntegerField(_("GPUs offered"))
    price_usd = models.DecimalField(_("price per GPU-hour (USD)"), max_digits=8, decimal_places=2)
    active = models.BooleanField(_("active"), default=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        ordering = ("price_usd", "created_at", "id")
        verbose_name = _("offer")
        verbose_name_plural = _("offers")
        constraints = [
            models.CheckConstraint(condition=Q(gpus_offered__gte=1), name="exchange_offer_gpus_positive"),
            models.CheckConstraint(condition=Q(price_usd__gt=0), name="exchange_offer_price_positive"),
        ]
        indexes = [
            models.Index(
                fields=("server", "price_usd"),
                condition=Q(active=True),
                name="exchange_offer_active_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.server}: {self.gpus_offered} × {self.price_usd} USD"


class Market(models.Model):
    """The one row that says whether the exchange is open for trading."""

    SINGLETON_ID = 1

    id = models.PositiveSmallIntegerField(primary_key=True, default=SINGLETON_ID)
    is_open = models.BooleanField(_("open for trading"), default=False)
    changed_at = models.DateTimeField(_("changed at"), auto_now=True)

    class Meta:
        verbose_name = _("market")
        verbose_name_plural = _("market")
        constraints = [
            models.CheckConstraint(condition=Q(id=1), name="exchange_market_singleton"),
        ]

    def __str__(self) -> str:
        return str(_("Market open") if self.is_open else _("Market closed"))
