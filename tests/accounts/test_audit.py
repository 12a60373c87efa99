"""The operators' audit log and roles: what an entry records, that PostgreSQL keeps the log
append-only, the groups the migration creates, and the two guards every operator service calls
first (the role, the written reason)."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.apps import apps
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.db import IntegrityError, transaction

from accounts.exceptions import OperatorNotAllowed, ReasonRequired
from accounts.models import AuditAction, AuditEntry, Wallet
from accounts.roles import DECIDE_SELLER, FINANCE, MOVE_MONEY, OPERATE_MARKET, OPERATOR_APPS, SUPPORT
from accounts.services import audit_record, audit_snapshot, operator_require, reason_require
from tests.accounts.support import audit_log
from tests.factories import GpuModelFactory, UserFactory, WalletFactory, operator_make

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


# --- writing an entry ----------------------------------------------------------------------------


def test_an_entry_records_who_when_what_before_after_and_why(time_machine):
    time_machine.move_to(NOW, tick=False)
    operator = operator_make()
    wallet = WalletFactory(currency="EUR")

    entry = audit_record(
        actor=operator, action=AuditAction.WALLET_ADJUST, target=wallet, reason="Goodwill gesture",
        before={"balance": Decimal("10.00")}, after={"balance": Decimal("15.50"), "at": NOW},
    )

    stored = AuditEntry.objects.get(pk=entry.pk)
    assert stored.actor == operator
    assert stored.created_at == NOW
    assert stored.action == "wallet_adjust"
    assert stored.target_type == ContentType.objects.get_for_model(Wallet)
    assert stored.target_id == str(wallet.pk)
    assert stored.target_repr == str(wallet)
    # Decimals and datetimes go through Django's JSON encoder: exact text, never floats.
    assert stored.before == {"balance": "10.00"}
    assert stored.after == {"balance": "15.50", "at": "2026-12-01T09:30:00Z"}
    assert stored.reason == "Goodwill gesture"
    assert str(stored) == f"Balance adjusted: {wallet}"


def test_a_long_description_of_the_target_is_cut_to_the_column():
    gpu = GpuModelFactory(name="G" * 80)
    entry = audit_record(actor=operator_make(), action=AuditAction.GPU_MODEL_CHANGE, target=gpu)
    assert AuditEntry.objects.get(pk=entry.pk).target_repr == str(gpu)[:200]
    assert (entry.before, entry.after, entry.reason) == (None, None, "")


def test_an_unknown_action_is_refused_and_nothing_is_written():
    operator = operator_make()
    with pytest.raises(ValueError, match="Unknown audit action"):
        audit_record(actor=operator, action="wallet_empty", target=WalletFactory())
    assert not AuditEntry.objects.exists()


def test_snapshot_gives_plain_values_and_primary_keys_of_related_rows():
    wallet = WalletFactory(currency="GBP", balance=Decimal("0.00"))
    assert audit_snapshot(wallet, ("user", "currency", "balance")) == {
        "user": wallet.user_id, "currency": "GBP", "balance": Decimal("0.00")
    }


# --- append-only, enforced by PostgreSQL ---------------------------------------------------------


@pytest.fixture
def entry() -> AuditEntry:
    return audit_record(
        actor=operator_make(), action=AuditAction.MARKET_OPEN, target=WalletFactory(), reason="Launch",
        before={"is_open": False}, after={"is_open": True},
    )


def test_postgresql_refuses_to_update_an_entry(entry):
    before = audit_log()
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        AuditEntry.objects.filter(pk=entry.pk).update(reason="Nothing happened")
    assert audit_log() == before


def test_postgresql_refuses_to_save_a_changed_entry(entry):
    before = audit_log()
    entry.after = {"is_open": False}
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        entry.save()
    assert audit_log() == before


def test_postgresql_refuses_to_delete_an_entry(entry):
    before = audit_log()
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        AuditEntry.objects.filter(pk=entry.pk).delete()
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        AuditEntry.objects.all().delete()
    assert audit_log() == before


def test_new_entries_are_still_appended_after_a_refused_change(entry):
    with pytest.raises(IntegrityError), transaction.atomic():
        AuditEntry.objects.update(reason="")
    audit_record(actor=entry.actor, action=AuditAction.MARKET_CLOSE, target=WalletFactory())
    assert AuditEntry.objects.count() == 2


# --- the groups the migration made ---------------------------------------------------------------


def view_permissions() -> set[str]:
    """The view permission of every model of the apps operators look after."""
    return {
        f"{label}.view_{model._meta.model_name}"
        for label in OPERATOR_APPS
        for model in apps.get_app_config(label).get_models()
    }


def permissions_of(group: Group) -> set[str]:
    return {
        f"{permission.content_type.app_label}.{permission.codename}"
        for permission in group.permissions.select_related("content_type")
    }


def member_of(name: str, **fields):
    """A staff user put in the migration's group as it stands (operator_make would sync it first)."""
    fields.setdefault("is_staff", True)
    user = UserFactory(**fields)
    user.groups.add(Group.objects.get(name=name))
    return type(user).objects.get(pk=user.pk)  # no cached permissions


def test_the_migration_created_both_groups():
    assert set(Group.objects.filter(name__in=(SUPPORT, FINANCE)).values_list("name", flat=True)) == {
        "support", "finance"
    }


def test_both_groups_may_view_every_model_of_the_operator_apps():
    views = view_permissions()
    # Sanity: the apps' models are all there, the audit log and the ledger included.
    assert {"accounts.view_auditentry", "billing.view_ledgerentry", "exchange.view_rental",
            "sellers.view_sellerapplication", "catalog.view_gpumodel"} <= views
    for name in (SUPPORT, FINANCE):
        assert views <= permissions_of(Group.objects.get(name=name)), name


def test_support_decides_on_sellers_and_moves_no_money():
    assert permissions_of(Group.objects.get(name=SUPPORT)) == view_permissions() | {DECIDE_SELLER}
    support = member_of(SUPPORT)
    assert support.has_perm(DECIDE_SELLER)
    assert not support.has_perm(MOVE_MONEY)
    assert not support.has_perm(OPERATE_MARKET)
    assert not support.has_perm("catalog.change_gpumodel")
    assert not support.has_perm("billing.add_exchangerate")


def test_finance_moves_money_sets_rates_and_decides_on_no_seller():
    assert permissions_of(Group.objects.get(name=FINANCE)) == view_permissions() | {
        MOVE_MONEY, "billing.add_exchangerate", "billing.change_exchangerate"
    }
    finance = member_of(FINANCE)
    assert finance.has_perm(MOVE_MONEY)
    assert finance.has_perm("billing.change_exchangerate")
    assert not finance.has_perm(DECIDE_SELLER)
    assert not finance.has_perm(OPERATE_MARKET)
    assert not finance.has_perm("catalog.change_gpumodel")
    assert not finance.has_perm("accounts.change_wallet")


def test_no_group_changes_or_deletes_rows_directly():
    for name in (SUPPORT, FINANCE):
        codenames = {label.split(".")[1] for label in permissions_of(Group.objects.get(name=name))}
        assert not {codename for codename in codenames if codename.startswith(("delete_", "change_"))} - {
            "change_exchangerate"
        }, name


# --- the role guard --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "permission"),
    [(None, MOVE_MONEY), (None, OPERATE_MARKET), (FINANCE, MOVE_MONEY), (SUPPORT, DECIDE_SELLER)],
)
def test_an_active_staff_member_with_the_permission_passes(role, permission):
    operator_require(operator=operator_make(role), permission=permission)


def test_nobody_is_refused():
    with pytest.raises(OperatorNotAllowed) as refused:
        operator_require(operator=None, permission=MOVE_MONEY)
    assert refused.value.code == "operator_not_allowed"


def test_a_user_who_is_not_staff_is_refused_even_in_the_group():
    user = member_of(FINANCE, is_staff=False)
    assert user.has_perm(MOVE_MONEY)
    with pytest.raises(OperatorNotAllowed):
        operator_require(operator=user, permission=MOVE_MONEY)


def test_a_superuser_who_is_not_staff_is_refused():
    with pytest.raises(OperatorNotAllowed):
        operator_require(operator=UserFactory(is_superuser=True, is_staff=False), permission=MOVE_MONEY)


@pytest.mark.parametrize("role", [None, FINANCE])
def test_an_inactive_staff_member_is_refused(role):
    with pytest.raises(OperatorNotAllowed):
        operator_require(operator=operator_make(role, is_active=False), permission=MOVE_MONEY)


def test_staff_without_the_permission_is_refused():
    with pytest.raises(OperatorNotAllowed):
        operator_require(operator=UserFactory(is_staff=True), permission=DECIDE_SELLER)
    with pytest.raises(OperatorNotAllowed):
        operator_require(operator=operator_make(SUPPORT), permission=MOVE_MONEY)
    with pytest.raises(OperatorNotAllowed):
        operator_require(operator=operator_make(FINANCE), permission=DECIDE_SELLER)


# --- the reason guard ------------------------------------------------------------------------------


def test_the_reason_is_stripped():
    assert reason_require("  Bank statement 2026-12-01, line 14 \n") == "Bank statement 2026-12-01, line 14"


@pytest.mark.parametrize("reason", [None, "", "   ", "\n\t "])
def test_a_blank_reason_is_refused(reason):
    with pytest.raises(ReasonRequired) as refused:
        reason_require(reason)
    assert refused.value.code == "reason_required"
