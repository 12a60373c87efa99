"""An operator's partial refund of a top-up above what can still be refunded: the form stays open
with the operator's values and names the exact most that can still be refunded, in the page's
language: what is left of the top-up, and never more than the wallet holds. Nothing moves."""

import uuid
from decimal import Decimal
from html import unescape

import pytest

from accounts.models import AuditEntry, Wallet
from billing.models import CreditNote, LedgerEntry, LedgerTransaction, TopUp, TopUpRefund
from billing.services import top_up_create, top_up_mark_paid, top_up_refund, wallet_adjust
from tests.admin_support import action_post, operator_client
from tests.billing.support import assert_books_consistent
from tests.factories import ProfileFactory, operator_make

pytestmark = pytest.mark.django_db

NBSP = "\u00a0"
MOST = {  # 37.50 EUR, as each page's language writes the sentence
    "fr": f"Il est encore possible de rembourser au plus 37,50{NBSP}€.",
    "pt": f"Ainda é possível reembolsar, no máximo, €{NBSP}37,50.",
    "en": "At most €37.50 can still be refunded.",
}
REASON = "Le client n'a utilisé qu'une partie du crédit"


def paid_top_up(user, amount: str) -> TopUp:
    """A sandbox top-up of a Portuguese consumer, paid: `amount` plus 23 % VAT."""
    top_up = top_up_create(user=user, amount_text=amount, currency="EUR", provider="sandbox",
                           form_token=uuid.uuid4())
    return top_up_mark_paid(top_up_id=top_up.pk)


def books() -> tuple:
    return (
        LedgerTransaction.objects.count(), LedgerEntry.objects.count(), TopUpRefund.objects.count(),
        CreditNote.objects.count(), AuditEntry.objects.count(),
        list(Wallet.objects.order_by("pk").values_list("balance", flat=True)),
    )


def left_of_the_top_up() -> TopUp:
    """37.50 of a 50.00 top-up are left to refund, and the wallet holds far more (another top-up)."""
    user = ProfileFactory().user
    top_up = paid_top_up(user, "50")
    top_up_refund(top_up_id=top_up.pk, operator=operator_make("finance"), amount_text="12.50",
                  reason="First part", request_key=uuid.uuid4().hex)
    paid_top_up(user, "100")
    assert Wallet.objects.get(user=user).balance == Decimal("137.50")
    return top_up


def left_in_the_wallet() -> TopUp:
    """Nothing of a 50.00 top-up was refunded yet, but the wallet holds only 37.50 of it."""
    user = ProfileFactory().user
    top_up = paid_top_up(user, "50")
    wallet_adjust(wallet_id=Wallet.objects.get(user=user).pk, operator=operator_make("finance"),
                  amount_text="-12.50", reason="Chargeback of a rental", request_key=uuid.uuid4().hex)
    assert Wallet.objects.get(user=user).balance == Decimal("37.50")
    return top_up


@pytest.mark.parametrize("language", ["fr", "pt", "en"])
@pytest.mark.parametrize("make_top_up", [left_of_the_top_up, left_in_the_wallet], ids=lambda f: f.__name__)
def test_a_refund_above_what_is_left_keeps_the_form_open_with_the_exact_maximum(
    client, language, make_top_up
):
    top_up = make_top_up()
    operator_client(client, "finance")
    before = books()
    changelist = f"/{language}/admin/billing/topup/"

    response = action_post(client, changelist, "refund", [top_up.pk], amount="40", reason=REASON)

    assert response.status_code == 200
    form = response.context["form"]
    assert form.errors == {"amount": [MOST[language]]}
    assert (form["amount"].value(), form["reason"].value()) == ("40", REASON)
    html = unescape(response.content.decode())
    assert MOST[language] in html
    assert 'name="amount" value="40"' in html and f">\n{REASON}</textarea>" in html
    assert f'lang="{language}"' in html
    assert books() == before
    assert_books_consistent()


def test_the_form_kept_open_refunds_the_corrected_amount_once(client):
    top_up = left_in_the_wallet()
    operator_client(client, "finance")
    key = uuid.uuid4().hex
    refused = action_post(client, "/fr/admin/billing/topup/", "refund", [top_up.pk], amount="40",
                          reason=REASON, request_key=key)
    assert refused.status_code == 200
    # The operator corrects the amount in the same form (its one-time key unchanged) and confirms.
    for _ in range(2):
        done = action_post(client, "/fr/admin/billing/topup/", "refund", [top_up.pk], amount="37,50",
                           reason=REASON, request_key=key)
        assert done.status_code == 302
    [refund] = TopUpRefund.objects.filter(top_up=top_up)
    assert (refund.amount, refund.vat_amount, refund.total) == (
        Decimal("37.50"), Decimal("8.63"), Decimal("46.13")  # 11.50 x 37.50 / 50 = 8.625
    )
    assert Wallet.objects.get(user=top_up.user).balance == Decimal("0.00")
    assert_books_consistent()


@pytest.mark.parametrize(("amount", "expected"), [
    ("0", "Le montant d'un remboursement doit être positif."),
    ("douze", "Saisissez un montant tel que 25 ou 25.00, avec au plus deux décimales."),
])
def test_an_amount_that_is_no_amount_keeps_the_form_open_too(client, amount, expected):
    top_up = left_in_the_wallet()
    operator_client(client, "finance")
    before = books()
    response = action_post(client, "/fr/admin/billing/topup/", "refund", [top_up.pk], amount=amount,
                           reason=REASON)
    assert response.status_code == 200
    assert response.context["form"].errors == {"amount": [expected]}
    assert books() == before
