import hashlib
import hmac
import json
import time
import uuid
from decimal import Decimal

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from accounts.models import Wallet
from billing.exceptions import TopUpRejected
from billing.models import Invoice, LedgerEntry, LedgerTransaction, TopUp, TopUpStatus
from billing.services import (
    top_up_create,
    top_up_credit_bank_transfer,
    top_up_mark_paid,
    top_up_pay_sandbox,
)
from tests.factories import ProfileFactory, UserFactory, operator_make
from tests.threads import run_together

pytestmark = pytest.mark.django_db


def create(user, amount="50", currency="EUR", provider="sandbox", token=None):
    return top_up_create(
        user=user, amount_text=amount, currency=currency, provider=provider,
        form_token=token or uuid.uuid4(),
    )


def books() -> tuple:
    """Everything that money could have touched."""
    return (
        TopUp.objects.count(), LedgerTransaction.objects.count(), LedgerEntry.objects.count(),
        list(Wallet.objects.values_list("balance", flat=True)), Invoice.objects.count(),
    )


class TestQuote:
    def test_portuguese_consumer_pays_23_percent_on_top(self):
        top_up = create(ProfileFactory().user)
        assert (top_up.amount, top_up.vat_rate, top_up.vat_amount, top_up.total) == (
            Decimal("50.00"), Decimal("23.00"), Decimal("11.50"), Decimal("61.50")
        )
        assert top_up.vat_kind == "standard"

    def test_german_consumer_pays_german_vat(self):
        top_up = create(ProfileFactory(billing_country="DE").user, amount="33.33")
        assert (top_up.vat_rate, top_up.vat_amount, top_up.total) == (
            Decimal("19.00"), Decimal("6.33"), Decimal("39.66")
        )

    def test_eu_business_with_a_vat_id_confirmed_by_vies_is_reverse_charged(self):
        profile = ProfileFactory(
            billing_country="DE", billing_type="business", company_name="GPU Labs GmbH",
            vat_id="DE136695976", vat_id_status="valid", vat_id_checked_at=timezone.now(),
        )
        top_up = create(profile.user, amount="100")
        assert (top_up.vat_kind, top_up.vat_amount, top_up.total) == (
            "reverse_charge", Decimal("0.00"), Decimal("100.00")
        )

    def test_business_whose_vat_id_vies_rejected_pays_vat(self):
        profile = ProfileFactory(
            billing_country="DE", billing_type="business", company_name="GPU Labs GmbH",
            vat_id="DE136695976", vat_id_status="invalid",
        )
        assert create(profile.user, amount="100").vat_amount == Decimal("19.00")

    def test_business_in_portugal_pays_portuguese_vat(self):
        profile = ProfileFactory(
            billing_type="business", company_name="Lisboa AI Lda", vat_id="PT500000000",
            vat_id_status="valid",
        )
        assert create(profile.user, amount="100").vat_amount == Decimal("23.00")

    @pytest.mark.parametrize("country", ["US", "GB", "CH"])
    def test_outside_the_eu_no_vat(self, country):
        top_up = create(ProfileFactory(billing_country=country).user, currency="USD", amount="20")
        assert (top_up.vat_kind, top_up.total) == ("outside_scope", Decimal("20.00"))


class TestBadInput:
    @pytest.mark.parametrize(
        ("amount", "currency", "code"),
        [
            ("9.99", "EUR", "amount_out_of_range"),
            ("10000.01", "EUR", "amount_out_of_range"),
            ("-50", "EUR", "amount_out_of_range"),
            ("0", "EUR", "amount_out_of_range"),
            ("fifty", "EUR", "amount_invalid"),
            ("", "EUR", "amount_invalid"),
            ("NaN", "EUR", "amount_invalid"),
            ("50.001", "EUR", "amount_invalid"),
            ("50", "JPY", "currency_unknown"),
        ],
    )
    def test_refused_and_nothing_written(self, amount, currency, code):
        user = ProfileFactory().user
        before = books()
        with pytest.raises(TopUpRejected) as refused:
            create(user, amount=amount, currency=currency)
        assert refused.value.code == code
        assert books() == before

    def test_a_currency_other_than_the_wallets(self):
        user = ProfileFactory().user
        top_up_pay_sandbox(user=user, top_up_id=create(user).pk)
        before = books()
        with pytest.raises(TopUpRejected) as refused:
            create(user, currency="USD")
        assert refused.value.code == "currency_mismatch"
        assert books() == before

    def test_no_billing_country_yet(self):
        user = ProfileFactory(billing_country="").user
        with pytest.raises(TopUpRejected) as refused:
            create(user)
        assert refused.value.code == "billing_identity_missing"

    def test_the_same_form_twice_is_one_top_up(self):
        user = ProfileFactory().user
        token = uuid.uuid4()
        assert create(user, token=token).pk == create(user, token=token).pk
        assert TopUp.objects.count() == 1


class TestPaying:
    def test_sandbox_credits_the_wallet_posts_the_ledger_and_issues_the_invoice(
        self, django_capture_on_commit_callbacks
    ):
        user = ProfileFactory().user
        with django_capture_on_commit_callbacks(execute=True):
            paid = top_up_pay_sandbox(user=user, top_up_id=create(user).pk)
        assert paid.status == TopUpStatus.PAID
        wallet = Wallet.objects.get(user=user)
        assert (wallet.currency, wallet.balance) == ("EUR", Decimal("50.00"))
        lines = sorted(
            (entry.account.code, entry.amount.amount)
            for entry in LedgerEntry.objects.filter(transaction=paid.ledger_transaction)
        )
        assert lines == sorted([
            ("clearing:sandbox:EUR", Decimal("-61.50")),
            (f"wallet:{wallet.pk}", Decimal("50.00")),
            ("vat_payable:EUR", Decimal("11.50")),
        ])
        invoice = Invoice.objects.get(top_up=paid)
        assert invoice.number == f"EXC-{invoice.issued_at.year}-000001"
        assert (invoice.net, invoice.vat_amount, invoice.total) == (
            Decimal("50.00"), Decimal("11.50"), Decimal("61.50")
        )
        # The receipt goes out in the buyer's language, with the invoice link.
        assert len(mail.outbox) == 1
        assert invoice.number in mail.outbox[0].subject
        assert f"/pt/account/invoices/{invoice.number}/" in mail.outbox[0].body
        assert "carteira" in mail.outbox[0].body

    def test_paying_twice_credits_once(self):
        user = ProfileFactory().user
        top_up = create(user)
        top_up_pay_sandbox(user=user, top_up_id=top_up.pk)
        top_up_pay_sandbox(user=user, top_up_id=top_up.pk)
        top_up_mark_paid(top_up_id=top_up.pk)
        assert Wallet.objects.get(user=user).balance == Decimal("50.00")
        assert (LedgerTransaction.objects.count(), Invoice.objects.count()) == (1, 1)

    def test_nobody_pays_someone_elses_sandbox_top_up(self):
        top_up = create(ProfileFactory().user)
        with pytest.raises(TopUp.DoesNotExist):
            top_up_pay_sandbox(user=UserFactory(), top_up_id=top_up.pk)
        assert TopUp.objects.get(pk=top_up.pk).status == TopUpStatus.PENDING

    def test_bank_transfer_credited_by_reference_once(self):
        user = ProfileFactory().user
        operator = operator_make()
        top_up = create(user, provider="bank", amount="200")
        top_up_credit_bank_transfer(reference=top_up.reference.lower(), operator=operator, reason="Seen")
        before = books()
        with pytest.raises(TopUpRejected) as refused:
            top_up_credit_bank_transfer(reference=top_up.reference, operator=operator, reason="Seen again")
        assert refused.value.code == "already_credited"
        assert books() == before
        assert Wallet.objects.get(user=user).balance == Decimal("200.00")
        assert TopUp.objects.get(pk=top_up.pk).credited_by == operator
        assert LedgerTransaction.objects.count() == 1

    def test_unknown_bank_reference(self):
        before = books()
        with pytest.raises(TopUpRejected):
            top_up_credit_bank_transfer(reference="EXC-NOPE", operator=operator_make(), reason="Seen")
        assert books() == before

    def test_sandbox_is_off_in_production_settings(self, settings):
        settings.PAYMENT_SANDBOX_ENABLED = False
        with pytest.raises(TopUpRejected) as refused:
            create(ProfileFactory().user)
        assert refused.value.code == "provider_unavailable"


@pytest.mark.django_db(transaction=True)
def test_concurrent_payments_get_gapless_invoice_numbers():
    top_ups = [create(ProfileFactory().user) for _ in range(10)]
    results, errors = run_together(10, lambda i: top_up_mark_paid(top_up_id=top_ups[i].pk).pk)
    assert errors == []
    sequences = sorted(Invoice.objects.values_list("sequence", flat=True))
    assert sequences == list(range(1, 11))


# Stripe webhooks, signed here with the test secret as Stripe signs them.
WEBHOOK_SECRET = "whsec_test_only"


def signed(payload: dict, secret: str = WEBHOOK_SECRET, timestamp: int | None = None) -> tuple[bytes, str]:
    body = json.dumps(payload).encode()
    timestamp = timestamp or int(time.time())
    signature = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return body, f"t={timestamp},v1={signature}"


def session_event(top_up, event_type="checkout.session.completed", event_id=None, paid=True, total=None):
    return {
        "id": event_id or f"evt_{uuid.uuid4().hex}",
        "object": "event",
        "type": event_type,
        "data": {"object": {
            "id": f"cs_test_{top_up.pk}", "object": "checkout.session",
            "client_reference_id": str(top_up.pk), "metadata": {"top_up_id": str(top_up.pk)},
            "payment_status": "paid" if paid else "unpaid",
            "amount_total": int((total or top_up.total) * 100), "currency": top_up.currency.lower(),
        }},
    }


@pytest.fixture
def stripe_on(settings):
    settings.STRIPE_SECRET_KEY = "sk_test_not_used_by_these_tests"
    settings.STRIPE_WEBHOOK_SECRET = WEBHOOK_SECRET


@pytest.fixture
def card_top_up(stripe_on):
    return create(ProfileFactory().user, provider="stripe")


def post_webhook(client, payload, signature):
    return client.generic("POST", "/webhooks/stripe/", payload, content_type="application/json",
                          HTTP_STRIPE_SIGNATURE=signature)


class TestStripeWebhook:
    def test_paid_session_credits_once_even_when_delivered_twice(self, client, card_top_up):
        body, signature = signed(session_event(card_top_up, event_id="evt_1"))
        assert post_webhook(client, body, signature).content == b"credited"
        assert post_webhook(client, body, signature).content == b"duplicate"
        assert Wallet.objects.get(user=card_top_up.user).balance == Decimal("50.00")
        assert LedgerTransaction.objects.count() == 1

    @pytest.mark.parametrize("signature", [None, "t=1,v1=deadbeef", "garbage"])
    def test_bad_or_missing_signature_is_400_and_credits_nothing(self, client, card_top_up, signature):
        body, _good = signed(session_event(card_top_up))
        before = books()
        headers = {"HTTP_STRIPE_SIGNATURE": signature} if signature else {}
        response = client.generic(
            "POST", "/webhooks/stripe/", body, content_type="application/json", **headers
        )
        assert response.status_code == 400
        assert books() == before

    def test_signed_with_another_secret(self, client, card_top_up):
        body, signature = signed(session_event(card_top_up), secret="whsec_someone_else")
        assert post_webhook(client, body, signature).status_code == 400
        assert TopUp.objects.get(pk=card_top_up.pk).status == TopUpStatus.PENDING

    def test_async_payment_succeeds_after_an_unpaid_completion(self, client, card_top_up):
        unpaid = session_event(card_top_up, paid=False)
        assert post_webhook(client, *signed(unpaid)).content == b"awaiting payment"
        succeeded = session_event(card_top_up, "checkout.session.async_payment_succeeded")
        assert post_webhook(client, *signed(succeeded)).content == b"credited"
        assert Wallet.objects.get(user=card_top_up.user).balance == Decimal("50.00")

    def test_events_in_the_wrong_order(self, client, card_top_up):
        succeeded = session_event(card_top_up, "checkout.session.async_payment_succeeded")
        assert post_webhook(client, *signed(succeeded)).content == b"credited"
        late_unpaid = session_event(card_top_up, paid=False)
        assert post_webhook(client, *signed(late_unpaid)).content == b"awaiting payment"
        late_failure = session_event(card_top_up, "checkout.session.async_payment_failed")
        post_webhook(client, *signed(late_failure))
        assert TopUp.objects.get(pk=card_top_up.pk).status == TopUpStatus.PAID
        assert LedgerTransaction.objects.count() == 1

    def test_a_session_for_another_amount_credits_nothing(self, client, card_top_up):
        event = session_event(card_top_up, total=Decimal("1.00"))
        assert post_webhook(client, *signed(event)).content == b"amount mismatch"
        assert not Wallet.objects.filter(user=card_top_up.user).exists()

    def test_failed_payment_marks_the_top_up_failed(self, client, card_top_up):
        event = session_event(card_top_up, "checkout.session.async_payment_failed")
        assert post_webhook(client, *signed(event)).content == b"failed"
        assert TopUp.objects.get(pk=card_top_up.pk).status == TopUpStatus.FAILED


@pytest.mark.django_db(transaction=True)
def test_ten_concurrent_deliveries_of_one_event_credit_once(stripe_on):
    top_up = create(ProfileFactory().user, provider="stripe")
    body, signature = signed(session_event(top_up, event_id="evt_concurrent"))
    results, errors = run_together(10, lambda i: post_webhook(Client(), body, signature).content)
    assert errors == []
    assert sorted(results) == [b"credited"] + [b"duplicate"] * 9
    assert Wallet.objects.get(user=top_up.user).balance == Decimal("50.00")
    assert LedgerTransaction.objects.count() == 1
