"""The daily VIES refresh: EU VAT IDs whose answer expires within a day (VIES_VALID_FOR_DAYS, 30 by
default: checked 29 days ago or more), or never answered, are asked again."""

from datetime import UTC, datetime, timedelta

import pytest

from accounts import services
from accounts.models import VatIdStatus
from accounts.services import vat_ids_vies_refresh
from accounts.tasks import vat_ids_refresh
from tests.factories import ProfileFactory

pytestmark = pytest.mark.django_db

NOW = datetime(2027, 3, 15, 4, 7, tzinfo=UTC)


def profile(country="PT", vat_id="PT501964843", status=VatIdStatus.VALID, checked_days_ago=1):
    checked_at = NOW - timedelta(days=checked_days_ago) if checked_days_ago is not None else None
    return ProfileFactory(
        billing_type="business", company_name="Acme", billing_country=country, vat_id=vat_id,
        vat_id_status=status, vat_id_checked_at=checked_at,
    )


@pytest.fixture
def profiles():
    return {
        "fresh": profile(),
        "stale": profile(checked_days_ago=31),
        "stale_invalid": profile(status=VatIdStatus.INVALID, checked_days_ago=45),
        "unknown": profile(status=VatIdStatus.UNKNOWN, checked_days_ago=0),
        "unchecked": profile(status=VatIdStatus.UNCHECKED, checked_days_ago=None),
        "twenty_nine_days": profile(checked_days_ago=29),
        "twenty_eight_days": profile(checked_days_ago=28),
        "outside_eu": profile(country="GB", vat_id="GB980780684", checked_days_ago=90),
        "no_vat_id": profile(vat_id="", status=VatIdStatus.NONE, checked_days_ago=None),
    }


def test_stale_and_unanswered_eu_vat_ids_are_queued_after_commit(
    profiles, monkeypatch, django_capture_on_commit_callbacks
):
    asked = []
    monkeypatch.setattr(services, "_vies_says", lambda number: asked.append(number) or True)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        queued = vat_ids_vies_refresh(now=NOW)

    refreshed = ("stale", "stale_invalid", "unknown", "unchecked", "twenty_nine_days")
    expected = [profiles[name].pk for name in refreshed]
    assert queued == sorted(expected)
    assert len(callbacks) == 5
    assert len(asked) == 5
    for name in refreshed:
        profiles[name].refresh_from_db()
        assert profiles[name].vat_id_status == VatIdStatus.VALID, name
    profiles["outside_eu"].refresh_from_db()
    assert profiles["outside_eu"].vat_id_checked_at == NOW - timedelta(days=90)


def test_nothing_to_refresh_queues_nothing(django_capture_on_commit_callbacks):
    profile()
    with django_capture_on_commit_callbacks() as callbacks:
        assert vat_ids_vies_refresh(now=NOW) == []
    assert callbacks == []


def test_the_daily_task_counts_what_it_queued(profiles, monkeypatch, time_machine):
    time_machine.move_to(NOW, tick=False)
    monkeypatch.setattr(services, "_vies_says", lambda number: None)
    assert vat_ids_refresh.name == "accounts.vat_ids_refresh"
    assert vat_ids_refresh.apply().get() == 5


def test_the_refresh_follows_how_long_an_answer_lasts(settings, django_capture_on_commit_callbacks):
    settings.VIES_VALID_FOR_DAYS = 10
    expiring = profile(checked_days_ago=9)
    profile(checked_days_ago=8)  # its answer confirms the number two more days
    with django_capture_on_commit_callbacks():
        assert vat_ids_vies_refresh(now=NOW) == [expiring.pk]
