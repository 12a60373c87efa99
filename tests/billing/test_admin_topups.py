import uuid
from decimal import Decimal

import pytest

from accounts.models import Wallet
from billing.models import TopUp, TopUpStatus
from billing.services import top_up_create
from tests.admin_support import action_post, operator_client
from tests.factories import ProfileFactory

pytestmark = pytest.mark.django_db


def test_operator_credits_a_bank_transfer_from_the_admin_once(client):
    operator = operator_client(client)
    user = ProfileFactory().user
    top_up = top_up_create(user=user, amount_text="120", currency="EUR", provider="bank",
                           form_token=uuid.uuid4())
    response = action_post(client, "/en/admin/billing/topup/", "credit_bank_transfers", [top_up.pk])
    credit = f"/en/admin/billing/topup/{top_up.pk}/credit/"
    assert response.status_code == 302 and response["Location"] == credit
    data = {"received": "147.60", "bank_reference": "BPI 29-11 #3",
            "reason": "On the statement of 29 November"}
    assert client.post(credit, data).status_code == 302
    assert client.post(credit, data).status_code == 200  # refused: already credited
    top_up.refresh_from_db()
    assert (top_up.status, top_up.credited_by) == (TopUpStatus.PAID, operator)
    assert Wallet.objects.get(user=user).balance == Decimal("120.00")
    assert top_up.bank_reference == "BPI 29-11 #3"


def test_top_ups_cannot_be_edited_in_the_admin(client):
    operator_client(client)
    top_up = top_up_create(user=ProfileFactory().user, amount_text="20", currency="EUR",
                           provider="bank", form_token=uuid.uuid4())
    response = client.post(f"/en/admin/billing/topup/{top_up.pk}/change/", {"amount": "9999"})
    assert response.status_code == 403
    assert TopUp.objects.get(pk=top_up.pk).amount == Decimal("20.00")
