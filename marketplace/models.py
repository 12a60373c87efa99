"""The outbox: every email EverXCloud sends, as a row written in the same database transaction as
the change it tells of (`marketplace.emails.email_send`), so that it commits or rolls back with
that change, and sent afterwards by `marketplace.emails.outbox_send_pending`.

A row is pending while `sent_at` is empty. Its `key` names the event it tells of
("rental-ended:123"): the same event written twice is one row, so one email.
"""

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class OutboxStatus(models.TextChoices):
    """Where an outbox row stands, as operators read it (derived from `sent_at` and `last_error`)."""

    PENDING = "pending", _("Pending")
    SENT = "sent", _("Sent")
    FAILED = "failed", _("Failed, will be retried")

    @classmethod
    def condition(cls, status: str) -> Q:
        return {
            cls.PENDING: Q(sent_at__isnull=True, last_error=""),
            cls.SENT: Q(sent_at__isnull=False),
            cls.FAILED: Q(sent_at__isnull=True) & ~Q(last_error=""),
        }[status]


class OutboxEmail(models.Model):
    """One email, rendered in its recipient's language when its cause was written."""

    key = models.CharField(_("idempotency key"), max_length=200)
    recipient = models.EmailField(_("recipient"), max_length=254)
    language = models.CharField(_("language"), max_length=8)
    subject = models.TextField(_("email subject"))
    body = models.TextField(_("email text"))
    html = models.TextField(_("email HTML"), blank=True)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    # When the sender may try it (again): creation, then later after each failure (backoff).
    next_attempt_at = models.DateTimeField(_("next attempt at"), default=timezone.now)
    sent_at = models.DateTimeField(_("sent at"), null=True, blank=True)
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    last_error = models.TextField(_("last error"), blank=True)

    class Meta:
        verbose_name = _("outgoing email")
        verbose_name_plural = _("outgoing emails")
        constraints = [
            models.UniqueConstraint(fields=("key",), name="marketplace_outbox_key_unique"),
            models.CheckConstraint(condition=~Q(key=""), name="marketplace_outbox_key_not_empty"),
            models.CheckConstraint(condition=~Q(recipient=""), name="marketplace_outbox_has_recipient"),
            # Sent means tried: a row is never marked sent without an attempt.
            models.CheckConstraint(
                condition=Q(sent_at__isnull=True) | Q(attempts__gte=1), name="marketplace_outbox_sent_tried"
            ),
        ]
        indexes = [
            # What the sender claims: the pending rows, oldest first, however many were sent before.
            models.Index(
                fields=("id",), condition=Q(sent_at__isnull=True), name="marketplace_outbox_pending_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} → {self.recipient}"

    @property
    def status(self) -> str:
        """Sent; failed (pending, its last attempt refused); or pending (not tried yet)."""
        if self.sent_at is not None:
            return OutboxStatus.SENT
        return OutboxStatus.FAILED if self.last_error else OutboxStatus.PENDING



class IdempotencyRecord(models.Model):
    """The first answer to an API write sent with an `Idempotency-Key` (docs/api.md), kept 24 hours
    so that the same request sent again gets the same answer instead of doing the work twice.

    A row exists from the moment the first request starts (`completed` false) until it answered;
    a first request that failed with a 5xx or crashed leaves no row, so a retry runs afresh.
    `token_id` is the API token's id, not a foreign key: this app sits below accounts, and a row
    lives one day at most."""

    token_id = models.BigIntegerField(_("API token"))
    key = models.CharField(_("idempotency key"), max_length=255)
    method = models.CharField(_("method"), max_length=10)
    path = models.TextField(_("path"))
    body_sha256 = models.CharField(_("body SHA-256"), max_length=64)
    completed = models.BooleanField(_("completed"), default=False)
    status = models.PositiveSmallIntegerField(_("status"), null=True, blank=True)
    content_type = models.CharField(_("content type"), max_length=200, blank=True)
    response_body = models.BinaryField(_("response body"), default=b"")
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    class Meta:
        verbose_name = _("idempotency record")
        verbose_name_plural = _("idempotency records")
        constraints = [
            models.UniqueConstraint(
                fields=("token_id", "key"), name="marketplace_idempotency_token_key_unique"
            ),
            models.CheckConstraint(condition=~Q(key=""), name="marketplace_idempotency_key_not_empty"),
            # An answered row holds its answer's status.
            models.CheckConstraint(
                condition=Q(completed=False) | Q(status__isnull=False),
                name="marketplace_idempotency_completed_has_status",
            ),
        ]
        indexes = [models.Index(fields=("created_at",), name="marketplace_idem_age_idx")]

    def __str__(self) -> str:
        return f"{self.method} {self.path} ({self.key})"
