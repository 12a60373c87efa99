import uuid
from types import SimpleNamespace

import pytest
import stripe

from billing.models import TopUp
from billing.services import top_up_create, top_up_providers
from tests.factories import ProfileFactory

pytestmark = pytest.mark.django_db


def test_card_payments_are_hidden_without_stripe_keys(settings):
    settings.STRIPE_SECRET_KEY = ""
    assert "stripe" not in top_up_providers()
    settings.STRIPE_SECRET_KEY, settings.STRIPE_WEBHOOK_SECRET = "sk_test_x", "whsec_x"
    assert "stripe" in top_up_providers()


def test_paying_by_card_opens_a_checkout_session_for_the_total(client, settings, monkeypatch):
    settings.STRIPE_SECRET_KEY, settings.STRIPE_WEBHOOK_SECRET = "sk_test_x", "whsec_x"
    calls = []

    def fake_create(**params):  # Stripe's API is not called from tests
        calls.append(params)
        return SimpleNamespace(id="cs_test_123", url="https://checkout.stripe.test/cs_test_123")

    monkeypatch.setattr(stripe.checkout.Session, "create", staticmethod(fake_create))
    user = ProfileFactory().user
    top_up = top_up_create(user=user, amount_text="50", currency="EUR", provider="stripe",
                           form_token=uuid.uuid4())
    client.force_login(user)
    response = client.post(f"/en/account/top-ups/{top_up.pk}/pay/")
    assert response.status_code == 302
    assert response["Location"] == "https://checkout.stripe.test/cs_test_123"
    (params,) = calls
    assert params["line_items"][0]["price_data"]["unit_amount"] == 6150
    assert params["line_items"][0]["price_data"]["currency"] == "eur"
    assert params["metadata"]["top_up_id"] == str(top_up.pk)
    assert params["api_key"] == "sk_test_x"
    assert TopUp.objects.get(pk=top_up.pk).provider_session_id == "cs_test_123"
