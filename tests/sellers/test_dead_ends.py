"""No dead ends on the way to selling: submitting without two-factor authentication links to its
set-up, which comes back to the application; members find their portal from /sell/, the approved
application and the approval email; the VAT ID's help gives the chosen country's format."""

import json
from urllib.parse import quote

import pytest
from django.core import mail
from django.urls import reverse
from django.utils import translation
from django.utils.html import escape

from marketplace.formatting import country_name
from sellers.forms import ApplicationForm, vat_id_help
from sellers.models import ApplicationStatus, SellerApplication
from sellers.services import application_approve
from sellers.views import TWO_FACTOR_NEXT
from tests.factories import SellerFactory, UserFactory, operator_make
from tests.sellers.support import complete, member, submitted, url, with_mfa

pytestmark = pytest.mark.django_db


def _submit(client, language="en"):
    return client.post(url("sellers:apply", language), complete() | {"accept_terms": "on", "submit": "1"})


def test_submitting_without_two_factor_links_to_its_set_up_and_keeps_the_draft(client):
    user = UserFactory()
    client.force_login(user)
    page = _submit(client, "fr").content.decode()
    link = f'{url("sellers:two-factor", "fr")}?next={quote(url("sellers:apply", "fr"), safe="")}'
    assert escape(link) in page
    with translation.override("fr"):
        assert escape(translation.gettext("Set up two-factor authentication")) in page
    assert SellerApplication.objects.get(applicant=user).status == ApplicationStatus.DRAFT


def test_the_set_up_remembers_the_way_back_and_its_pages_link_there_once_it_is_on(client):
    user = UserFactory()
    client.force_login(user)
    back = url("sellers:apply", "pt")
    response = client.get(url("sellers:two-factor", "pt"), {"next": back})
    assert response["Location"] == reverse("mfa_activate_totp")
    assert client.session[TWO_FACTOR_NEXT] == back
    # Not on yet: the set-up's pages do not offer the way back.
    assert 'data-testid="two-factor-return"' not in client.get(reverse("mfa_index")).content.decode()
    with_mfa(user)
    page = client.get(reverse("mfa_index")).content.decode()
    assert 'data-testid="two-factor-return"' in page and f'href="{back}"' in page
    # Back on the application, the way back is used up.
    assert client.get(back).status_code == 200
    assert TWO_FACTOR_NEXT not in client.session
    assert 'data-testid="two-factor-return"' not in client.get(reverse("mfa_index")).content.decode()


def test_with_two_factor_already_on_the_set_up_sends_straight_back(client):
    client.force_login(with_mfa(UserFactory()))
    back = url("sellers:apply")
    assert client.get(url("sellers:two-factor"), {"next": back})["Location"] == back


@pytest.mark.parametrize("next_value", [
    "https://evil.example/", "//evil.example/", "/\\evil.example/", "/en/no-such-page/",
    "javascript:alert(1)", "/en/sell/\r\nSet-Cookie: x=1", "",
])
def test_a_way_back_off_the_site_is_ignored(client, next_value):
    client.force_login(UserFactory())
    response = client.get(url("sellers:two-factor"), {"next": next_value})
    assert response["Location"] == reverse("mfa_activate_totp")
    assert TWO_FACTOR_NEXT not in client.session


def test_the_set_up_page_needs_a_signed_in_user(client):
    response = client.get(url("sellers:two-factor"), {"next": url("sellers:apply")})
    assert response.status_code == 302 and response["Location"].startswith(reverse("account_login"))


def test_a_portal_form_sent_without_two_factor_comes_back_to_the_portal_not_the_form(client):
    client.force_login(member(SellerFactory(), mfa=False))
    response = client.post(url("sellers:portal-payout-request"), {"amount": "60"})
    assert response["Location"] == f'{url("sellers:two-factor")}?next={quote(url("sellers:portal"), safe="")}'


def test_members_find_their_portal_from_sell(client):
    client.force_login(member(SellerFactory()))
    assert 'data-testid="portal-link"' in client.get(url("sellers:sell", "fr")).content.decode()
    client.force_login(UserFactory())
    assert 'data-testid="portal-link"' not in client.get(url("sellers:sell", "fr")).content.decode()


def test_the_approval_email_and_the_approved_application_link_to_the_portal(
    client, django_capture_on_commit_callbacks
):
    application = submitted()
    with django_capture_on_commit_callbacks(execute=True):
        application_approve(application_id=application.pk, operator=operator_make())
    (email,) = mail.outbox
    assert url("sellers:portal", "pt") in email.body
    client.force_login(application.applicant)
    page = client.get(url("sellers:apply", "pt")).content.decode()
    assert f'href="{url("sellers:portal", "pt")}"' in page


def test_the_vat_help_gives_the_format_of_the_chosen_country():
    with translation.override("fr"):
        expected = translation.gettext(
            "The format of a VAT ID in %(country)s: %(pattern)s (9 stands for a digit, X for a letter "
            "or a digit)."
        ) % {"country": country_name("DE"), "pattern": "DE999999999"}
        assert vat_id_help("DE") == expected
        assert ApplicationForm(data={"country": "DE"}).fields["vat_id"].help_text == expected
        saved = SellerApplication(country="DE")
        assert ApplicationForm(instance=saved).fields["vat_id"].help_text == expected
        general = ApplicationForm().fields["vat_id"].help_text
        assert "DE999999999" not in general and general == vat_id_help("")
        # The page carries every country's help for site.js, in the page's language.
        texts = json.loads(ApplicationForm().fields["country"].widget.attrs["data-vat-help"])
        assert texts["DE"] == expected and texts[""] == general and texts["GR"].count("EL999999999") == 1


def test_the_application_page_shows_the_saved_countrys_format(client):
    user = UserFactory()
    client.force_login(user)
    client.post(url("sellers:apply", "pt"), complete(country="FR", vat_id="") | {"save": "1"})
    with translation.override("pt"):
        page = client.get(url("sellers:apply", "pt")).content.decode()
        assert escape(vat_id_help("FR")).split(":")[1].strip()[:13] in page
        assert "FRXX999999999" in page
