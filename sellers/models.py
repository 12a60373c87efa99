from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext_lazy as _

from catalog.models import GpuModel


class Region(models.TextChoices):
    EUROPE = "europe", _("Europe")
    NORTH_AMERICA = "north-america", _("North America")
    ASIA_PACIFIC = "asia-pacific", _("Asia-Pacific")


class ServerStatus(models.TextChoices):
    PENDING = "pending", _("Pending verification")
    ACTIVE = "active", _("Active")
    RETIRED = "retired", _("Retired")


class Seller(models.Model):
    """A company that sells GPU hours from its servers."""

    name = models.CharField(_("company name"), max_length=200)
    slug = models.SlugField(_("slug"), max_length=80, unique=True)
    country = models.CharField(_("country"), max_length=2)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        ordering = ("name",)
        verbose_name = _("seller")
        verbose_name_plural = _("sellers")

    def __str__(self) -> str:
        return self.name


class Server(models.Model):
    """A machine of a seller with `gpu_count` GPUs of one model."""

    MAX_GPUS = 16

    seller = models.ForeignKey(
        Seller, on_delete=models.PROTECT, related_name="servers", verbose_name=_("seller")
    )
    gpu_model = models.ForeignKey(
        GpuModel, on_delete=models.PROTECT, related_name="servers", verbose_name=_("GPU model")
    )
    name = models.CharField(_("name"), max_length=100)
    gpu_count = models.PositiveSmallIntegerField(_("GPUs"))
    # GPUs held by running rentals, updated under a row lock by the exchange.
    gpus_rented = models.PositiveSmallIntegerField(_("GPUs rented"), default=0)
    region = models.CharField(_("region"), max_length=20, choices=Region.choices)
    status = models.CharField(
        _("status"), max_length=10, choices=ServerStatus.choices, default=ServerStatus.PENDING
    )
    # Where a buyer connects while a rental runs.
    host = models.CharField(_("connection host"), max_length=255, blank=True)
    ssh_port = models.PositiveIntegerField(_("SSH port"), default=22)

    class Meta:
        ordering = ("seller", "name")
        verbose_name = _("server")
        verbose_name_plural = _("servers")
        constraints = [
            models.UniqueConstraint(fields=("seller", "name"), name="sellers_server_name_unique"),
            models.CheckConstraint(
                condition=Q(gpu_count__gte=1) & Q(gpu_count__lte=16),
                name="sellers_server_gpu_count_range",
            ),
            models.CheckConstraint(
                condition=Q(gpus_rented__gte=0) & Q(gpus_rented__lte=F("gpu_count")),
                name="sellers_server_rented_within_count",
            ),
            models.CheckConstraint(
                condition=Q(ssh_port__gte=1) & Q(ssh_port__lte=65535), name="sellers_server_port_range"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.seller} / {self.name}"
