"""Buyers hear, in their language, when an operator refunds their top-up or ends their rental."""

import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail

from accounts.models import Profile
from billing.services import rental_end_by_operator, top_up_create, top_up_pay_sandbox, top_up_refund
from marketplace import formatting
from tests.billing.support import START, charged_rental
from tests.factories import ExchangeRateFactory, ProfileFactory, operator_make

pytestmark = pytest.mark.django_db


def test_refund_email_names_the_top_up_the_vat_and_the_balance_in_portuguese(
    django_capture_on_commit_callbacks, outbox_sent,
):
    buyer = ProfileFactory(preferred_language="pt", billing_country="PT").user
    top_up = top_up_create(user=buyer, amount_text="100", currency="EUR", provider="sandbox",
                           form_token=uuid.uuid4())
    top_up_pay_sandbox(user=buyer, top_up_id=top_up.pk)
    outbox_sent().clear()  # the receipt, written by the payment: not the email under test

    with django_capture_on_commit_callbacks(execute=True):
        top_up_refund(top_up_id=top_up.pk, operator=operator_make("finance"), amount_text="40",
                      reason="Customer asked", request_key="k1")

    [message] = outbox_sent()
    assert message.to == [buyer.email]
    assert top_up.reference in message.subject and "reembolso" in message.subject
    # 40 of 100 EUR net, and 23 % VAT on it: 9.20; 49.20 in all; 60.00 left in the wallet.
    for amount in ("40.00", "9.20", "49.20", "60.00"):
        assert formatting.money(Decimal(amount), "EUR", language="pt") in message.body
    assert "Customer asked" not in message.body  # the reason is for the audit log


def test_ended_rental_email_gives_the_refund_in_french(time_machine, django_capture_on_commit_callbacks):
    time_machine.move_to(START + timedelta(minutes=30), tick=False)
    ExchangeRateFactory(currency="EUR", rate=Decimal("0.92000000"))
    rental = charged_rental("EUR")
    Profile.objects.update_or_create(user=rental.buyer, defaults={"preferred_language": "fr"})
    time_machine.move_to(START + timedelta(minutes=20, seconds=30), tick=False)
    mail.outbox.clear()

    with django_capture_on_commit_callbacks(execute=True):
        refund = rental_end_by_operator(rental_id=rental.pk, operator=operator_make("finance"),
                                        reason="Host under maintenance")

    [message] = mail.outbox
    assert message.to == [rental.buyer.email]
    assert str(rental.pk) in message.subject
    assert "EverXCloud a mis fin à votre location" in message.body
    assert formatting.money(refund.amount, "EUR", language="fr") in message.body
    assert "maintenance" not in message.body
