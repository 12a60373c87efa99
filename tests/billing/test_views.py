import uuid
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import translation
from django.utils.html import escape
from django.utils.translation import gettext, ngettext

from accounts.models import Wallet
from billing.models import TopUp
from billing.services import top_up_create
from tests.billing.support import START, document_page_lines, paid_invoice, pdf_lines, signed_in, spaced
from tests.factories import ProfileFactory

pytestmark = pytest.mark.django_db


def form(**overrides):
    data = {"currency": "EUR", "preset": "50", "other_amount": "", "provider": "sandbox",
            "form_token": str(uuid.uuid4())}
    data.update(overrides)
    return data


def test_top_up_form_creates_a_pending_top_up_and_shows_the_vat():
    user = ProfileFactory().user
    client = signed_in(user)
    response = client.post("/pt/account/top-up/", form())
    top_up = TopUp.objects.get(user=user)
    assert response["Location"] == f"/pt/account/top-ups/{top_up.pk}/"
    html = client.get(response["Location"]).content.decode()
    assert "€\u00a061,50" in html and "€\u00a011,50" in html


@pytest.mark.parametrize("typed", ["75.25", "75,25", " 75.25 "])
def test_another_amount(typed):
    user = ProfileFactory().user
    signed_in(user).post("/pt/account/top-up/", form(preset="other", other_amount=typed))
    assert TopUp.objects.get(user=user).amount == Decimal("75.25")


def portuguese(message: str, **values) -> str:
    """The Portuguese catalog's sentence for `message`: the page must show exactly it."""
    with translation.override("pt"):
        translated = gettext(message)
    assert translated != message, f"not translated: {message}"
    return translated % values if values else translated


LIMITS = {"low": "€\u00a010,00", "high": "€\u00a010.000,00"}


@pytest.mark.parametrize(
    ("overrides", "message", "values"),
    [
        ({"preset": "other", "other_amount": "5"}, "Top up between %(low)s and %(high)s.", LIMITS),
        ({"preset": "other", "other_amount": "-5"}, "Top up between %(low)s and %(high)s.", LIMITS),
        ({"preset": "other", "other_amount": "0"}, "Top up between %(low)s and %(high)s.", LIMITS),
        ({"preset": "other", "other_amount": "10000.01"}, "Top up between %(low)s and %(high)s.", LIMITS),
        # Typed amounts are read in the page's language; the message shows its notation.
        ({"preset": "other", "other_amount": "cinquenta"}, "Enter a number such as %(example)s.",
         {"example": "1234,50"}),
        ({"preset": "other", "other_amount": "١٠٠"}, "Enter a number such as %(example)s.",
         {"example": "1234,50"}),
        ({"preset": "other", "other_amount": "１００"}, "Enter a number such as %(example)s.",
         {"example": "1234,50"}),
        ({"preset": "other", "other_amount": "1.234,56"},
         "Write the number without thousands separators, for example %(example)s.", {"example": "1234,50"}),
        ({"preset": "other", "other_amount": ""}, "Enter the amount you want to top up.", {}),
        ({"preset": "99"}, "Select a valid choice. %(value)s is not one of the available choices.",
         {"value": "99"}),
        ({"currency": "JPY"}, "Select a valid choice. %(value)s is not one of the available choices.",
         {"value": "JPY"}),
        ({"provider": "bitcoin"}, "Select a valid choice. %(value)s is not one of the available choices.",
         {"value": "bitcoin"}),
    ],
)
def test_bad_input_is_a_translated_error_and_writes_nothing(overrides, message, values):
    user = ProfileFactory().user
    response = signed_in(user).post("/pt/account/top-up/", form(**overrides))
    assert response.status_code == 400
    assert escape(portuguese(message, **values)) in response.content.decode()
    assert not TopUp.objects.exists()
    assert not Wallet.objects.exists()


def test_more_decimals_than_the_currency_has_is_refused_in_the_pages_notation():
    user = ProfileFactory().user
    response = signed_in(user).post("/pt/account/top-up/", form(preset="other", other_amount="12.345"))
    with translation.override("pt"):
        expected = ngettext(
            "Enter at most %(places)d decimal, for example %(example)s.",
            "Enter at most %(places)d decimals, for example %(example)s.", 2,
        ) % {"places": 2, "example": "1234,50"}
    assert response.status_code == 400 and escape(expected) in response.content.decode()
    assert not TopUp.objects.exists()


def test_a_second_currency_is_refused_with_a_translated_error():
    user = ProfileFactory().user
    paid_invoice(user)
    response = signed_in(user).post("/pt/account/top-up/", form(currency="GBP"))
    assert response.status_code == 400
    expected = portuguese(
        "Your wallet is in %(currency)s: top-ups must be in %(currency)s too.", currency="EUR"
    )
    assert escape(expected) in response.content.decode()
    assert TopUp.objects.count() == 1
    assert Wallet.objects.get(user=user).balance == Decimal("50.00")


def test_nobody_sees_someone_elses_top_up_or_invoice():
    owner, stranger = ProfileFactory().user, ProfileFactory().user
    invoice = paid_invoice(owner)
    client = signed_in(stranger)
    assert client.get(f"/en/account/invoices/{invoice.number}/").status_code == 404
    assert client.get(f"/en/account/invoices/{invoice.number}/pdf/").status_code == 404
    assert client.get(f"/en/account/top-ups/{invoice.top_up_id}/").status_code == 404
    assert client.post(f"/en/account/top-ups/{invoice.top_up_id}/pay/").status_code == 404


@pytest.mark.parametrize(("language", "title", "issued", "figures"), [
    ("fr", "Facture", "Émise le 1er décembre 2026", [
        "Solde prépayé pour des heures GPU sur EverXCloud 50,00\u00a0€",
        "TVA (23\u00a0%) 11,50\u00a0€",
        "Total 61,50\u00a0€",
    ]),
    ("pt", "Fatura", "Emitida em 1 de dezembro de 2026", [
        "Saldo pré-pago para horas de GPU na EverXCloud €\u00a050,00",
        "IVA (23 %) €\u00a011,50",
        "Total €\u00a061,50",
    ]),
])
def test_the_invoice_pdf_says_what_its_page_says(time_machine, language, title, issued, figures):
    time_machine.move_to(START, tick=False)
    user = ProfileFactory(company_name="Dupont & Fils").user
    invoice = paid_invoice(user)  # 50.00 EUR and 23 % VAT, Portugal
    client = signed_in(user)
    page = document_page_lines(client.get(f"/{language}/account/invoices/{invoice.number}/").content.decode())

    response = client.get(f"/{language}/account/invoices/{invoice.number}/pdf/")

    assert response["Content-Type"] == "application/pdf"
    assert response["Content-Disposition"] == f'attachment; filename="{invoice.number}.pdf"'
    assert page[:2] == [f"{title} {invoice.number}", issued]
    assert page[-3:] == figures
    assert "Dupont & Fils" in page
    pdf = pdf_lines(response.content)
    assert pdf[:2] == page[:2] and pdf[-3:] == figures  # number, date, amounts and VAT, exactly
    assert spaced(pdf) == spaced(page)  # and the parties between them, line for line


def test_pages_need_a_login():
    client = Client()
    for path in ("/pt/account/", "/pt/account/top-up/", "/pt/account/invoices/EXC-2026-000001/"):
        response = client.get(path)
        assert response.status_code == 302 and "/pt/account/login/" in response["Location"]


@pytest.mark.parametrize("top_ups", [1, 15])
def test_account_page_runs_a_fixed_number_of_queries(django_assert_max_num_queries, top_ups):
    user = ProfileFactory().user
    for _ in range(top_ups):
        paid_invoice(user)
    client = signed_in(user)
    with django_assert_max_num_queries(10):
        assert client.get("/en/account/").status_code == 200


def test_presets_show_the_total_with_vat():
    client = signed_in(ProfileFactory().user)
    html = client.get("/en/account/top-up/").content.decode()
    assert "€50.00 (€61.50 with VAT)" in html


def test_presets_outside_the_eu_have_no_vat():
    client = signed_in(ProfileFactory(billing_country="US").user)
    html = client.get("/en/account/top-up/").content.decode()
    assert "€50.00" in html and "with VAT" not in html


@pytest.mark.parametrize(("checkout", "words"), [("success", "Stripe has your payment"),
                                                 ("cancelled", "You cancelled the card payment")])
def test_stripe_return_pages(settings, checkout, words):
    settings.STRIPE_SECRET_KEY, settings.STRIPE_WEBHOOK_SECRET = "sk_test_x", "whsec_x"
    user = ProfileFactory().user
    top_up = top_up_create(user=user, amount_text="50", currency="EUR", provider="stripe",
                           form_token=uuid.uuid4())
    html = signed_in(user).get(f"/en/account/top-ups/{top_up.pk}/", {"checkout": checkout}).content.decode()
    assert words in html


def test_a_party_without_an_address_leaves_no_empty_line(time_machine):
    time_machine.move_to(START, tick=False)
    user = ProfileFactory(address="", name="Léa Martin").user
    invoice = paid_invoice(user)
    invoice.buyer = {**invoice.buyer, "address": ""}  # as the snapshot of a buyer who gave none
    invoice.save(update_fields=["buyer"])
    html = signed_in(user).get(f"/fr/account/invoices/{invoice.number}/").content.decode()
    billed = html.split('data-testid="invoice-buyer">')[1].split("</p>")[0]
    assert billed.split("<br>") == ["Léa Martin", "Portugal", escape(user.email)]


def test_a_buyer_without_a_country_is_sent_to_the_profile_and_back():
    user = ProfileFactory(billing_country="").user
    page = signed_in(user).get("/fr/account/top-up/").content.decode()
    assert 'href="/fr/account/profile/?next=/fr/account/top-up/"' in page
