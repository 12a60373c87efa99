from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext, ngettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from catalog.models import GpuModel
from marketplace import formatting
from sellers.isolation import ANY_LEVEL, LEVEL_SETS, IsolationLevel
from sellers.models import ContainerTemplate, Region, Server

BID_GPU_COUNTS = (1, 2, 4, 8)


# The labels of a status carry a context naming what they qualify, so that French and Portuguese
# can agree with its gender and number (a bid "Annulée", a top-up "Annulé").
class OfferState(models.TextChoices):
    ACTIVE = "active", pgettext_lazy("offer status", "Active")
    WITHDRAWN = "withdrawn", pgettext_lazy("offer status", "Withdrawn")


class Offer(models.Model):
    """An ask: up to `gpus_offered` GPUs of one server at a price per GPU-hour in US dollars.

    A server has at most one active offer. The GPUs it can sell right now are
    min(gpus_offered, server.gpu_count) - server.gpus_rented: rentals taken from it (or from an
    earlier, withdrawn offer of the same server) hold their GPUs until they end.
    """

    server = models.ForeignKey(
        Server, on_delete=models.PROTECT, related_name="offers", verbose_name=_("server")
    )
    gpus_offered = models.PositiveSmallIntegerField(_("GPUs offered"))
    price_usd = models.DecimalField(_("price per GPU-hour (USD)"), max_digits=8, decimal_places=2)
    state = models.CharField(
        _("state"), max_length=10, choices=OfferState.choices, default=OfferState.ACTIVE
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        ordering = ("price_usd", "created_at", "id")
        verbose_name = _("offer")
        verbose_name_plural = _("offers")
        constraints = [
            models.CheckConstraint(condition=Q(gpus_offered__gte=1), name="exchange_offer_gpus_positive"),
            models.CheckConstraint(condition=Q(price_usd__gt=0), name="exchange_offer_price_positive"),
            models.UniqueConstraint(
                fields=("server",), condition=Q(state="active"),
                name="exchange_offer_one_active_per_server",
            ),
        ]
        indexes = [
            models.Index(
                fields=("price_usd", "created_at"),
                condition=Q(state="active"),
                name="exchange_offer_active_idx",
            ),
        ]

    def __str__(self) -> str:
        return ngettext(
            "Offer of %(server)s: %(gpus)s GPU at %(price)s per GPU-hour",
            "Offer of %(server)s: %(gpus)s GPUs at %(price)s per GPU-hour",
            self.gpus_offered,
        ) % {"server": self.server, "gpus": self.gpus_offered, "price": formatting.usd(self.price_usd)}


class Market(models.Model):
    """The one row that says whether the exchange is open for trading."""

    SINGLETON_ID = 1

    id = models.PositiveSmallIntegerField(primary_key=True, default=SINGLETON_ID)
    is_open = models.BooleanField(_("open for trading"), default=False)
    changed_at = models.DateTimeField(_("changed at"), auto_now=True)
    # Bumped with every change of state: cached public pages show whether the market is open.
    version = models.PositiveBigIntegerField(_("version"), default=0)

    class Meta:
        verbose_name = _("market")
        verbose_name_plural = _("market")
        permissions = [("operate_market", _("Can open and close the market"))]
        constraints = [
            models.CheckConstraint(condition=Q(id=1), name="exchange_market_singleton"),
        ]

    def __str__(self) -> str:
        return str(_("Market open") if self.is_open else _("Market closed"))


class MarketBook(models.Model):
    """The version of one GPU model's book: bumped in the same transaction as any change of its
    offers, bids or trades (`exchange.matching.market_lock`, which every writer of the book takes
    first). Cached public pages are stored under the versions of the books they show, so a page is
    never older than the book."""

    gpu_model = models.OneToOneField(
        GpuModel, on_delete=models.CASCADE, primary_key=True, related_name="market_book",
        verbose_name=_("GPU model"),
    )
    version = models.PositiveBigIntegerField(_("version"), default=0)
    # The book's summary, kept by differences by PostgreSQL's row triggers in the writer's
    # transaction (migration 0009): the public pages and matching read it instead of aggregating
    # every offer. On SQLite (the embedded default) it stays empty and the pages aggregate.
    best_ask_usd = models.DecimalField(
        _("best ask (USD per GPU-hour)"), max_digits=8, decimal_places=2, null=True, blank=True
    )
    gpus_on_offer = models.IntegerField(_("GPUs on offer"), db_default=0)

    class Meta:
        verbose_name = _("market book")
        verbose_name_plural = _("market books")

    def __str__(self) -> str:
        return gettext("Order book of GPU model #%(gpu)s: version %(version)s") % {
            "gpu": self.gpu_model_id, "version": self.version,
        }


class TimeInForce(models.TextChoices):
    BUY_NOW = "buy_now", _("Buy now (fill at the best offer or cancel)")
    BID = "bid", _("Bid (rest in the book until filled, cancelled or expired)")


class BidState(models.TextChoices):
    OPEN = "open", pgettext_lazy("bid status", "Open")
    FILLED = "filled", pgettext_lazy("bid status", "Filled")
    CANCELLED = "cancelled", pgettext_lazy("bid status", "Cancelled")
    EXPIRED = "expired", pgettext_lazy("bid status", "Expired")


class BidCancelReason(models.TextChoices):
    BUYER = "buyer", pgettext_lazy("bid cancel reason", "Cancelled by the buyer")
    NOT_FILLED = "not_filled", pgettext_lazy("bid cancel reason", "No offer could fill it at once")
    INSUFFICIENT_BALANCE = "insufficient_balance", pgettext_lazy(
        "bid cancel reason", "Balance too low for the first hour"
    )
    OPERATOR = "operator", pgettext_lazy("bid cancel reason", "Cancelled by an operator")


class Bid(models.Model):
    """A buyer's order: `gpus` GPUs of one model on one server, at most `max_price_usd` each per hour."""

    buyer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="bids", verbose_name=_("buyer")
    )
    gpu_model = models.ForeignKey(
        GpuModel, on_delete=models.PROTECT, related_name="bids", verbose_name=_("GPU model")
    )
    gpus = models.PositiveSmallIntegerField(_("GPUs"))
    max_price_usd = models.DecimalField(
        _("maximum price per GPU-hour (USD)"), max_digits=8, decimal_places=2
    )
    region = models.CharField(_("region"), max_length=20, choices=Region.choices, blank=True)
    hours = models.PositiveIntegerField(_("hours"), null=True, blank=True)
    time_in_force = models.CharField(_("time in force"), max_length=10, choices=TimeInForce.choices)
    expires_at = models.DateTimeField(_("expires at"), null=True, blank=True)
    ssh_public_key = models.TextField(_("SSH public key"))
    # Only servers whose reliability (0 to 1) is at least this; "new" servers have none and do not
    # qualify. Empty: any server.
    min_reliability = models.DecimalField(
        _("minimum reliability"), max_digits=4, decimal_places=3, null=True, blank=True
    )
    # The isolation levels the buyer accepts (sellers.isolation.levels_text): only servers sold at
    # one of them fill the bid.
    isolation_levels = models.CharField(
        _("isolation levels accepted"), max_length=30, default=ANY_LEVEL, db_default=ANY_LEVEL
    )
    # The container template it runs when it fills at a server sold as "container" (only servers
    # holding it fill it there); empty: no template was published when it was placed.
    container_template = models.ForeignKey(
        ContainerTemplate, on_delete=models.PROTECT, null=True, blank=True, related_name="+",
        verbose_name=_("container template"),
    )
    state = models.CharField(_("state"), max_length=10, choices=BidState.choices, default=BidState.OPEN)
    cancel_reason = models.CharField(
        _("cancel reason"), max_length=24, choices=BidCancelReason.choices, blank=True
    )
    # One order per submitted form, however often the form is sent.
    form_token = models.UUIDField(_("form token"))
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        ordering = ("-created_at", "-id")
        verbose_name = _("bid")
        verbose_name_plural = _("bids")
        constraints = [
            models.UniqueConstraint(fields=("buyer", "form_token"), name="exchange_bid_one_per_form"),
            models.CheckConstraint(condition=Q(gpus__in=BID_GPU_COUNTS), name="exchange_bid_gpus_allowed"),
            models.CheckConstraint(condition=Q(max_price_usd__gt=0), name="exchange_bid_price_positive"),
            models.CheckConstraint(
                condition=Q(hours__isnull=True) | Q(hours__gte=1), name="exchange_bid_hours_positive"
            ),
            models.CheckConstraint(
                condition=Q(state="cancelled") | Q(cancel_reason=""),
                name="exchange_bid_reason_only_when_cancelled",
            ),
            models.CheckConstraint(
                condition=Q(min_reliability__isnull=True) | Q(min_reliability__gte=0, min_reliability__lte=1),
                name="exchange_bid_min_reliability_share",
            ),
            models.CheckConstraint(
                condition=Q(isolation_levels__in=LEVEL_SETS), name="exchange_bid_isolation_levels_valid"
            ),
        ]
        indexes = [
            models.Index(
                fields=("gpu_model", "-max_price_usd", "created_at"),
                condition=Q(state="open"),
                name="exchange_bid_open_idx",
            ),
        ]

    def __str__(self) -> str:
        return gettext("Bid for %(gpus)s × %(gpu)s at up to %(price)s per GPU-hour") % {
            "gpus": self.gpus, "gpu": self.gpu_model, "price": formatting.usd(self.max_price_usd),
        }


class RentalState(models.TextChoices):
    STARTING = "starting", pgettext_lazy("rental status", "Starting")
    RUNNING = "running", pgettext_lazy("rental status", "Running")
    ENDED = "ended", pgettext_lazy("rental status", "Ended")


class EndReason(models.TextChoices):
    STOPPED_BY_BUYER = "stopped_by_buyer", _("Stopped by the buyer")
    HOURS_USED = "hours_used", _("All hours used")
    PAYMENT_FAILED = "payment_failed", _("First hour could not be paid")
    BALANCE_EXHAUSTED = "balance_exhausted", _("Balance exhausted")
    SERVER_FAILURE = "server_failure", _("Server failure")
    NOT_DELIVERED = "not_delivered", _("Not delivered")
    OPERATOR = "operator", _("Ended by an operator")
    ISOLATION_LOST = "isolation_lost", _("Isolation lost")


class Rental(models.Model):
    """GPUs of one server rented by a buyer at a price locked when the bid matched.

    Also the exchange's record of the trade: price history and last trades read rentals.
    """

    buyer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="rentals",
        verbose_name=_("buyer"),
    )
    bid = models.OneToOneField(Bid, on_delete=models.PROTECT, related_name="rental", verbose_name=_("bid"))
    offer = models.ForeignKey(
        Offer, on_delete=models.PROTECT, related_name="rentals", verbose_name=_("offer")
    )
    server = models.ForeignKey(
        Server, on_delete=models.PROTECT, related_name="rentals", verbose_name=_("server")
    )
    gpu_model = models.ForeignKey(
        GpuModel, on_delete=models.PROTECT, related_name="rentals", verbose_name=_("GPU model")
    )
    gpus = models.PositiveSmallIntegerField(_("GPUs"))
    price_usd = models.DecimalField(_("price per GPU-hour (USD)"), max_digits=8, decimal_places=2)
    hours = models.PositiveIntegerField(_("hours booked"), null=True, blank=True)
    state = models.CharField(
        _("state"), max_length=10, choices=RentalState.choices, default=RentalState.STARTING
    )
    started_at = models.DateTimeField(_("started at"), db_index=True)
    paid_through = models.DateTimeField(_("paid through"), null=True, blank=True)
    ended_at = models.DateTimeField(_("ended at"), null=True, blank=True)
    end_reason = models.CharField(_("end reason"), max_length=20, choices=EndReason.choices, blank=True)
    ssh_public_key = models.TextField(_("SSH public key"))
    # The Unix user the host agent created (`evx-<id>`), set when it reports the login ready.
    username = models.CharField(_("username"), max_length=32, blank=True)
    delivered_at = models.DateTimeField(_("login ready at"), null=True, blank=True)
    # The port of the rental's own sshd, as its agent reports the login (docs/agent.md); null for
    # a login through the host's sshd, reached on the server's `ssh_port`.
    ssh_port = models.PositiveIntegerField(_("SSH port"), null=True, blank=True)
    # A container rental's other ports (its template's, Jupyter's 8888 say) on the server, as its
    # agent last reported them: {"8888": 41005}.
    service_ports = models.JSONField(_("service ports"), default=dict, blank=True)
    # When its agent reported that the server cannot deliver it as sold (no port or loop device
    # left, a limit or a GPU lock the kernel refused): the agents check ends it as not delivered.
    delivery_refused_at = models.DateTimeField(_("refused by the agent at"), null=True, blank=True)
    # The server's level when the rental matched (sellers.isolation): what the buyer was sold.
    isolation_level = models.CharField(
        _("isolation level"), max_length=10, choices=IsolationLevel.choices, default=IsolationLevel.WHOLE,
        db_default=IsolationLevel.WHOLE,
    )
    # The template its container runs: set only for a rental sold as "container" from a bid that
    # named one (the agent otherwise runs the first of its own configuration's).
    container_template = models.ForeignKey(
        ContainerTemplate, on_delete=models.PROTECT, null=True, blank=True, related_name="+",
        verbose_name=_("container template"),
    )
    # A container rental's own secret, made when it matched: its agent passes it to a template
    # that takes one (Jupyter's token) and the buyer sees it once (`service_token_shown_at`). Kept
    # readable because every heartbeat sends it; never shown in the admin.
    service_token = models.CharField(_("service token"), max_length=64, blank=True, default="")
    service_token_shown_at = models.DateTimeField(_("service token shown at"), null=True, blank=True)

    class Meta:
        ordering = ("-started_at", "-id")
        verbose_name = _("rental")
        verbose_name_plural = _("rentals")
        constraints = [
            models.CheckConstraint(condition=Q(gpus__in=BID_GPU_COUNTS), name="exchange_rental_gpus_allowed"),
            models.CheckConstraint(condition=Q(price_usd__gt=0), name="exchange_rental_price_positive"),
            models.CheckConstraint(
                condition=(Q(state="ended") & Q(ended_at__isnull=False) & ~Q(end_reason=""))
                | (~Q(state="ended") & Q(ended_at__isnull=True) & Q(end_reason="")),
                name="exchange_rental_end_consistent",
            ),
            models.CheckConstraint(
                condition=~Q(state="running") | Q(paid_through__isnull=False),
                name="exchange_rental_running_is_paid",
            ),
            models.CheckConstraint(
                condition=Q(paid_through__isnull=True) | Q(paid_through__gt=F("started_at")),
                name="exchange_rental_paid_after_start",
            ),
            models.CheckConstraint(
                condition=~Q(state="running") | Q(delivered_at__isnull=False),
                name="exchange_rental_running_is_delivered",
            ),
            models.CheckConstraint(
                condition=Q(delivery_refused_at__isnull=True) | Q(delivered_at__isnull=True),
                name="exchange_rental_refused_is_undelivered",
            ),
            models.CheckConstraint(
                condition=Q(isolation_level__in=IsolationLevel.values),
                name="exchange_rental_isolation_level_valid",
            ),
            models.CheckConstraint(
                condition=Q(ssh_port__isnull=True) | (Q(ssh_port__gte=1) & Q(ssh_port__lte=65535)),
                name="exchange_rental_ssh_port_range",
            ),
            models.CheckConstraint(
                condition=Q(container_template__isnull=True) | Q(isolation_level=IsolationLevel.CONTAINER),
                name="exchange_rental_template_in_container",
            ),
            models.CheckConstraint(
                condition=Q(service_token="") | Q(isolation_level=IsolationLevel.CONTAINER),
                name="exchange_rental_token_in_container",
            ),
            models.CheckConstraint(
                condition=Q(service_token_shown_at__isnull=True) | ~Q(service_token=""),
                name="exchange_rental_token_shown_exists",
            ),
        ]
        indexes = [
            models.Index(fields=("state", "paid_through"), name="exchange_rental_due_idx"),
            models.Index(fields=("gpu_model", "started_at"), name="exchange_rental_trades_idx"),
        ]

    def __str__(self) -> str:
        return gettext("Rental #%(number)s: %(gpus)s × %(name)s at %(price)s per GPU-hour") % {
            "number": self.pk, "gpus": self.gpus, "name": self.gpu_model,
            "price": formatting.usd(self.price_usd),
        }


class RentalGpu(models.Model):
    """One GPU of a server, by its index on that server, held by a rental from its match until it
    ends. The database refuses two live holders of one index of one server."""

    rental = models.ForeignKey(
        Rental, on_delete=models.CASCADE, related_name="gpu_slots", verbose_name=_("rental")
    )
    server = models.ForeignKey(
        Server, on_delete=models.PROTECT, related_name="gpu_slots", verbose_name=_("server")
    )
    index = models.PositiveSmallIntegerField(_("GPU index"))
    released_at = models.DateTimeField(_("released at"), null=True, blank=True)

    class Meta:
        ordering = ("rental", "index")
        verbose_name = _("GPU slot")
        verbose_name_plural = _("GPU slots")
        constraints = [
            models.UniqueConstraint(
                fields=("server", "index"), condition=Q(released_at__isnull=True),
                name="exchange_rentalgpu_index_one_live_holder",
            ),
            models.UniqueConstraint(fields=("rental", "index"), name="exchange_rentalgpu_once_per_rental"),
            models.CheckConstraint(
                condition=Q(index__lt=Server.MAX_GPUS), name="exchange_rentalgpu_index_range"
            ),
        ]

    def __str__(self) -> str:
        return gettext("Rental #%(number)s: GPU %(index)s of server #%(server)s") % {
            "number": self.rental_id, "index": self.index, "server": self.server_id,
        }


class SshKey(models.Model):
    """A public key the buyer saved to pick on order forms and through the API (never a private key).

    Kept in the normalised form `ssh_public_key_validate` returns; the fingerprint is OpenSSH's
    `SHA256:...` of the key's bytes, so one key is saved once per buyer whatever its comment."""

    buyer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="ssh_keys", verbose_name=_("buyer")
    )
    name = models.CharField(_("name"), max_length=100)
    public_key = models.TextField(_("SSH public key"))
    fingerprint = models.CharField(_("fingerprint"), max_length=60)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        ordering = ("name", "id")
        verbose_name = _("SSH key")
        verbose_name_plural = _("SSH keys")
        constraints = [
            models.UniqueConstraint(fields=("buyer", "fingerprint"), name="exchange_sshkey_once_per_buyer"),
            models.CheckConstraint(condition=~Q(name=""), name="exchange_sshkey_has_name"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.fingerprint})"


class PriceAlertState(models.TextChoices):
    ARMED = "armed", pgettext_lazy("price alert status", "Armed")
    TRIGGERED = "triggered", pgettext_lazy("price alert status", "Triggered")


class PriceAlert(models.Model):
    """"Tell me when G GPUs of this model on one server cost at most this per GPU-hour."

    Armed, it waits for the best ask of its size to reach the threshold; it then sends one email and
    is triggered until the best ask rises above the threshold again (or nothing can fill the size),
    which arms it again. Stopping deletes it; so does the one-click link in its emails."""

    buyer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="price_alerts",
        verbose_name=_("buyer"),
    )
    gpu_model = models.ForeignKey(
        GpuModel, on_delete=models.CASCADE, related_name="price_alerts", verbose_name=_("GPU model")
    )
    gpus = models.PositiveSmallIntegerField(_("GPUs"))
    threshold_usd = models.DecimalField(
        _("threshold per GPU-hour (USD)"), max_digits=8, decimal_places=2
    )
    state = models.CharField(
        _("state"), max_length=10, choices=PriceAlertState.choices, default=PriceAlertState.ARMED
    )
    notified_at = models.DateTimeField(_("last notified at"), null=True, blank=True)
    # How many emails it has sent: names each email's outbox key, so one crossing is one email.
    notified_count = models.PositiveIntegerField(_("emails sent"), default=0)
    unsubscribe_token = models.CharField(_("unsubscribe token"), max_length=64, unique=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        ordering = ("gpu_model", "gpus", "threshold_usd", "id")
        verbose_name = _("price alert")
        verbose_name_plural = _("price alerts")
        constraints = [
            models.CheckConstraint(
                condition=Q(threshold_usd__gt=0), name="exchange_pricealert_threshold_positive"
            ),
            models.CheckConstraint(
                condition=Q(gpus__in=BID_GPU_COUNTS), name="exchange_pricealert_gpus_allowed"
            ),
            models.UniqueConstraint(
                fields=("buyer", "gpu_model", "gpus", "threshold_usd"),
                name="exchange_pricealert_once_per_buyer",
            ),
        ]
        indexes = [models.Index(fields=("state", "gpu_model"), name="exchange_pricealert_state_idx")]

    def __str__(self) -> str:
        return gettext("Price alert for %(gpus)s × %(gpu)s at %(price)s or less (%(state)s)") % {
            "gpus": self.gpus, "gpu": self.gpu_model, "price": formatting.usd(self.threshold_usd),
            "state": self.get_state_display(),
        }
