"""The buyer's own low-balance threshold, top-ups in the chosen currency, the invoice's payment."""

import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.utils import translation
from django.utils.html import escape

from billing.models import TopUp
from billing.services import low_balance_warnings_send
from tests.billing.support import (
    START,
    assert_books_consistent,
    buyer_with,
    paid_invoice,
    pdf_lines,
    rental_for,
    signed_in,
)
from tests.factories import ExchangeRateFactory, ProfileFactory

pytestmark = pytest.mark.django_db


def portuguese(message: str, **values) -> str:
    with translation.override("pt"):
        return translation.gettext(message) % values


# --- the low-balance threshold --------------------------------------------------------------------


def test_each_buyer_is_warned_below_their_own_threshold(time_machine, django_capture_on_commit_callbacks,
                                                         django_assert_max_num_queries):
    time_machine.move_to(START + timedelta(minutes=1), tick=False)
    ExchangeRateFactory(currency="EUR", rate=Decimal("0.92000000"))
    careful = buyer_with("USD", "28.80", low_balance_warning_hours=24)  # 10 hours of 2.88
    relaxed = buyer_with("USD", "28.80", low_balance_warning_hours=3)
    for buyer in (careful, relaxed):
        rental_for(buyer)
    with django_capture_on_commit_callbacks(execute=True), django_assert_max_num_queries(12):
        assert low_balance_warnings_send() == 1
    assert [message.to for message in mail.outbox] == [[careful.email]]
    assert_books_consistent()


def test_the_account_page_names_the_buyers_threshold(time_machine):
    time_machine.move_to(START + timedelta(minutes=1), tick=False)
    buyer = buyer_with("USD", "28.80", low_balance_warning_hours=24)
    rental_for(buyer)
    html = signed_in(buyer).get("/pt/account/").content.decode()
    with translation.override("pt"):
        expected = translation.ngettext(
            "Your balance covers less than your warning threshold of %(hours)s hour.",
            "Your balance covers less than your warning threshold of %(hours)s hours.", 24,
        ) % {"hours": 24}
    assert 'data-testid="runway-low"' in html and escape(expected) in html


# --- top-ups in the chosen currency ---------------------------------------------------------------


def test_the_presets_and_range_follow_the_chosen_currency(django_assert_max_num_queries):
    client = signed_in(ProfileFactory(billing_country="PT").user)
    client.get("/pt/account/top-up/")
    with django_assert_max_num_queries(10):
        dollars = client.get("/pt/account/top-up/?currency=USD").content.decode()
    assert "US$\u00a025,00" in dollars and "€\u00a025,00" not in dollars
    assert 'aria-current="true">USD' in dollars
    pounds = client.get("/pt/account/top-up/?currency=GBP").content.decode()
    assert "£\u00a020,00" in pounds and "£\u00a010.000,00" in pounds
    unknown = client.get("/pt/account/top-up/?currency=JPY")
    assert unknown.status_code == 200 and "€\u00a025,00" in unknown.content.decode()


@pytest.mark.parametrize("amount", ["5", "10000.01"])
def test_an_amount_out_of_the_currencys_range_names_it_and_writes_nothing(amount):
    user = ProfileFactory(billing_country="PT").user
    response = signed_in(user).post("/pt/account/top-up/?currency=USD", {
        "currency": "USD", "preset": "other", "other_amount": amount, "provider": "sandbox",
        "form_token": str(uuid.uuid4()),
    })
    assert response.status_code == 400
    message = portuguese(
        "Top up between %(low)s and %(high)s.", low="US$\u00a010,00", high="US$\u00a010.000,00"
    )
    assert escape(message) in response.content.decode()
    assert not TopUp.objects.exists()


def test_a_dollar_preset_tops_up_in_dollars():
    user = ProfileFactory(billing_country="PT").user
    response = signed_in(user).post("/fr/account/top-up/?currency=GBP", {
        "currency": "GBP", "preset": "40", "provider": "sandbox", "form_token": str(uuid.uuid4()),
    })
    assert response.status_code == 302
    top_up = TopUp.objects.get(user=user)
    assert (top_up.currency, top_up.amount) == ("GBP", Decimal("40.00"))


# --- the invoice's payment ------------------------------------------------------------------------


def test_the_invoice_and_its_pdf_say_when_and_how_it_was_paid(time_machine):
    time_machine.move_to(START, tick=False)
    profile = ProfileFactory(time_zone="Europe/Paris")
    invoice = paid_invoice(profile.user)
    client = signed_in(profile.user)
    html = client.get(f"/fr/account/invoices/{invoice.number}/").content.decode()
    pdf = pdf_lines(client.get(f"/fr/account/invoices/{invoice.number}/pdf/").content)
    with translation.override("fr"):
        method = str(invoice.top_up.get_provider_display())
    paid = next(line for line in pdf if method in line)
    assert " CET" in paid and "déc." in paid
    assert 'data-testid="invoice-payment"' in html and escape(method) in html
    assert "Émise le 1er décembre 2026" in pdf
