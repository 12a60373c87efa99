from decimal import Decimal

import pytest
from django.contrib import admin
from django.test import RequestFactory

from billing.admin import LedgerEntryInline
from billing.ledger import ledger_account_system, ledger_post
from billing.models import ExchangeRate, LedgerAccount, LedgerEntry, LedgerTransaction
from tests.factories import ExchangeRateFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser_request():
    request = RequestFactory().get("/admin/")
    request.user = UserFactory(is_staff=True, is_superuser=True)
    return request


@pytest.fixture
def posted():
    adjustments = ledger_account_system(kind=LedgerAccount.Kind.ADJUSTMENTS, currency="EUR")
    revenue = ledger_account_system(kind=LedgerAccount.Kind.PLATFORM_REVENUE, currency="EUR")
    return ledger_post(
        idempotency_key="k", kind="adjustment", description="",
        lines=[(adjustments, Decimal("1.00")), (revenue, Decimal("-1.00"))],
    ).transaction


@pytest.mark.parametrize("model", [LedgerAccount, LedgerTransaction, LedgerEntry])
def test_the_ledger_admins_are_read_only_even_for_superusers(superuser_request, posted, model):
    model_admin = admin.site._registry[model]
    obj = model.objects.first()
    assert model_admin.has_view_permission(superuser_request, obj)
    assert not model_admin.has_add_permission(superuser_request)
    assert not model_admin.has_change_permission(superuser_request, obj)
    assert not model_admin.has_delete_permission(superuser_request, obj)


def test_entries_show_inline_on_their_transaction_read_only(superuser_request, posted):
    model_admin = admin.site._registry[LedgerTransaction]
    inlines = model_admin.get_inline_instances(superuser_request, posted)
    assert [type(inline) for inline in inlines] == [LedgerEntryInline]
    inline = inlines[0]
    assert not inline.has_add_permission(superuser_request, posted)
    assert not inline.has_change_permission(superuser_request, posted)
    assert not inline.has_delete_permission(superuser_request, posted)


def test_exchange_rates_are_editable_until_the_ledger_uses_them(superuser_request):
    model_admin = admin.site._registry[ExchangeRate]
    rate = ExchangeRateFactory()
    assert model_admin.has_add_permission(superuser_request)
    assert model_admin.has_change_permission(superuser_request, rate)
    assert not model_admin.has_delete_permission(superuser_request, rate)  # a deletion is not audited
    assert "rate" not in model_admin.get_readonly_fields(superuser_request, rate)

    adjustments = ledger_account_system(kind=LedgerAccount.Kind.FX, currency="EUR")
    revenue = ledger_account_system(kind=LedgerAccount.Kind.PLATFORM_REVENUE, currency="EUR")
    ledger_post(
        idempotency_key="converted", kind="charge", description="", fx_rate=rate,
        lines=[(adjustments, Decimal("-2.65")), (revenue, Decimal("2.65"))],
    )
    # The rate in use is shown read-only, as a number in the page's language (a display named "rate").
    readonly = model_admin.get_readonly_fields(superuser_request, rate)
    shown = {getattr(field, "__name__", field) for field in readonly}
    assert {"currency", "rate", "valid_from"} <= shown
    assert not model_admin.has_delete_permission(superuser_request, rate)
