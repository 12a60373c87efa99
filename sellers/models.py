from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Lower
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
    # Where payouts go; copied from the application at approval, changed by owners only.
    payout_iban = models.CharField(_("payout IBAN"), max_length=34, blank=True)
    payout_account_holder = models.CharField(_("payout account holder"), max_length=200, blank=True)
    # Set by an operator (exchange.services.seller_suspend): its offers are withdrawn and it posts
    # no new ones until reinstated; rentals already running continue.
    suspended_at = models.DateTimeField(_("suspended at"), null=True, blank=True)
    suspension_reason = models.TextField(_("reason for the suspension"), blank=True)

    class Meta:
        ordering = ("name",)
        verbose_name = _("seller")
        verbose_name_plural = _("sellers")
        permissions = [("decide_seller", _("Can decide on sellers, their applications and servers"))]

    def __str__(self) -> str:
        return self.name

    @property
    def payout_iban_masked(self) -> str:
        """The payout IBAN with all but its last four characters hidden."""
        if not self.payout_iban:
            return ""
        return "•" * max(len(self.payout_iban) - 4, 0) + self.payout_iban[-4:]


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
    # What the buyer gets besides the GPUs; optional, positive when given.
    city = models.CharField(_("city"), max_length=100, blank=True)
    cpu_cores = models.PositiveSmallIntegerField(_("CPU cores"), null=True, blank=True)
    ram_gb = models.PositiveIntegerField(_("RAM (GB)"), null=True, blank=True)
    disk_gb = models.PositiveIntegerField(_("disk (GB)"), null=True, blank=True)
    network_gbps = models.PositiveSmallIntegerField(_("network (Gbit/s)"), null=True, blank=True)

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
            *[
                models.CheckConstraint(
                    condition=Q(**{f"{field}__isnull": True}) | Q(**{f"{field}__gte": 1}),
                    name=f"sellers_server_{field}_positive",
                )
                for field in ("cpu_cores", "ram_gb", "disk_gb", "network_gbps")
            ],
        ]

    def __str__(self) -> str:
        return f"{self.seller} / {self.name}"


class MemberRole(models.TextChoices):
    OWNER = "owner", _("Owner")
    MEMBER = "member", _("Member")


class SellerMembership(models.Model):
    """A user who works for a seller: owners change payout details and members."""

    seller = models.ForeignKey(
        Seller, on_delete=models.CASCADE, related_name="memberships", verbose_name=_("seller")
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="seller_memberships",
        verbose_name=_("user"),
    )
    role = models.CharField(_("role"), max_length=10, choices=MemberRole.choices, default=MemberRole.MEMBER)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("seller member")
        verbose_name_plural = _("seller members")
        constraints = [
            models.UniqueConstraint(fields=("seller", "user"), name="sellers_membership_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.seller} / {self.user}"


class SellerInvitation(models.Model):
    """An owner's invitation to join the seller; accepted when a user with the email signs in."""

    seller = models.ForeignKey(
        Seller, on_delete=models.CASCADE, related_name="invitations", verbose_name=_("seller")
    )
    email = models.EmailField(_("email"))
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", verbose_name=_("invited by")
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    accepted_at = models.DateTimeField(_("accepted at"), null=True, blank=True)

    class Meta:
        ordering = ("-created_at",)
        verbose_name = _("seller invitation")
        verbose_name_plural = _("seller invitations")
        constraints = [
            models.UniqueConstraint(
                F("seller"), Lower("email"), condition=Q(accepted_at__isnull=True),
                name="sellers_invitation_one_open_per_email",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.seller} / {self.email}"


class ApplicationStatus(models.TextChoices):
    DRAFT = "draft", _("Draft")
    SUBMITTED = "submitted", _("Submitted")
    NEEDS_INFO = "needs_info", _("More information needed")
    APPROVED = "approved", _("Approved")
    REJECTED = "rejected", _("Rejected")


OPEN_APPLICATION_STATUSES = (
    ApplicationStatus.DRAFT, ApplicationStatus.SUBMITTED, ApplicationStatus.NEEDS_INFO,
)
EDITABLE_APPLICATION_STATUSES = (ApplicationStatus.DRAFT, ApplicationStatus.NEEDS_INFO)


class SellerApplication(models.Model):
    """A company's application to sell on the exchange, reviewed by an operator."""

    applicant = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="seller_applications",
        verbose_name=_("applicant"),
    )
    status = models.CharField(
        _("status"), max_length=12, choices=ApplicationStatus.choices, default=ApplicationStatus.DRAFT
    )
    legal_name = models.CharField(_("legal company name"), max_length=200, blank=True)
    country = models.CharField(_("country"), max_length=2, blank=True)
    registration_number = models.CharField(_("company registration number"), max_length=50, blank=True)
    vat_id = models.CharField(_("VAT ID"), max_length=20, blank=True)
    address = models.TextField(_("registered address"), blank=True)
    contact_name = models.CharField(_("contact person"), max_length=200, blank=True)
    contact_phone = models.CharField(_("contact phone"), max_length=40, blank=True)
    website = models.URLField(_("website"), blank=True)
    datacentre_locations = models.TextField(_("data-centre locations"), blank=True)
    planned_inventory = models.TextField(_("planned inventory"), blank=True)
    iban = models.CharField(_("IBAN"), max_length=34, blank=True)
    account_holder = models.CharField(_("account holder"), max_length=200, blank=True)
    terms_accepted_at = models.DateTimeField(_("seller terms accepted at"), null=True, blank=True)
    operator_question = models.TextField(_("operator's question"), blank=True)
    rejection_reason = models.TextField(_("rejection reason"), blank=True)
    submitted_at = models.DateTimeField(_("submitted at"), null=True, blank=True)
    decided_at = models.DateTimeField(_("decided at"), null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True,
        related_name="+", verbose_name=_("decided by"),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        ordering = ("-created_at",)
        verbose_name = _("seller application")
        verbose_name_plural = _("seller applications")
        constraints = [
            models.UniqueConstraint(
                fields=("applicant",), condition=Q(status__in=OPEN_APPLICATION_STATUSES),
                name="sellers_application_one_open_per_applicant",
            ),
            models.CheckConstraint(
                condition=Q(status__in=ApplicationStatus.values), name="sellers_application_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(status=ApplicationStatus.DRAFT) | Q(submitted_at__isnull=False),
                name="sellers_application_submitted_has_date",
            ),
            models.CheckConstraint(
                condition=~Q(status__in=(ApplicationStatus.APPROVED, ApplicationStatus.REJECTED))
                | (Q(decided_at__isnull=False) & Q(decided_by__isnull=False)),
                name="sellers_application_decision_recorded",
            ),
            models.CheckConstraint(
                condition=~Q(status=ApplicationStatus.REJECTED) | ~Q(rejection_reason=""),
                name="sellers_application_rejection_has_reason",
            ),
        ]

    def __str__(self) -> str:
        return self.legal_name or f"#{self.pk}"

    @property
    def is_editable(self) -> bool:
        return self.status in EDITABLE_APPLICATION_STATUSES
