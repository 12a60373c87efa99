"""The profile's time zone (proposed by the browser at sign-up, shown on every page with its
abbreviation) and the buyer's own low-balance warning threshold."""

from datetime import UTC, datetime

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone, translation
from django.utils.html import escape

from accounts.models import Profile, User
from marketplace import formatting
from tests.billing.support import paid_invoice, signed_in
from tests.factories import ProfileFactory

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-Passw0rd-for-tests"
MOMENT = datetime(2026, 12, 3, 14, 5, tzinfo=UTC)


def portuguese(message: str) -> str:
    with translation.override("pt"):
        return translation.gettext(message)


def sign_up(client, language: str, **extra):
    return client.post(
        f"/{language}/account/signup/",
        {"email": "lea@example.com", "password1": PASSWORD, "password2": PASSWORD, **extra},
    )


def profile_form(profile: Profile, **overrides):
    data = {
        "name": "Ana Silva", "preferred_language": "pt", "billing_type": "individual",
        "billing_country": "PT", "address": "Rua Augusta 1, Lisboa", "company_name": "", "vat_id": "",
        "time_zone": profile.time_zone, "low_balance_warning_hours": str(profile.low_balance_warning_hours),
    }
    data.update(overrides)
    return data


# --- the formatting helper --------------------------------------------------------------------------


@pytest.mark.parametrize(("language", "zone", "expected"), [
    ("en", "Europe/Lisbon", "3 Dec 2026, 14:05 WET"),
    ("fr", "Europe/Paris", "3 déc. 2026, 15:05 CET"),
    ("pt", "America/New_York", "03/12/2026, 09:05 EST"),
])
def test_a_moment_is_written_in_the_zone_with_its_abbreviation(language, zone, expected):
    text = formatting.datetime_zone(MOMENT, language=language, zone=zone)
    assert text.replace("\u202f", " ").replace("\u00a0", " ") == expected or text.endswith(
        expected.rsplit(" ", 2)[-2] + " " + expected.rsplit(" ", 1)[-1]
    )
    assert text.endswith(expected.rsplit(" ", 1)[-1])


def test_the_active_zone_is_the_default():
    with timezone.override("Europe/Paris"):
        assert formatting.datetime_zone(MOMENT, language="en").endswith("15:05 CET")
    assert formatting.day(MOMENT, language="pt") == "3 de dezembro de 2026"
    assert formatting.datetime_zone(None) == formatting.NO_FIGURE


# --- sign-up --------------------------------------------------------------------------------------


def test_sign_up_keeps_the_browsers_time_zone(client):
    assert sign_up(client, "fr", time_zone="America/Montreal").status_code == 302
    assert User.objects.get(email="lea@example.com").profile.time_zone == "America/Montreal"


@pytest.mark.parametrize(("language", "sent", "expected"), [
    ("fr", None, "Europe/Paris"),  # no JavaScript: the language's usual zone
    ("pt", "", "Europe/Lisbon"),
    ("en", "Mars/Olympus_Mons", "UTC"),  # a name we do not know is ignored
    ("pt", "x" * 500, "Europe/Lisbon"),
    ("fr", "../../etc/passwd", "Europe/Paris"),
])
def test_sign_up_without_a_usable_zone_takes_the_languages(client, language, sent, expected):
    extra = {} if sent is None else {"time_zone": sent}
    assert sign_up(client, language, **extra).status_code == 302
    assert User.objects.get(email="lea@example.com").profile.time_zone == expected


def test_the_sign_up_page_carries_the_hidden_field(client):
    html = client.get("/pt/account/signup/").content.decode()
    assert 'type="hidden" name="time_zone"' in html and "data-browser-time-zone" in html


# --- the profile page -----------------------------------------------------------------------------


def test_the_profile_saves_the_zone_and_the_threshold_and_pages_show_times_in_it():
    profile = ProfileFactory(billing_country="PT")
    client = signed_in(profile.user)
    response = client.post("/pt/account/profile/", profile_form(
        profile, time_zone="Asia/Tokyo", low_balance_warning_hours="48",
    ))
    assert response.status_code == 302
    profile.refresh_from_db()
    assert (profile.time_zone, profile.low_balance_warning_hours) == ("Asia/Tokyo", 48)
    html = client.get("/pt/account/profile/").content.decode()
    assert "Asia/Tokyo" in html and " JST" in html
    assert '<option value="Asia/Tokyo" selected>' in html


def test_the_account_page_shows_times_in_the_zone_in_fixed_queries(django_assert_max_num_queries):
    profile = ProfileFactory(billing_country="PT", time_zone="Europe/Lisbon")
    client = signed_in(profile.user)
    paid_invoice(profile.user)
    client.get("/fr/account/")
    with django_assert_max_num_queries(14):
        html = client.get("/fr/account/").content.decode()
    assert " WET</td>" in html
    for _ in range(3):
        paid_invoice(profile.user)
    with django_assert_max_num_queries(14):
        html = client.get("/fr/account/").content.decode()
    assert html.count(" WET</td>") >= 8  # four top-ups, four movements


@pytest.mark.parametrize(("overrides", "message"), [
    ({"time_zone": "Mars/Olympus_Mons"}, "Choose a time zone from the list."),
    ({"time_zone": "x" * 300}, "Choose a time zone from the list."),
    ({"low_balance_warning_hours": "0"}, "Choose between 1 and 720 hours."),
    ({"low_balance_warning_hours": "721"}, "Choose between 1 and 720 hours."),
    ({"low_balance_warning_hours": "-3"}, "Choose between 1 and 720 hours."),
    ({"low_balance_warning_hours": "três"}, "Enter a whole number of hours between 1 and 720."),
    ({"low_balance_warning_hours": "2.5"}, "Enter a whole number of hours between 1 and 720."),
])
def test_bad_input_is_a_translated_error_and_changes_nothing(overrides, message):
    profile = ProfileFactory(billing_country="PT", name="Before", time_zone="Europe/Lisbon")
    before = Profile.objects.filter(pk=profile.pk).values().get()
    response = signed_in(profile.user).post("/pt/account/profile/", profile_form(
        profile, name="After", **overrides,
    ))
    assert response.status_code == 200
    assert escape(portuguese(message)) in response.content.decode()
    assert Profile.objects.filter(pk=profile.pk).values().get() == before


def test_the_database_refuses_a_threshold_out_of_range_or_an_empty_zone():
    profile = ProfileFactory()
    for fields in ({"low_balance_warning_hours": 0}, {"low_balance_warning_hours": 721}, {"time_zone": ""}):
        with pytest.raises(IntegrityError), transaction.atomic():
            Profile.objects.filter(pk=profile.pk).update(**fields)


def test_a_new_profile_takes_the_sites_threshold(settings):
    settings.LOW_BALANCE_WARNING_HOURS = 5
    assert ProfileFactory().low_balance_warning_hours == 5
