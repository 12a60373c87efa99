import pytest
from django.urls import reverse
from django.utils import translation

from accounts.models import Profile, VatIdStatus
from accounts.services import profile_ensure, profile_update, profile_vat_id_vies_check
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def profile_url(language="en"):
    with translation.override(language):
        return reverse("accounts:profile")


def business(**overrides):
    data = {
        "name": "Ana Silva", "preferred_language": "pt", "billing_type": "business",
        "billing_country": "DE", "address": "Hauptstraße 1, Berlin", "company_name": "GPU Labs GmbH",
        "vat_id": "DE136695976",
    }
    data.update(overrides)
    return data


def test_profile_saves_a_business_with_a_valid_vat_id(client, django_capture_on_commit_callbacks):
    user = UserFactory()
    client.force_login(user)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(profile_url(), business())
    assert response.status_code == 302
    profile = Profile.objects.get(user=user)
    assert (profile.company_name, profile.vat_id, profile.preferred_language) == (
        "GPU Labs GmbH", "DE136695976", "pt"
    )
    # VIES is switched off in tests: the background check records "unknown".
    assert profile.vat_id_status == VatIdStatus.UNKNOWN


@pytest.mark.parametrize(
    ("language", "vat_id", "expected"),
    [
        ("en", "DE136695977", "Expected format: DE999999999"),
        ("fr", "DE136695977", "DE999999999"),
        ("en", "PT500000000", "belongs to another country"),
    ],
)
def test_malformed_vat_id_is_a_translated_form_error_and_saves_nothing(client, language, vat_id, expected):
    user = UserFactory()
    profile_ensure(user=user)
    client.force_login(user)
    response = client.post(profile_url(language), business(vat_id=vat_id))
    assert response.status_code == 200
    html = response.content.decode()
    assert expected in html
    if language == "fr":
        assert "Expected format" not in html
    assert Profile.objects.get(user=user).vat_id == ""


def test_business_needs_a_company_name(client):
    user = UserFactory()
    client.force_login(user)
    response = client.post(profile_url(), business(company_name=""))
    assert "Businesses must give their company name." in response.content.decode()


def test_individuals_carry_no_company_or_vat_id(client):
    user = UserFactory()
    client.force_login(user)
    client.post(profile_url(), business(billing_type="individual"))
    profile = Profile.objects.get(user=user)
    assert (profile.company_name, profile.vat_id, profile.vat_id_status) == ("", "", VatIdStatus.NONE)


def test_vies_answers_are_recorded(monkeypatch, settings):
    user = UserFactory()
    profile_ensure(user=user)
    profile_update(user=user, fields=business())
    profile = Profile.objects.get(user=user)
    from accounts import services

    monkeypatch.setattr(services, "_vies_says", lambda number: True)
    assert profile_vat_id_vies_check(profile_id=profile.pk) == VatIdStatus.VALID
    monkeypatch.setattr(services, "_vies_says", lambda number: False)
    assert profile_vat_id_vies_check(profile_id=profile.pk) == VatIdStatus.INVALID
    monkeypatch.setattr(services, "_vies_says", lambda number: None)
    assert profile_vat_id_vies_check(profile_id=profile.pk) == VatIdStatus.UNKNOWN


def test_profile_page_needs_a_login(client):
    response = client.get(profile_url("pt"))
    assert response.status_code == 302
    assert response["Location"].startswith("/pt/account/login/")


def person(**overrides):
    data = {
        "name": "Léa Martin", "preferred_language": "fr", "billing_type": "individual",
        "billing_country": "FR", "address": "12 rue de la Paix, Paris",
    }
    data.update(overrides)
    return data


@pytest.mark.parametrize(("sent", "landing"), [
    ("/fr/account/top-up/", "/fr/account/top-up/"),
    ("https://elsewhere.example/fr/account/top-up/", "/fr/account/profile/"),
    ("//elsewhere.example/", "/fr/account/profile/"),
    ("/fr/no-such-page/", "/fr/account/profile/"),
    ("javascript:alert(1)", "/fr/account/profile/"),
])
def test_saving_returns_to_the_page_that_sent_the_buyer_when_it_is_ours(client, sent, landing):
    client.force_login(UserFactory())
    page = client.get(profile_url("fr"), {"next": sent}).content.decode()
    assert (f'name="next" value="{sent}"' in page) is (sent == landing)
    response = client.post(profile_url("fr"), {**person(), "next": sent})
    assert response.status_code == 302 and response["Location"] == landing


def test_a_refused_form_keeps_where_to_return(client):
    client.force_login(UserFactory())
    response = client.post(profile_url("fr"), {**person(name=""), "next": "/fr/account/top-up/"})
    assert response.status_code == 200
    assert 'name="next" value="/fr/account/top-up/"' in response.content.decode()


def test_the_company_fields_are_grouped_for_the_page_to_reveal(client):
    client.force_login(UserFactory())
    with translation.override("fr"):
        page = client.get(profile_url("fr")).content.decode()
    group = page.split('data-testid="company-fields"')[1].split("</fieldset>")[0]
    assert 'name="company_name"' in group and 'name="vat_id"' in group
    assert "Informations sur l'entreprise" in group or "Informations sur l&#x27;entreprise" in group
