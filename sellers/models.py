import re
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Lower
from django.utils.translation import get_language, gettext, ngettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from catalog.models import GpuModel
from marketplace import formatting

from .isolation import IsolationLevel


class Region(models.TextChoices):
    EUROPE = "europe", _("Europe")
    NORTH_AMERICA = "north-america", _("North America")
    ASIA_PACIFIC = "asia-pacific", _("Asia-Pacific")


# The labels of a status carry a context naming what they qualify, so that French and Portuguese
# can agree with its gender and number (a bid "Annulée", a top-up "Annulé").
class ServerStatus(models.TextChoices):
    PENDING = "pending", pgettext_lazy("server status", "Pending verification")
    ACTIVE = "active", pgettext_lazy("server status", "Active")
    RETIRED = "retired", pgettext_lazy("server status", "Retired")


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
    # Over all its servers, as on each server (exchange.services.reliability_refresh).
    reliability = models.DecimalField(_("reliability"), max_digits=4, decimal_places=3, null=True, blank=True)

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


@dataclass(frozen=True)
class PerGpu:
    """What a rental gets with each GPU of a server: its part of the CPU cores, memory (GiB) and
    disk (GB) the server shares out (its sellable hardware, from its agent's report), else of what
    the seller registered; None where neither is known."""

    cpu_cores: int | None
    memory_gib: int | None
    disk_gb: int | None

    @classmethod
    def of(
        cls, *, gpu_count: int, sellable_cpu_cores: int | None, sellable_memory_mib: int | None,
        sellable_disk_gb: int | None, cpu_cores: int | None, ram_gb: int | None, disk_gb: int | None,
    ) -> "PerGpu | None":
        """None when nothing is known, or the server has no GPUs (nothing to share out)."""
        if not gpu_count:
            return None

        def part(sellable, registered):
            total = sellable if sellable is not None else registered
            return None if total is None else total // gpu_count

        memory_gib = sellable_memory_mib // 1024 if sellable_memory_mib is not None else None
        shares = cls(
            cpu_cores=part(sellable_cpu_cores, cpu_cores), memory_gib=part(memory_gib, ram_gb),
            disk_gb=part(sellable_disk_gb, disk_gb),
        )
        return None if shares == cls(None, None, None) else shares

    def text(self) -> str:
        """"8 vCPU, 64 GiB RAM, 500 GB disk per GPU" in the page's language (the parts known)."""
        parts = []
        if self.cpu_cores is not None:
            parts.append(ngettext("%(count)s vCPU", "%(count)s vCPU", self.cpu_cores) % {
                "count": formatting.number(self.cpu_cores)
            })
        if self.memory_gib is not None:
            parts.append(gettext("%(count)s GiB RAM") % {"count": formatting.number(self.memory_gib)})
        if self.disk_gb is not None:
            parts.append(gettext("%(count)s GB disk") % {"count": formatting.number(self.disk_gb)})
        return gettext("%(resources)s per GPU") % {"resources": ", ".join(parts)}


SERVER_SHARE_FIELDS = (
    "gpu_count", "sellable_cpu_cores", "sellable_memory_mib", "sellable_disk_gb", "cpu_cores", "ram_gb",
    "disk_gb",
)


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
    # Set while the host agent's last report matches the registration (GPU model, count, memory,
    # no uncorrected ECC errors); an active server is in the book only while it is set.
    agent_verified_at = models.DateTimeField(_("verified by its agent at"), null=True, blank=True)
    # The last 30 days (exchange.services.reliability_refresh): shares from 0 to 1; empty while the
    # server has fewer than 7 days of history ("new").
    reliability = models.DecimalField(_("reliability"), max_digits=4, decimal_places=3, null=True, blank=True)
    reliability_uptime = models.DecimalField(
        _("share of listed minutes with heartbeats"), max_digits=4, decimal_places=3, null=True, blank=True
    )
    reliability_delivery = models.DecimalField(
        _("share of rentals delivered"), max_digits=4, decimal_places=3, null=True, blank=True
    )
    # Derived from its agent's last isolation report (sellers.isolation.isolation_level_of) by the
    # heartbeat that brought it; "whole server" until a report says more.
    isolation_level = models.CharField(
        _("isolation level"), max_length=10, choices=IsolationLevel.choices, default=IsolationLevel.WHOLE,
        db_default=IsolationLevel.WHOLE,
    )
    # Its container runtime stopped answering (a report `paused`) on a host whose containers
    # held otherwise: no container is sold, but those running keep their boundary, so their
    # rentals are not ended as "isolation lost" (exchange.selectors.rentals_isolation_lost).
    containers_paused = models.BooleanField(_("containers paused"), default=False, db_default=False)
    # What its rentals share out by GPU, from the same report: its cores, memory and disk less the
    # seller's reserves (sellers.isolation.Sellable); empty before a report.
    sellable_cpu_cores = models.PositiveIntegerField(_("CPU cores to rent out"), null=True, blank=True)
    sellable_memory_mib = models.PositiveBigIntegerField(_("memory to rent out (MiB)"), null=True, blank=True)
    sellable_disk_gb = models.PositiveIntegerField(_("disk to rent out (GB)"), null=True, blank=True)
    # Set when the agent repaired its GPU device locks too often (ISOLATION_DRIFT_LIMIT within
    # ISOLATION_DRIFT_HOURS): the locks count as not holding until an operator clears it.
    devices_held_at = models.DateTimeField(_("device locks distrusted since"), null=True, blank=True)

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
            *[
                models.CheckConstraint(
                    condition=Q(**{f"{field}__isnull": True}) | Q(**{f"{field}__gte": 0, f"{field}__lte": 1}),
                    name=f"sellers_server_{field}_share",
                )
                for field in ("reliability", "reliability_uptime", "reliability_delivery")
            ],
            models.CheckConstraint(
                condition=Q(isolation_level__in=IsolationLevel.values),
                name="sellers_server_isolation_level_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.seller} / {self.name}"

    def per_gpu(self) -> PerGpu | None:
        return PerGpu.of(**{name: getattr(self, name) for name in SERVER_SHARE_FIELDS})


# A container image named by its digest: an optional registry (with its port), a path without
# ':', then @sha256: and 64 hex digits; a tag is refused (it can be moved to other content). The
# agent checks the same (everx_agent.containers.IMAGE_BY_DIGEST).
IMAGE_BY_DIGEST = r"^([a-z0-9.-]+(:[0-9]{1,5})?/)?[a-z0-9._/-]+@sha256:[0-9a-f]{64}$"
DRIVER_VERSION = r"^([0-9]{1,4}(\.[0-9]{1,4}){0,2})?$"
CONTAINER_PATH = r"^/[A-Za-z0-9._/-]{1,200}$"
# An environment variable's name, such as JUPYTER_TOKEN; empty: the template takes no token.
TOKEN_ENV = r"^([A-Za-z_][A-Za-z0-9_]{0,63})?$"  # noqa: S105 (a pattern, not a secret)
DEFAULT_KEY_PATH = "/etc/ssh/everx_authorized_keys"
# Where a container whose template takes a token finds the rental's, besides its variable; the
# agent mounts it there (everx_agent.containers.TOKEN_PATH).
SERVICE_TOKEN_PATH = "/etc/everx/service-token"  # noqa: S105 (a path, not a secret)


class ContainerTemplate(models.Model):
    """An image a rental in container mode runs, curated by operators: what it is in the three
    languages, its image pinned by digest, the oldest GPU driver it runs on, the ports it serves
    (22, its sshd, always) and the disk it needs. Agents pull the published ones while idle and
    report the digests they hold (ServerTemplate); buyers choose among those of the server."""

    slug = models.SlugField(_("short name"), max_length=40, unique=True)
    name_en = models.CharField(_("name in English"), max_length=80)
    name_pt = models.CharField(_("name in Portuguese"), max_length=80)
    name_fr = models.CharField(_("name in French"), max_length=80)
    description_en = models.TextField(_("description in English"), max_length=500)
    description_pt = models.TextField(_("description in Portuguese"), max_length=500)
    description_fr = models.TextField(_("description in French"), max_length=500)
    image = models.CharField(
        _("image"), max_length=300, unique=True,
        help_text=_("Pinned by its digest: the name, @sha256: and 64 hexadecimal digits. Tags are refused."),
    )
    min_driver = models.CharField(
        _("minimum GPU driver"), max_length=14, blank=True, help_text=_("For example 550.54; empty: any.")
    )
    ports = models.JSONField(
        _("ports"), default=list, help_text=_("The ports the image serves; 22 is required.")
    )
    key_path = models.CharField(
        _("buyer's key file in the container"), max_length=201, default=DEFAULT_KEY_PATH,
        help_text=_("Where the buyer's SSH key is mounted, read-only; the image's sshd names it."),
    )
    token_env = models.CharField(
        _("token variable"), max_length=64, blank=True,
        help_text=_("The environment variable the image reads a per-rental token from, such as "
                    "JUPYTER_TOKEN: the exchange makes one for each rental and shows it to the buyer once. "
                    "Empty: none."),
    )
    command = models.JSONField(
        _("command"), default=list, blank=True,
        help_text=_("The command run, as a list; empty: the image's own."),
    )
    disk_gb = models.PositiveIntegerField(
        _("disk it needs (GB)"), default=20,
        help_text=_("Servers whose disk per GPU is smaller do not offer it."),
    )
    published = models.BooleanField(_("published"), default=False)
    is_default = models.BooleanField(_("default template"), default=False)
    position = models.PositiveSmallIntegerField(_("position"), default=0)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        ordering = ("position", "slug")
        verbose_name = _("container template")
        verbose_name_plural = _("container templates")
        constraints = [
            models.CheckConstraint(
                condition=Q(image__regex=IMAGE_BY_DIGEST), name="sellers_template_image_by_digest"
            ),
            models.CheckConstraint(condition=Q(min_driver__regex=DRIVER_VERSION),
                                   name="sellers_template_min_driver_version"),
            models.CheckConstraint(
                condition=Q(key_path__regex=CONTAINER_PATH), name="sellers_template_key_path"
            ),
            models.CheckConstraint(
                condition=Q(token_env__regex=TOKEN_ENV), name="sellers_template_token_env"
            ),
            models.CheckConstraint(condition=Q(disk_gb__gte=1), name="sellers_template_disk_positive"),
            models.CheckConstraint(condition=Q(is_default=False) | Q(published=True),
                                   name="sellers_template_default_published"),
            models.UniqueConstraint(fields=("is_default",), condition=Q(is_default=True),
                                    name="sellers_template_one_default"),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """The admin's form: what the database's constraints cannot say of the JSON fields, and the
        constraints' rules with a message an operator reads."""
        errors = {}
        if not re.fullmatch(IMAGE_BY_DIGEST, self.image or ""):
            errors["image"] = _(
                "Name the image by its digest (name@sha256:<64 hexadecimal digits>), without a tag."
            )
        if not re.fullmatch(DRIVER_VERSION, self.min_driver or ""):
            errors["min_driver"] = _("Write the driver version as numbers separated by dots, such as 550.54.")
        if not re.fullmatch(CONTAINER_PATH, self.key_path or "") or ".." in (self.key_path or "").split("/"):
            errors["key_path"] = _("Write an absolute path in the container, such as /etc/ssh/keys.")
        if not re.fullmatch(TOKEN_ENV, self.token_env or ""):
            errors["token_env"] = _("Write the name of an environment variable, such as JUPYTER_TOKEN.")
        ports = self.ports
        if not (isinstance(ports, list) and 22 in ports and len(ports) <= 8 and len(set(ports)) == len(ports)
                and all(type(port) is int and 0 < port < 65536 for port in ports)):
            errors["ports"] = _("List up to 8 distinct port numbers, 22 among them, such as [22, 8888].")
        command = self.command
        if not (isinstance(command, list) and len(command) <= 32
                and all(isinstance(part, str) and len(part) <= 500 for part in command)):
            errors["command"] = _(
                "Write the command as a list of texts, such as [\"/usr/sbin/sshd\", \"-D\"]."
            )
        if self.is_default and not self.published:
            errors["is_default"] = _("Only a published template can be the default.")
        if errors:
            raise ValidationError(errors)

    @property
    def digest(self) -> str:
        return self.image.rsplit("@", 1)[1]

    @property
    def name(self) -> str:
        return self._in_language("name")

    @property
    def description(self) -> str:
        return self._in_language("description")

    def _in_language(self, field: str) -> str:
        language = (get_language() or "en")[:2]
        return getattr(self, f"{field}_{language}", "") or getattr(self, f"{field}_en")


class ServerTemplate(models.Model):
    """A published template whose image the server's agent holds, as its last isolation report
    said (exchange.services.isolation): the templates a container rental there can run."""

    server = models.ForeignKey(
        Server, on_delete=models.CASCADE, related_name="templates_held", verbose_name=_("server")
    )
    template = models.ForeignKey(
        ContainerTemplate, on_delete=models.CASCADE, related_name="held_by", verbose_name=_("template")
    )
    since = models.DateTimeField(_("held since"))

    class Meta:
        ordering = ("template__position", "template__slug")
        verbose_name = _("template held by a server")
        verbose_name_plural = _("templates held by servers")
        constraints = [
            models.UniqueConstraint(fields=("server", "template"), name="sellers_servertemplate_once"),
        ]

    def __str__(self) -> str:
        return f"{self.server} · {self.template}"


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
    DRAFT = "draft", pgettext_lazy("application status", "Draft")
    SUBMITTED = "submitted", pgettext_lazy("application status", "Submitted")
    NEEDS_INFO = "needs_info", pgettext_lazy("application status", "More information needed")
    APPROVED = "approved", pgettext_lazy("application status", "Approved")
    REJECTED = "rejected", pgettext_lazy("application status", "Rejected")


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
        return self.legal_name or gettext("Application #%(number)s") % {"number": self.pk}

    @property
    def is_editable(self) -> bool:
        return self.status in EDITABLE_APPLICATION_STATUSES


# --- the host agent -------------------------------------------------------------------------------


class AgentToken(models.Model):
    """The secret a server's host agent sends with each heartbeat: one live token per server, shown
    once to the seller, stored as its SHA-256 only. It reaches the agent's operations of that one
    server and nothing else."""

    server = models.ForeignKey(
        Server, on_delete=models.CASCADE, related_name="agent_tokens", verbose_name=_("server")
    )
    key_hash = models.CharField(_("key hash"), max_length=64, unique=True)
    prefix = models.CharField(_("prefix"), max_length=12)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
        verbose_name=_("created by"),
    )
    revoked_at = models.DateTimeField(_("revoked at"), null=True, blank=True)
    last_used_at = models.DateTimeField(_("last used at"), null=True, blank=True)

    class Meta:
        ordering = ("-created_at", "-id")
        verbose_name = _("agent token")
        verbose_name_plural = _("agent tokens")
        constraints = [
            models.UniqueConstraint(
                fields=("server",), condition=Q(revoked_at__isnull=True),
                name="sellers_agenttoken_one_live_per_server",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.server})"


class ServerAgent(models.Model):
    """What a server's host agent last reported, one row per server that ever sent a heartbeat,
    rewritten by each one (the hot path: one row, no history)."""

    server = models.OneToOneField(
        Server, on_delete=models.CASCADE, primary_key=True, related_name="agent", verbose_name=_("server")
    )
    enrolled_at = models.DateTimeField(_("first heartbeat at"))
    # Not indexed: every heartbeat rewrites it, and an index on it would make each of those
    # updates write every index of the table (no HOT update); the checks that read it run once
    # a minute over a table of one row per server (migration 0010).
    last_heartbeat_at = models.DateTimeField(_("last heartbeat at"))
    agent_version = models.CharField(_("agent version"), max_length=20)
    hostname = models.CharField(_("host name"), max_length=255, blank=True)
    uptime_seconds = models.PositiveBigIntegerField(_("uptime (seconds)"), null=True, blank=True)
    disk_free_gb = models.DecimalField(
        _("disk free (GB)"), max_digits=9, decimal_places=1, null=True, blank=True
    )
    # The agent's clock minus the exchange's, in seconds, at the last heartbeat.
    clock_skew_seconds = models.IntegerField(_("clock skew (seconds)"), default=0)
    gpus = models.JSONField(_("GPUs seen"), default=list, blank=True)
    gpu_error = models.CharField(_("GPU reading error"), max_length=200, blank=True)
    logins = models.JSONField(_("logins reported"), default=list, blank=True)
    # What differs between the registration and the report (sellers.agents.gpus_compare), empty
    # when they match.
    mismatch = models.JSONField(_("mismatch"), default=list, blank=True)
    # Set when the failure check judged the server silent; cleared by the next heartbeat.
    unreachable_since = models.DateTimeField(_("unreachable since"), null=True, blank=True)
    # When the last row of its history was written (every few minutes, or on a change).
    history_at = models.DateTimeField(_("history written at"), null=True, blank=True)
    # The digest of its last isolation report (sellers.isolation.isolation_report_digest): a report
    # is stored and its level derived again only when this changes. Empty before the first.
    isolation_digest = models.CharField(_("isolation report digest"), max_length=64, blank=True)
    # The public host key of the rentals' own sshds (`type base64`), shown to buyers as a
    # known_hosts line; empty from an agent that reports none.
    ssh_host_key = models.CharField(_("SSH host key"), max_length=1000, blank=True)

    class Meta:
        verbose_name = _("server agent")
        verbose_name_plural = _("server agents")

    def __str__(self) -> str:
        return gettext("Agent %(version)s on %(server)s") % {
            "version": self.agent_version, "server": self.server,
        }


class ServerHeartbeat(models.Model):
    """The history of one server's heartbeats: every refused one, and an accepted one every few
    minutes or whenever what the agent sees changes."""

    server = models.ForeignKey(
        Server, on_delete=models.CASCADE, related_name="heartbeats", verbose_name=_("server")
    )
    received_at = models.DateTimeField(_("received at"))
    accepted = models.BooleanField(_("accepted"))
    problem = models.CharField(_("problem"), max_length=60, blank=True)
    agent_version = models.CharField(_("agent version"), max_length=20, blank=True)
    gpus = models.JSONField(_("GPUs seen"), default=list, blank=True)
    gpu_error = models.CharField(_("GPU reading error"), max_length=200, blank=True)
    disk_free_gb = models.DecimalField(
        _("disk free (GB)"), max_digits=9, decimal_places=1, null=True, blank=True
    )
    clock_skew_seconds = models.IntegerField(_("clock skew (seconds)"), null=True, blank=True)
    logins_ready = models.PositiveSmallIntegerField(_("logins ready"), default=0)
    address = models.GenericIPAddressField(_("address"), null=True, blank=True)

    class Meta:
        ordering = ("-received_at", "-id")
        verbose_name = _("heartbeat")
        verbose_name_plural = _("heartbeats")
        indexes = [models.Index(fields=("server", "-received_at"), name="sellers_heartbeat_server_idx")]

    def __str__(self) -> str:
        return gettext("Heartbeat of %(server)s at %(moment)s") % {
            "server": self.server, "moment": formatting.datetime_zone(self.received_at),
        }


class ServerEventKind(models.TextChoices):
    TOKEN_CREATED = "token_created", _("Agent token created")
    TOKEN_REVOKED = "token_revoked", _("Agent token revoked")
    ENROLLED = "enrolled", _("Agent enrolled")
    VERIFIED = "verified", _("GPUs verified")
    MISMATCH = "mismatch", _("GPUs do not match the registration")
    UNREACHABLE = "unreachable", _("Server unreachable")
    BACK = "back", _("Heartbeats back")
    GPU_FAILED = "gpu_failed", _("GPU failed")
    ISOLATION_CHANGED = "isolation_changed", _("Isolation level changed")
    ISOLATION_REFUSED = "isolation_refused", _("Isolation report refused")
    DEVICE_DRIFT = "device_drift", _("GPU device permissions repaired")
    DEVICES_HELD = "devices_held", _("GPU device locks distrusted")
    DEVICES_CLEARED = "devices_cleared", _("GPU device locks trusted again")
    HOST_KEY_CHANGED = "host_key_changed", _("SSH host key changed")
    DELIVERY_REFUSED = "delivery_refused", _("Rental refused by the agent")


class ServerEvent(models.Model):
    """What happened to a server's agent, for its seller and operators to read."""

    server = models.ForeignKey(
        Server, on_delete=models.CASCADE, related_name="events", verbose_name=_("server")
    )
    at = models.DateTimeField(_("when"))
    kind = models.CharField(_("event"), max_length=20, choices=ServerEventKind.choices)
    detail = models.JSONField(_("detail"), default=dict, blank=True)

    class Meta:
        ordering = ("-at", "-id")
        verbose_name = _("server event")
        verbose_name_plural = _("server events")
        indexes = [models.Index(fields=("server", "-at"), name="sellers_serverevent_server_idx")]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=ServerEventKind.values), name="sellers_serverevent_kind_valid"
            ),
        ]

    def __str__(self) -> str:
        return gettext("%(server)s: %(event)s") % {"server": self.server, "event": self.get_kind_display()}


class ServerIsolationReport(models.Model):
    """A server's isolation reports, one row each time its agent's report changed, with the level
    derived from it then (sellers.isolation)."""

    server = models.ForeignKey(
        Server, on_delete=models.CASCADE, related_name="isolation_reports", verbose_name=_("server")
    )
    received_at = models.DateTimeField(_("received at"))
    digest = models.CharField(_("digest"), max_length=64)
    report = models.JSONField(_("report"))
    level = models.CharField(_("isolation level"), max_length=10, choices=IsolationLevel.choices)

    class Meta:
        ordering = ("-received_at", "-id")
        verbose_name = _("isolation report")
        verbose_name_plural = _("isolation reports")
        indexes = [models.Index(fields=("server", "-received_at"), name="sellers_isolation_server_idx")]
        constraints = [
            models.CheckConstraint(
                condition=Q(level__in=IsolationLevel.values), name="sellers_isolation_report_level_valid"
            ),
        ]

    def __str__(self) -> str:
        return gettext("Isolation report of %(server)s at %(moment)s") % {
            "server": self.server, "moment": formatting.datetime_zone(self.received_at),
        }


class ServerAvailabilityDay(models.Model):
    """One server's day: minutes it was listed (an active offer in the book) and, of those, minutes
    with a heartbeat. Counted once a minute by exchange.services.availability_count."""

    server = models.ForeignKey(
        Server, on_delete=models.CASCADE, related_name="availability", verbose_name=_("server")
    )
    day = models.DateField(_("day"))
    listed_minutes = models.PositiveSmallIntegerField(_("minutes listed"), default=0)
    heard_minutes = models.PositiveSmallIntegerField(_("minutes with heartbeats"), default=0)

    class Meta:
        ordering = ("-day",)
        verbose_name = _("availability of a day")
        verbose_name_plural = _("availability by day")
        constraints = [
            models.UniqueConstraint(fields=("server", "day"), name="sellers_availability_once_per_day"),
            models.CheckConstraint(
                condition=Q(heard_minutes__lte=F("listed_minutes")) & Q(listed_minutes__lte=1440),
                name="sellers_availability_minutes_within_day",
            ),
        ]

    def __str__(self) -> str:
        return gettext("%(server)s on %(day)s: heartbeats in %(heard)s of %(listed)s minutes listed") % {
            "server": self.server, "day": formatting.day(self.day),
            "heard": formatting.number(self.heard_minutes), "listed": formatting.number(self.listed_minutes),
        }


class AgentMonitor(models.Model):
    """The exchange's own watch over the agents, one row: when its once-a-minute check last ran and
    since when it has run without a gap. After an outage of the exchange no server is judged
    silent before the threshold has passed again since `up_since`."""

    SINGLETON_ID = 1

    id = models.PositiveSmallIntegerField(primary_key=True, default=SINGLETON_ID)
    last_run_at = models.DateTimeField(_("last run at"), null=True, blank=True)
    up_since = models.DateTimeField(_("running without a gap since"), null=True, blank=True)
    # The last minute counted into ServerAvailabilityDay: a minute is counted once.
    counted_minute = models.DateTimeField(_("last minute counted"), null=True, blank=True)

    class Meta:
        verbose_name = _("agent monitor")
        verbose_name_plural = _("agent monitor")
        constraints = [models.CheckConstraint(condition=Q(id=1), name="sellers_agentmonitor_singleton")]

    def __str__(self) -> str:
        return gettext("Agent monitor, last run %(moment)s") % {
            "moment": formatting.datetime_zone(self.last_run_at),
        }
