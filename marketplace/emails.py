"""Every email EverXCloud sends goes through `email_send`, and through the outbox.

`email_send` resolves the recipient's language once (their profile's, else the given one, else the
site's default), renders `<template>_subject.txt`, `<template>_message.txt` and, where it exists,
`<template>_message.html` in that language, and writes the result as an `OutboxEmail` row in the
current database transaction, under the idempotency key of the event it tells of: the email
commits or rolls back with the change that caused it, and the same event written twice is one
email. After commit it nudges a Celery task to send soon; a broker that is down only delays it,
since the beat runs the same sender every few seconds. Plain-text templates are rendered without
HTML escaping, so a subject or a body never shows `&amp;` or `&#x27;`.

`outbox_send_pending` is the sender: it claims pending rows one at a time with SELECT ... FOR
UPDATE SKIP LOCKED, in id order, sends each and marks it sent in the same transaction, so two
workers never send one row twice and a row sent is never sent again. A mail server that refuses
leaves the row pending with its error, tried again later with a growing delay.

This module is the bottom layer: it knows a user only as an object with `email` and, maybe, a
`profile` with `preferred_language`, and never imports an app above it.
"""

import logging
import re
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMultiAlternatives
from django.db import transaction
from django.template import Context, TemplateDoesNotExist
from django.template.loader import get_template
from django.utils import timezone, translation
from kombu.exceptions import OperationalError

# The module, not its names: the task calls the sender back (a cycle of modules).
from . import tasks
from .models import OutboxEmail

logger = logging.getLogger(__name__)

SITE_NAME = "EverXCloud"
# After the n-th failed attempt a row waits RETRY_FIRST * 2**(n-1), at most RETRY_LONGEST.
RETRY_FIRST = timedelta(seconds=30)
RETRY_LONGEST = timedelta(hours=1)
_LAYOUT_SPACE = re.compile(r"[ \t\r\n]+")

# What the templates may name without each caller passing it.
Ctx = Mapping[str, Any] | Callable[[], Mapping[str, Any]]


def absolute_url(path: str) -> str:
    """A link for an email: the site's address in front of `path` when the site has one."""
    return settings.SITE_URL + path if settings.SITE_URL else path


def email_language(*, user: Any = None, email: str = "", fallback: str = "") -> str:
    """The language a recipient reads: their profile's; for an address with no user behind
    it, `fallback`; else the site's default."""
    if user is None and email:
        user = get_user_model().objects.filter(email__iexact=email).select_related("profile").first()
    profile = getattr(user, "profile", None) if user is not None else None
    language = getattr(profile, "preferred_language", "") or fallback or settings.LANGUAGE_CODE
    return language if language in dict(settings.LANGUAGES) else settings.LANGUAGE_CODE


def _render(name: str, context: Mapping[str, Any], *, autoescape: bool) -> str:
    template = get_template(name)
    # The Django backend's template takes a Context, whose autoescape we set per kind of file.
    return template.template.render(Context(dict(context), autoescape=autoescape))


def email_render(*, template: str, context: Mapping[str, Any]) -> tuple[str, str, str]:
    """Subject (one line), plain-text body and HTML body ("" when the template has none), in
    the language active now. A `subject_prefix` in the context goes before the subject (allauth's
    templates leave the brand to a prefix)."""
    values = {"site_name": SITE_NAME, "site_url": settings.SITE_URL, **context}
    # The template's line breaks and indentation become single spaces; a no-break space stays
    # (French writes "EverXCloud : ..." with one), which str.split() would have broken.
    subject = _render(f"{template}_subject.txt", values, autoescape=False)
    subject = _LAYOUT_SPACE.sub(" ", subject).strip()
    subject = values.get("subject_prefix", "") + subject
    body = _render(f"{template}_message.txt", values, autoescape=False).strip() + "\n"
    try:
        html = _render(f"{template}_message.html", values, autoescape=True)
    except TemplateDoesNotExist:
        html = ""
    return subject, body, html


def email_send(
    *, template: str, context: Ctx, key: str, user: Any = None, email: str = "", language: str = ""
) -> None:
    """Write one email to `user` (or to `email`, an address that may have no account yet) in the
    outbox, in the caller's transaction, and have it sent after commit.

    `key` names the event the email tells of, e.g. "rental-ended:123" (one key per recipient): a
    second email with a key already written writes nothing. `context` is a mapping, or a function
    returning one, called in the recipient's language (for links and amounts that must be written
    in it). `language` is used only where the recipient has no profile saying otherwise.
    """
    recipient = email or user.email
    language = email_language(user=user, email="" if user is not None else recipient, fallback=language)
    with translation.override(language):
        values = context() if callable(context) else context
        subject, body, html = email_render(template=template, context=values)
    # INSERT ... ON CONFLICT DO NOTHING: the same key twice, even from two transactions at once,
    # is one row, and the caller's transaction goes on either way.
    OutboxEmail.objects.bulk_create(
        [OutboxEmail(key=key, recipient=recipient, language=language, subject=subject, body=body, html=html)],
        ignore_conflicts=True,
    )
    _outbox_nudge_after_commit()


class _Nudge:
    """The nudge of one transaction, run once it commits."""

    def __init__(self) -> None:
        self.done = False

    def __call__(self) -> None:
        self.done = True
        _outbox_nudge()


def _outbox_nudge_after_commit() -> None:
    """Queue one nudge for when the current transaction commits, however many emails it writes (a
    charging run may end hundreds of rentals, and a broker that is away makes each nudge wait for
    its connection timeout). Django keeps the callbacks of the transaction in `run_on_commit`,
    without those of savepoints rolled back; a nudge already run there (tests capture callbacks
    without committing) does not count."""
    pending = transaction.get_connection().run_on_commit
    if not any(isinstance(callback, _Nudge) and not callback.done for _sids, callback, _robust in pending):
        transaction.on_commit(_Nudge(), robust=True)


def _outbox_nudge() -> None:
    """Ask a worker to send what is pending now. A broker that is down is logged and ignored: the
    rows are committed, and the beat's run of the same sender sends them once it is back."""
    try:
        # No publish retries: a broker that is away costs one connection timeout, no more.
        tasks.outbox_send.apply_async(retry=False, expires=tasks.OUTBOX_NUDGE_EXPIRES)
    except OperationalError:
        logger.warning("The broker is unreachable: the outbox is sent by the beat's next run.", exc_info=True)


def _outbox_claim(*, now: datetime) -> OutboxEmail | None:
    """Lock the oldest pending row that is due, skipping rows another sender holds."""
    return (
        OutboxEmail.objects.select_for_update(skip_locked=True)
        .filter(sent_at__isnull=True, next_attempt_at__lte=now)
        .order_by("id")
        .first()
    )


def _outbox_deliver(row: OutboxEmail, *, now: datetime) -> bool:
    """Send the row's email and record the attempt: sent, or the error and when to try again."""
    message = EmailMultiAlternatives(row.subject, row.body, None, [row.recipient])
    if row.html:
        message.attach_alternative(row.html, "text/html")
    row.attempts += 1
    try:
        message.send()
    except SoftTimeLimitExceeded:
        raise  # the task's time is up: this row's transaction rolls back, untouched
    except Exception as error:  # any refusal (SMTP, network, backend): tried again later
        row.last_error = f"{type(error).__name__}: {error}"[:2000]
        row.next_attempt_at = now + min(RETRY_FIRST * 2 ** (row.attempts - 1), RETRY_LONGEST)
        logger.warning("Email %s (%s) not sent, attempt %d: %s", row.pk, row.key, row.attempts, error)
        sent = False
    else:
        row.sent_at = now
        sent = True
    row.save(update_fields=["attempts", "last_error", "next_attempt_at", "sent_at"])
    return sent


def outbox_send_pending(*, limit: int) -> dict[str, int]:
    """Send up to `limit` pending emails that are due, oldest first; returns how many were "sent"
    and how many "failed" (left pending with their error and a later attempt time).

    Each row is claimed, sent and marked in a transaction of its own: a row is locked while it is
    sent, another sender skips it (SKIP LOCKED), and once marked no run sends it again. A worker
    that dies between sending and committing leaves the row pending, so it may go twice then, never
    zero times. A refusal ends the run: a mail server that is down would refuse the next ones too,
    each after its own timeout. SQLite (the embedded default) has no row locks but serialises
    writers, so there too one sender at a time holds a row."""
    counts = Counter(sent=0, failed=0)
    for _ in range(limit):
        with transaction.atomic():
            now = timezone.now()
            row = _outbox_claim(now=now)
            if row is None:
                break
            sent = _outbox_deliver(row, now=now)
        counts["sent" if sent else "failed"] += 1
        if not sent:
            break
    return dict(counts)


def outbox_prune(*, older_than: timedelta) -> int:
    """Delete the emails sent more than `older_than` ago (the admin keeps the recent ones to look
    at); pending rows are never deleted, whatever their age. Returns how many went."""
    sent_before = timezone.now() - older_than
    deleted, _ = OutboxEmail.objects.filter(sent_at__isnull=False, sent_at__lt=sent_before).delete()
    return deleted
