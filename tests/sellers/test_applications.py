import pytest
from django.core import mail
from django.utils import translation
from django.utils.html import escape

from marketplace.formatting import country_name
from sellers.exceptions import ApplicationInvalid, ApplicationLocked
from sellers.models import ApplicationStatus, MemberRole, Seller, SellerApplication, SellerMembership
from sellers.selectors import ApplicationState, application_state_for
from sellers.services import (
    application_approve,
    application_ask_info,
    application_reject,
    application_save,
    application_submit,
)
from tests.admin_support import action_post, operator_client
from tests.factories import UserFactory, operator_make
from tests.sellers.support import complete, submitted, url, with_mfa

pytestmark = pytest.mark.django_db


def test_save_draft_normalises_and_updates_the_same_application():
    user = UserFactory()
    first = application_save(applicant=user, fields={"legal_name": "Lisbon GPU Lda"})
    second = application_save(applicant=user, fields=complete())
    assert first.pk == second.pk and second.status == ApplicationStatus.DRAFT
    assert (second.vat_id, second.iban) == ("PT501964843", "PT50000201231234567890154")
    assert SellerApplication.objects.count() == 1


def test_submit_without_two_factor_is_refused():
    user = UserFactory()
    application_save(applicant=user, fields=complete() | {"accept_terms": True})
    with pytest.raises(ApplicationLocked) as error:
        application_submit(applicant=user)
    assert error.value.code == "two_factor_required"
    assert SellerApplication.objects.get(applicant=user).status == ApplicationStatus.DRAFT


def test_submit_needs_terms_and_required_fields():
    user = with_mfa(UserFactory())
    application_save(applicant=user, fields={"legal_name": "Lisbon GPU Lda"})
    with pytest.raises(ApplicationInvalid) as error:
        application_submit(applicant=user)
    assert "iban" in error.value.errors and "website" not in error.value.errors
    application_save(applicant=user, fields=complete())
    with pytest.raises(ApplicationInvalid) as error:
        application_submit(applicant=user)
    assert list(error.value.errors) == ["accept_terms"]


def test_submit_with_two_factor_locks_the_application():
    application = submitted()
    assert application.status == ApplicationStatus.SUBMITTED and application.submitted_at
    with pytest.raises(ApplicationLocked):
        application_save(applicant=application.applicant, fields={"legal_name": "Changed"})
    application.refresh_from_db()
    assert application.legal_name == "Lisbon GPU Lda"


def test_approve_creates_the_seller_with_the_owner_and_emails(django_capture_on_commit_callbacks):
    application = submitted()
    operator = operator_make()
    Seller.objects.create(name="Taken", slug="lisbon-gpu-lda", country="PT")
    with django_capture_on_commit_callbacks(execute=True):
        seller = application_approve(application_id=application.pk, operator=operator)
    assert seller.slug == "lisbon-gpu-lda-2" and seller.country == "PT"
    membership = SellerMembership.objects.get(seller=seller)
    assert (membership.user, membership.role) == (application.applicant, MemberRole.OWNER)
    application.refresh_from_db()
    assert (application.status, application.decided_by) == (ApplicationStatus.APPROVED, operator)
    assert application.decided_at
    assert len(mail.outbox) == 1 and mail.outbox[0].to == [application.applicant.email]
    with translation.override("pt"):
        assert mail.outbox[0].subject == translation.gettext("Your seller application is approved")
    with pytest.raises(ApplicationLocked):
        application_approve(application_id=application.pk, operator=operator)


def test_reject_needs_a_reason_and_records_it(django_capture_on_commit_callbacks):
    application = submitted(legal_name="Dupont & Fils")
    operator = operator_make()
    with pytest.raises(ApplicationInvalid):
        application_reject(application_id=application.pk, operator=operator, reason="  ")
    with django_capture_on_commit_callbacks(execute=True):
        application_reject(application_id=application.pk, operator=operator, reason="No data centre.")
    application.refresh_from_db()
    assert application.status == ApplicationStatus.REJECTED
    assert application.rejection_reason == "No data centre."
    [message] = mail.outbox
    assert message.subject == "A sua candidatura de vendedor não foi aceite"
    assert message.body == (
        "Olá,\n\n"
        "Analisámos a candidatura de Dupont & Fils e não a podemos aceitar.\n\n"
        "O motivo:\nNo data centre.\n\n"
        "A sua candidatura: http://testserver/pt/sell/apply/\n\n"
        "Obrigado pelo seu interesse na EverXCloud.\n"
    )
    assert not Seller.objects.exists()


def state_of(user) -> tuple:
    """(application shown, draft edited, editable) for the applicant."""
    state = application_state_for(applicant=user)
    assert isinstance(state, ApplicationState)
    return state.application, state.draft, state.editable


def test_a_rejected_applicant_starts_a_new_application(client):
    application = submitted()
    user = application.applicant
    assert state_of(user) == (application, None, False)
    application_reject(application_id=application.pk, operator=operator_make(), reason="No data centre.")
    application.refresh_from_db()
    assert state_of(user) == (application, None, True)
    client.force_login(user)
    page = client.get(url("sellers:apply")).content.decode()
    assert "No data centre." in page and 'name="legal_name"' in page  # a blank form to start again
    response = client.post(url("sellers:apply"), complete(legal_name="Lisbon GPU II Lda") | {"save": "1"})
    assert response.status_code == 302
    fresh = SellerApplication.objects.get(status=ApplicationStatus.DRAFT)
    assert fresh.pk != application.pk
    assert (fresh.applicant, fresh.legal_name) == (user, "Lisbon GPU II Lda")
    assert state_of(user) == (fresh, fresh, True)
    application.refresh_from_db()
    assert (application.status, application.legal_name) == (ApplicationStatus.REJECTED, "Lisbon GPU Lda")


def test_what_an_applicant_may_do_in_each_state():
    user = UserFactory()
    assert state_of(user) == (None, None, True)
    draft = application_save(applicant=user, fields={"legal_name": "Lisbon GPU Lda"})
    assert state_of(user) == (draft, draft, True)
    asked = submitted()
    application_ask_info(application_id=asked.pk, operator=operator_make(), question="Which city?")
    asked.refresh_from_db()
    assert state_of(asked.applicant) == (asked, asked, True)
    approved = submitted()
    application_approve(application_id=approved.pk, operator=operator_make())
    approved.refresh_from_db()
    assert state_of(approved.applicant) == (approved, None, False)


def test_an_approved_applicant_cannot_change_anything(client):
    application = submitted()
    application_approve(application_id=application.pk, operator=operator_make())
    client.force_login(application.applicant)
    response = client.post(url("sellers:apply"), complete(legal_name="Changed") | {"save": "1"})
    assert response.status_code == 200
    assert list(SellerApplication.objects.values_list("legal_name", "status")) == [
        ("Lisbon GPU Lda", ApplicationStatus.APPROVED)
    ]


def test_ask_info_then_edit_and_resubmit(django_capture_on_commit_callbacks):
    application = submitted()
    operator = operator_make()
    with django_capture_on_commit_callbacks(execute=True):
        application_ask_info(application_id=application.pk, operator=operator, question="Which city?")
    assert "Which city?" in mail.outbox[0].body
    user = application.applicant
    application_save(applicant=user, fields={"datacentre_locations": "Lisbon and Porto"})
    resubmitted = application_submit(applicant=user)
    assert resubmitted.pk == application.pk and resubmitted.status == ApplicationStatus.SUBMITTED
    assert resubmitted.datacentre_locations == "Lisbon and Porto"


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("vat_id", "PT501964844", "Expected format: PT999999999"),
        ("vat_id", "DE136695976", "belongs to another country"),
        ("iban", "PT50 0002 0123 1234 5678 9015 5", "PT50 0000 0000 0000 0000 0000 0"),
    ],
)
def test_bad_vat_id_or_iban_names_the_format_and_writes_nothing(client, field, value, expected):
    user = UserFactory()
    client.force_login(user)
    response = client.post(url("sellers:apply"), complete(**{field: value}) | {"save": "1"})
    assert response.status_code == 200
    assert expected in response.content.decode()
    assert not SellerApplication.objects.exists()


def test_iban_error_for_a_country_without_an_example_is_generic():
    with pytest.raises(ApplicationInvalid) as error:
        application_save(applicant=UserFactory(), fields={"country": "PL", "iban": "XX00"})
    assert "two letters, two digits" in error.value.errors["iban"][0]


def test_french_vat_error_is_translated_through_gettext(client):
    client.force_login(UserFactory())
    response = client.post(url("sellers:apply", "fr"), complete(vat_id="PT501964844") | {"save": "1"})
    with translation.override("fr"):
        expected = translation.gettext(
            "This is not a valid VAT ID for %(country)s. Expected format: %(pattern)s "
            "(9 stands for a digit, X for a letter or a digit)."
        ) % {"country": country_name("PT"), "pattern": "PT999999999"}
    assert escape(expected) in response.content.decode()


def test_apply_view_saves_draft_and_submits(client):
    user = with_mfa(UserFactory())
    client.force_login(user)
    response = client.post(url("sellers:apply"), complete() | {"save": "1"})
    assert response.status_code == 302
    assert SellerApplication.objects.get(applicant=user).status == ApplicationStatus.DRAFT
    response = client.post(url("sellers:apply"), complete() | {"accept_terms": "on", "submit": "1"})
    assert response.status_code == 302
    assert SellerApplication.objects.get(applicant=user).status == ApplicationStatus.SUBMITTED
    page = client.get(url("sellers:apply")).content.decode()
    assert "PT50000201231234567890154" in page and "Save draft" not in page
    client.post(url("sellers:apply"), complete(legal_name="Changed") | {"save": "1"})
    assert SellerApplication.objects.get(applicant=user).legal_name == "Lisbon GPU Lda"


def test_apply_view_without_two_factor_shows_the_error_and_keeps_a_draft(client):
    user = UserFactory()
    client.force_login(user)
    response = client.post(url("sellers:apply"), complete() | {"accept_terms": "on", "submit": "1"})
    assert response.status_code == 200
    assert "Turn on two-factor authentication" in response.content.decode()
    assert SellerApplication.objects.get(applicant=user).status == ApplicationStatus.DRAFT


def test_apply_shows_the_operators_question(client):
    application = submitted()
    application_ask_info(application_id=application.pk, operator=operator_make(), question="Which city?")
    client.force_login(application.applicant)
    assert "Which city?" in client.get(url("sellers:apply")).content.decode()


def test_someone_else_never_sees_anothers_application(client):
    submitted()
    client.force_login(UserFactory())
    page = client.get(url("sellers:apply")).content.decode()
    assert "Lisbon GPU Lda" not in page and "PT50000201231234567890154" not in page


def test_apply_needs_login(client):
    response = client.get(url("sellers:apply"))
    assert response.status_code == 302 and "login" in response["Location"]


@pytest.mark.parametrize("language", ["en", "pt", "fr"])
@pytest.mark.parametrize("name", ["sellers:sell", "sellers:terms", "sellers:apply"])
def test_pages_render_in_every_language(client, language, name, settings):
    settings.PLATFORM_FEE_PERCENT = 12.5
    client.force_login(UserFactory())
    response = client.get(url(name, language))
    assert response.status_code == 200
    assert f'lang="{language}' in response.content.decode()
    if name == "sellers:sell":
        from decimal import Decimal

        from marketplace.formatting import number

        assert number(Decimal("12.5"), language=language) in response.content.decode()


def test_admin_actions_call_the_services(client, django_capture_on_commit_callbacks):
    approve_me, reject_me = submitted(), submitted()
    operator_client(client, role="support")
    changelist = url("admin:sellers_sellerapplication_changelist")
    with django_capture_on_commit_callbacks(execute=True):
        client.post(changelist, {"action": "approve", "_selected_action": [approve_me.pk], "index": 0})
        action_post(client, changelist, "reject", [reject_me.pk], reason="Not a company.")
    statuses = dict(SellerApplication.objects.values_list("pk", "status"))
    assert statuses == {approve_me.pk: ApplicationStatus.APPROVED, reject_me.pk: ApplicationStatus.REJECTED}
    assert SellerMembership.objects.get().user == approve_me.applicant
    assert len(mail.outbox) == 2
