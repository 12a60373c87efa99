"""Helpers the browser journeys share."""

import uuid
from datetime import UTC, datetime
from decimal import Decimal

from billing.services import fx_rates_load, top_up_create, top_up_pay_sandbox
from tests.factories import ProfileFactory

PASSWORD = "gpu-hours-2026!"


def french_buyer_with_balance():
    profile = ProfileFactory(preferred_language="fr", billing_country="FR", name="Léa Martin")
    fx_rates_load(rates={"EUR": Decimal("0.92"), "GBP": Decimal("0.79")},
                  valid_from=datetime(2026, 1, 1, tzinfo=UTC), source="test")
    top_up = top_up_create(user=profile.user, amount_text="100", currency="EUR", provider="sandbox",
                           form_token=uuid.uuid4())
    top_up_pay_sandbox(user=profile.user, top_up_id=top_up.pk)
    return profile.user
