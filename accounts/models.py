from allauth.mfa.models import Authenticator
from django.conf import settings
from django.contrib.auth.base_user import BaseUserManager
from django.contrib.auth.models import AbstractUser
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Q
from django.db.models.functions import Lower
from django.utils import timezone
from django.utils.translation import gettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from .time_zones import time_zone_validate


class UserManager(BaseUserManager):
    use_in_migrations = True

    def _create(self, email: str, password: str | None, **fields):
        if not email:
            raise ValueError("An email address is required.")
        user = self.model(email=self.normalize_email(email), **fields)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_user(self, email: str, password: str | None = None, **fields):
        fields.setdefault("is_staff", False)
        fields.setdefault("is_superuser", False)
        return self._create(email, password, **fields)

    def create_superuser(self, email: str, password: str | None = None, **fields):
        fields.update(is_staff=True, is_superuser=True)
        return self._create(email, password, **fields)


class User(AbstractUser):
    """A person with an account. The email address is the login; there is no username."""

    username = None
    email = models.EmailField(_("email address"), unique=True)

    USERNAME_FIELD = "email"
    REQUIRED_FIELDS: list[str] = []

    objects = UserManager()

    class Meta:
        verbose_name = _("user")
        verbose_name_plural = _("users")
        constraints = [
            models.UniqueConstraint(Lower("email"), name="accounts_user_email_ci_unique"),
        ]

    def __str__(self) -> str:
        return self.email


class BillingType(models.TextChoices):
    INDIVIDUAL = "individual", _("Individual")
    BUSINESS = "business", _("Business")


# The labels of a status carry a context naming what they qualify, so that French and Portuguese
# can agree with its gender and number (a bid "Annulée", a top-up "Annulé").
class VatIdStatus(models.TextChoices):
    NONE = "none", pgettext_lazy("VAT ID status", "No VAT ID")
    UNCHECKED = "unchecked", pgettext_lazy("VAT ID status", "Not checked yet")
    VALID = "valid", pgettext_lazy("VAT ID status", "Confirmed by VIES")
    INVALID = "invalid", pgettext_lazy("VAT ID status", "Rejected by VIES")
    UNKNOWN = "unknown", pgettext_lazy("VAT ID status", "VIES did not answer")


def low_balance_hours_default() -> int:
    """A new profile's low-balance warning threshold: the site's setting at the time."""
    return settings.LOW_BALANCE_WARNING_HOURS


LOW_BALANCE_HOURS_RANGE = (1, 720)


class Profile(models.Model):
    """Who the user is for invoices, and which language their emails speak."""

    user = models.OneToOneField(
        User, on_delete=models.CASCADE, related_name="profile", verbose_name=_("user")
    )
    name = models.CharField(_("full name"), max_length=200, blank=True)
    preferred_language = models.CharField(
        _("preferred language"), max_length=8, choices=settings.LANGUAGES, default="en"
    )
    billing_type = models.CharField(
        _("billing as"), max_length=12, choices=BillingType.choices, default=BillingType.INDIVIDUAL
    )
    billing_country = models.CharField(_("billing country"), max_length=2, blank=True)
    address = models.TextField(_("address"), blank=True)
    company_name = models.CharField(_("company name"), max_length=200, blank=True)
    vat_id = models.CharField(_("VAT ID"), max_length=20, blank=True)
    vat_id_status = models.CharField(
        _("VAT ID check"), max_length=10, choices=VatIdStatus.choices, default=VatIdStatus.NONE
    )
    vat_id_checked_at = models.DateTimeField(_("VAT ID checked at"), null=True, blank=True)
    # Every page shows times in it (accounts.middleware.TimeZoneMiddleware); proposed by the browser
    # at sign-up. IANA names, checked against the zone database the server has.
    time_zone = models.CharField(
        _("time zone"), max_length=64, default="UTC", validators=[time_zone_validate]
    )
    # Warned by email (billing.services.warnings) and on the account page when the balance covers
    # fewer hours than this of the running rentals.
    low_balance_warning_hours = models.PositiveSmallIntegerField(
        _("low-balance warning (hours)"), default=low_balance_hours_default
    )

    class Meta:
        verbose_name = _("profile")
        verbose_name_plural = _("profiles")
        constraints = [
            models.CheckConstraint(
                condition=~Q(billing_type="business") | ~Q(company_name=""),
                name="accounts_profile_business_has_company",
            ),
            models.CheckConstraint(condition=~Q(time_zone=""), name="accounts_profile_time_zone_set"),
            models.CheckConstraint(
                condition=Q(low_balance_warning_hours__gte=LOW_BALANCE_HOURS_RANGE[0])
                & Q(low_balance_warning_hours__lte=LOW_BALANCE_HOURS_RANGE[1]),
                name="accounts_profile_low_balance_hours_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name or self.user.email


class Currency(models.TextChoices):
    EUR = "EUR", _("Euro")
    USD = "USD", _("US dollar")
    GBP = "GBP", _("Pound sterling")


class Wallet(models.Model):
    """A user's prepaid balance. Created at the first top-up, whose currency it keeps for good.

    `balance` caches the sum of the wallet's ledger entries; billing updates it under a row
    lock in the same database transaction as the entries, and the database refuses a
    negative value.
    """

    user = models.OneToOneField(
        User, on_delete=models.PROTECT, related_name="wallet", verbose_name=_("user")
    )
    currency = models.CharField(_("currency"), max_length=3, choices=Currency.choices)
    balance = models.DecimalField(_("balance"), max_digits=14, decimal_places=2, default=0)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    # When the buyer was last told the balance runs low (billing.services.warnings); cleared once a later
    # check finds the balance covering the warning threshold again, so that the next fall warns anew.
    low_balance_warned_at = models.DateTimeField(_("low balance warned at"), null=True, blank=True)

    class Meta:
        verbose_name = _("wallet")
        verbose_name_plural = _("wallets")
        constraints = [
            models.CheckConstraint(condition=Q(balance__gte=0), name="accounts_wallet_balance_not_negative"),
            models.CheckConstraint(
                condition=Q(currency__in=["EUR", "USD", "GBP"]), name="accounts_wallet_currency_known"
            ),
        ]

    def __str__(self) -> str:
        return gettext("Wallet of %(owner)s (%(currency)s)") % {
            "owner": self.user.email, "currency": self.currency,
        }


class AuditAction(models.TextChoices):
    """Every lever an operator pulls; each is recorded by the service that pulls it."""

    APPLICATION_APPROVE = "application_approve", _("Seller application approved")
    APPLICATION_REJECT = "application_reject", _("Seller application rejected")
    APPLICATION_ASK_INFO = "application_ask_info", _("Information asked of an applicant")
    SELLER_SUSPEND = "seller_suspend", _("Seller suspended")
    SELLER_REINSTATE = "seller_reinstate", _("Seller reinstated")
    SERVER_ACTIVATE = "server_activate", _("Server activated")
    SERVER_RETIRE = "server_retire", _("Server retired")
    MARKET_OPEN = "market_open", _("Market opened")
    MARKET_CLOSE = "market_close", _("Market closed")
    TOP_UP_CREDIT = "top_up_credit", _("Bank transfer credited")
    TOP_UP_REFUND = "top_up_refund", _("Top-up refunded")
    WALLET_ADJUST = "wallet_adjust", _("Balance adjusted")
    PAYOUT_PAY = "payout_pay", _("Payout marked paid")
    PAYOUT_REJECT = "payout_reject", _("Payout rejected")
    RENTAL_END = "rental_end", _("Rental ended by an operator")
    GPU_MODEL_CHANGE = "gpu_model_change", _("GPU specifications changed")
    EXCHANGE_RATE_CHANGE = "exchange_rate_change", _("Exchange rate set")
    EXCHANGE_RATES_LOAD = "exchange_rates_load", _("Exchange rates loaded from a file")
    USER_CHANGE = "user_change", _("User account or roles changed")


class AuditEntry(models.Model):
    """One operator action: who, when, on what, the state before and after, and why.

    Written by the service that performs the action, in the same database transaction, so an
    action without its entry cannot commit. Append-only: PostgreSQL refuses UPDATE and DELETE on
    this table (migration accounts 0005), and the admin shows it read-only."""

    created_at = models.DateTimeField(_("when"), default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        User, on_delete=models.PROTECT, related_name="audit_entries", verbose_name=_("operator")
    )
    action = models.CharField(_("action"), max_length=40, choices=AuditAction.choices)
    target_type = models.ForeignKey(
        "contenttypes.ContentType", on_delete=models.PROTECT, verbose_name=_("object type")
    )
    target_id = models.CharField(_("object id"), max_length=64)
    target_repr = models.CharField(_("object"), max_length=200)
    before = models.JSONField(_("before"), null=True, blank=True, encoder=DjangoJSONEncoder)
    after = models.JSONField(_("after"), null=True, blank=True, encoder=DjangoJSONEncoder)
    reason = models.TextField(_("reason"), blank=True)

    class Meta:
        ordering = ("-created_at", "-id")
        verbose_name = _("audit entry")
        verbose_name_plural = _("audit log")
        indexes = [
            models.Index(fields=("target_type", "target_id"), name="accounts_audit_target_idx"),
        ]

    def __str__(self) -> str:
        # The object is named as it was when the action was recorded, in the operator's language then.
        return gettext("%(action)s: %(object)s") % {
            "action": self.get_action_display(), "object": self.target_repr,
        }


class ApiTokenScope(models.TextChoices):
    READ = "read", _("Read: your balance, history, invoices, orders and rentals")
    TRADE = "trade", _("Trade: place and cancel orders, stop rentals, manage SSH keys")
    SELL = "sell", _("Sell: your seller's servers, offers, rentals and earnings")


class ApiToken(models.Model):
    """A secret that lets a program act for its user through the API, within its scopes.

    Only the SHA-256 of the secret is kept (the secret is random and long, so a slow hash would
    add nothing); `prefix` is its first characters, shown to recognise it. A `sell` token names the
    one seller it acts for, and acts only while its user is still a member of it."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens", verbose_name=_("user")
    )
    name = models.CharField(_("name"), max_length=100)
    prefix = models.CharField(_("prefix"), max_length=12)
    secret_hash = models.CharField(_("secret hash"), max_length=64, unique=True)
    can_read = models.BooleanField(_("read"), default=False)
    can_trade = models.BooleanField(_("trade"), default=False)
    can_sell = models.BooleanField(_("sell"), default=False)
    seller = models.ForeignKey(
        "sellers.Seller", on_delete=models.CASCADE, null=True, blank=True, related_name="api_tokens",
        verbose_name=_("seller"),
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    expires_at = models.DateTimeField(_("expires at"), null=True, blank=True)
    revoked_at = models.DateTimeField(_("revoked at"), null=True, blank=True)
    last_used_at = models.DateTimeField(_("last used at"), null=True, blank=True)
    last_used_address = models.GenericIPAddressField(_("last used from"), null=True, blank=True)

    class Meta:
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")
        constraints = [
            models.CheckConstraint(
                condition=Q(can_read=True) | Q(can_trade=True) | Q(can_sell=True),
                name="accounts_apitoken_has_scope",
            ),
            models.CheckConstraint(
                condition=Q(can_sell=True, seller__isnull=False) | Q(can_sell=False, seller__isnull=True),
                name="accounts_apitoken_sell_names_seller",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def scopes(self) -> list[str]:
        granted = {ApiTokenScope.READ: self.can_read, ApiTokenScope.TRADE: self.can_trade,
                   ApiTokenScope.SELL: self.can_sell}
        return [str(scope) for scope, allowed in granted.items() if allowed]

    def is_usable(self, now) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)

    def state(self, now) -> str:
        """What the tokens page and the admin show: `revoked`, `expired` or `active`."""
        if self.revoked_at is not None:
            return "revoked"
        return "active" if self.is_usable(now) else "expired"


class TwoFactorAuthenticator(Authenticator):
    """allauth's record of a user's second factor, as the admin shows it: a proxy, so that its names
    come from our catalogs (allauth gives the model and its fields no translated names)."""

    class Meta:
        proxy = True
        verbose_name = _("two-factor authenticator")
        verbose_name_plural = _("two-factor authenticators")
