"""Helpers the tests of every app share about accounts and the audit log."""

from accounts.models import AuditEntry


def audit_log() -> list[tuple]:
    """Every entry as stored, oldest first: what a refused action must leave as it was."""
    return list(
        AuditEntry.objects.order_by("pk").values_list(
            "pk", "actor_id", "action", "target_type_id", "target_id", "before", "after", "reason"
        )
    )
