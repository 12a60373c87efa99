"""Idempotency keys of the API's writes (docs/api.md): the first request with a key does the work
and its answer is kept; the same request again gets that answer; the same key on another request
is refused. The rows are `IdempotencyRecord`s; the API's middleware calls these services."""

import hashlib
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from .models import IdempotencyRecord

# How long an answer is replayed, and kept (the daily prune deletes older rows).
IDEMPOTENCY_KEEP = timedelta(hours=24)
# A row still unanswered after this long belongs to a request that died without cleaning up (a
# killed worker): the next request with its key takes it over. Longer than any request may run.
IDEMPOTENCY_ABANDONED_AFTER = timedelta(minutes=2)
# A second request while the first still runs waits for it, polling this often, this long.
IDEMPOTENCY_POLL_SECONDS = 0.05
IDEMPOTENCY_WAIT_SECONDS = 30.0

MAX_KEY_LENGTH = 255


def idempotency_key_valid(key: str) -> bool:
    """1 to 255 printable ASCII characters (space to tilde)."""
    return 1 <= len(key) <= MAX_KEY_LENGTH and all(" " <= char <= "~" for char in key)


def body_fingerprint(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


@dataclass(frozen=True)
class Claim:
    """What a request with a key does next: `run` it (it holds the row), `replay` the stored
    answer, or refuse it because the key named another request (`reused`) or because the first
    request is still running after the wait (`busy`)."""

    outcome: str  # "run" | "replay" | "reused" | "busy"
    record: IdempotencyRecord | None = None


def _same_request(record: IdempotencyRecord, *, method: str, path: str, body_sha256: str) -> bool:
    return (record.method, record.path, record.body_sha256) == (method, path, body_sha256)


def _insert(*, token_id: int, key: str, method: str, path: str, body_sha256: str) -> IdempotencyRecord | None:
    """The new row (this request runs), or None when one with this key exists."""
    try:
        with transaction.atomic():
            return IdempotencyRecord.objects.create(
                token_id=token_id, key=key, method=method, path=path, body_sha256=body_sha256
            )
    except IntegrityError:
        return None


def _abandoned_delete(*, record: IdempotencyRecord, now: datetime) -> None:
    """Remove an unanswered row whose request died (only that very row, still unanswered)."""
    if now - record.created_at > IDEMPOTENCY_ABANDONED_AFTER:
        IdempotencyRecord.objects.filter(pk=record.pk, completed=False).delete()


def idempotency_claim(
    *, token_id: int, key: str, method: str, path: str, body: bytes, wait_seconds: float | None = None,
) -> Claim:
    """Claim the key for this request, or say why not. Runs in autocommit (no transaction of the
    caller's around it): the row must be visible to a concurrent request at once."""
    body_sha256 = body_fingerprint(body)
    wait = IDEMPOTENCY_WAIT_SECONDS if wait_seconds is None else wait_seconds
    deadline = time.monotonic() + wait
    while True:
        record = _insert(token_id=token_id, key=key, method=method, path=path, body_sha256=body_sha256)
        if record is not None:
            return Claim("run", record)
        now = timezone.now()
        record = IdempotencyRecord.objects.filter(
            token_id=token_id, key=key, created_at__gt=now - IDEMPOTENCY_KEEP
        ).first()
        if record is None:
            # Expired but not yet pruned, or released by a first request that failed: start over.
            IdempotencyRecord.objects.filter(
                token_id=token_id, key=key, created_at__lte=now - IDEMPOTENCY_KEEP
            ).delete()
            if time.monotonic() >= deadline:
                return Claim("busy")
            continue
        if not _same_request(record, method=method, path=path, body_sha256=body_sha256):
            return Claim("reused", record)
        if record.completed:
            return Claim("replay", record)
        _abandoned_delete(record=record, now=now)
        if time.monotonic() >= deadline:
            return Claim("busy", record)
        time.sleep(IDEMPOTENCY_POLL_SECONDS)


def idempotency_complete(*, record: IdempotencyRecord, status: int, content_type: str, body: bytes) -> None:
    """Keep the first request's answer for the requests that repeat it."""
    IdempotencyRecord.objects.filter(pk=record.pk).update(
        completed=True, status=status, content_type=content_type, response_body=body
    )


def idempotency_release(*, record: IdempotencyRecord) -> None:
    """The first request failed on our side (5xx, an exception): forget it, so a retry runs."""
    IdempotencyRecord.objects.filter(pk=record.pk, completed=False).delete()


def idempotency_records_prune(*, now: datetime | None = None) -> int:
    """Delete the rows older than the replay window. Safe to run twice, or while requests run."""
    now = now or timezone.now()
    deleted, _by_model = IdempotencyRecord.objects.filter(created_at__lte=now - IDEMPOTENCY_KEEP).delete()
    return deleted
