"""What the admin calls billing's objects (their `str()`): whole sentences in the reader's language,
amounts and dates formatted for it; the ledger accounts' names worked out from what they belong to,
whatever language was active when the account was opened."""

import uuid
from decimal import Decimal

import pytest
from django.utils import translation

from billing.ledger import ledger_account_for_seller, ledger_account_for_wallet, ledger_account_system
from billing.models import LedgerAccount, LedgerEntry, Payout, ReconciliationRun, RentalCharge
from billing.services import payout_mark_paid, payout_request, top_up_create
from tests.admin_support import operator_client
from tests.billing.support import START, buyer_with, charged_rental, earn, member
from tests.factories import ExchangeRateFactory, SellerFactory, UserFactory, WalletFactory, operator_make
from tests.translation_support import names

pytestmark = pytest.mark.django_db

Kind = LedgerAccount.Kind
NBSP = "\u00a0"




def test_a_payout_reads_its_number_amount_and_status_in_the_language():
    seller = SellerFactory(name="Alpha GPU Lda")
    earn(seller, "100.00")
    payout = payout_request(seller_id=seller.pk, requested_by=member(seller), amount_text="50")
    n = payout.pk
    assert names(payout) == {
        "en": f"Payout #{n} · $50.00 (Requested)",
        "pt": f"Pagamento n.º {n} · US${NBSP}50,00 (Pedido)",
        "fr": f"Versement n°{NBSP}{n} · 50,00{NBSP}$US (Demandé)",
    }
    payout_mark_paid(payout_id=n, operator=operator_make(), reference="TRF-1")
    assert names(Payout.objects.get(pk=n))["pt"] == f"Pagamento n.º {n} · US${NBSP}50,00 (Pago)"


def test_a_wallet_is_named_by_its_owner_and_currency():
    wallet = WalletFactory(user=UserFactory(email="ana@example.com"), currency="GBP")
    assert names(wallet) == {
        "en": "Wallet of ana@example.com (GBP)",
        "pt": "Carteira de ana@example.com (GBP)",
        "fr": "Portefeuille de ana@example.com (GBP)",
    }


def test_ledger_accounts_are_named_in_the_reader_language_whatever_language_opened_them():
    wallet = WalletFactory(user=UserFactory(email="ana@example.com"), currency="GBP")
    seller = SellerFactory(name="Alpha GPU Lda")
    with translation.override("fr"):
        codes = [
            ledger_account_for_wallet(wallet=wallet).code,
            ledger_account_for_seller(seller=seller, currency="USD").code,
            ledger_account_system(kind=Kind.VAT_PAYABLE, currency="USD").code,
            ledger_account_system(kind=Kind.PAYMENT_CLEARING, currency="EUR", provider="bank").code,
            ledger_account_system(kind=Kind.PAYMENT_CLEARING, currency="EUR", provider="acme").code,
        ]
    accounts = [LedgerAccount.objects.get(code=code) for code in codes]
    assert [names(account) for account in accounts] == [
        {"en": "Wallet of ana@example.com (GBP)", "pt": "Carteira de ana@example.com (GBP)",
         "fr": "Portefeuille de ana@example.com (GBP)"},
        {"en": "Earnings of Alpha GPU Lda (USD)", "pt": "Ganhos de Alpha GPU Lda (USD)",
         "fr": "Gains de Alpha GPU Lda (USD)"},
        {"en": "VAT payable (USD)", "pt": "IVA a pagar (USD)", "fr": "TVA à reverser (USD)"},
        {"en": "Payment clearing: Bank transfer (EUR)",
         "pt": "Compensação de pagamentos: Transferência bancária (EUR)",
         "fr": f"Compensation des paiements{NBSP}: Virement bancaire (EUR)"},
        # A provider the site does not know keeps its code.
        {"en": "Payment clearing: acme (EUR)", "pt": "Compensação de pagamentos: acme (EUR)",
         "fr": f"Compensation des paiements{NBSP}: acme (EUR)"},
    ]
    assert all(account.name == str(account) for account in accounts)


def test_a_rental_charge_and_its_ledger_entries_read_the_amount_in_the_language():
    rental = charged_rental("USD", "100.00", price="2.88")
    charge = RentalCharge.objects.get(rental=rental)
    n = rental.pk
    assert names(charge) == {
        "en": f"Rental #{n}, hour from Dec 1, 2026, 10:00 UTC: $2.88",
        "pt": f"Aluguer n.º {n}, hora com início em 1 de dez. de 2026, 10:00 UTC: US${NBSP}2,88",
        "fr": f"Location n°{NBSP}{n}, heure débutant le 1er déc. 2026, 10:00 UTC{NBSP}: 2,88{NBSP}$US",
    }
    email = rental.buyer.email
    entry = LedgerEntry.objects.get(transaction=charge.ledger_transaction, account__kind=Kind.WALLET)
    assert names(entry) == {
        "en": f"Wallet of {email} (USD): -$2.88",
        "pt": f"Carteira de {email} (USD): -US${NBSP}2,88",
        "fr": f"Portefeuille de {email} (USD){NBSP}: -2,88{NBSP}$US",
    }
    credit = LedgerEntry.objects.filter(
        transaction=charge.ledger_transaction, account__kind=Kind.SELLER_EARNINGS
    ).get()
    seller = rental.server.seller.name
    assert names(credit)["en"] == f"Earnings of {seller} (USD): +${credit.amount.amount:.2f}"
    key = charge.ledger_transaction.idempotency_key
    assert names(charge.ledger_transaction) == {
        "en": f"Transaction #{charge.ledger_transaction.pk}: Charge ({key})",
        "pt": f"Transação n.º {charge.ledger_transaction.pk}: Cobrança ({key})",
        "fr": f"Opération n°{NBSP}{charge.ledger_transaction.pk}{NBSP}: Débit ({key})",
    }


def test_a_top_up_reads_its_reference_amount_and_status():
    user = buyer_with("EUR")
    top_up = top_up_create(
        user=user, amount_text="50", currency="EUR", provider="sandbox", form_token=uuid.uuid4()
    )
    reference = top_up.reference
    assert names(top_up) == {
        "en": f"Top-up {reference} of €50.00 (Awaiting payment)",
        "pt": f"Carregamento {reference} de €{NBSP}50,00 (A aguardar pagamento)",
        "fr": f"Rechargement {reference} de 50,00{NBSP}€ (En attente de paiement)",
    }


def test_an_exchange_rate_and_a_reconciliation_read_their_dates_in_the_language():
    rate = ExchangeRateFactory(currency="EUR", rate=Decimal("0.92000000"))
    assert names(rate) == {
        "en": "1 USD = 0.92 EUR from Nov 1, 2026, 00:00 UTC",
        "pt": "1 USD = 0,92 EUR a partir de 1 de nov. de 2026, 00:00 UTC",
        "fr": "1 USD = 0,92 EUR à partir du 1er nov. 2026, 00:00 UTC",
    }
    run = ReconciliationRun.objects.create(started_at=START, ok=False)
    assert names(run) == {
        "en": "Reconciliation of Dec 1, 2026, 10:00 UTC: problems found",
        "pt": "Reconciliação de 1 de dez. de 2026, 10:00 UTC: problemas encontrados",
        "fr": f"Rapprochement du 1er déc. 2026, 10:00 UTC{NBSP}: problèmes trouvés",
    }


def test_the_ledger_accounts_list_shows_the_names_in_the_reader_language_and_finds_an_owner(client):
    wallet = WalletFactory(user=UserFactory(email="ana@example.com"), currency="GBP")
    with translation.override("pt"):
        ledger_account_for_wallet(wallet=wallet)
        ledger_account_system(kind=Kind.VAT_PAYABLE, currency="USD")
    operator_client(client)
    page = client.get("/fr/admin/billing/ledgeraccount/").content.decode()
    assert "Portefeuille de ana@example.com (GBP)" in page and "TVA à reverser (USD)" in page
    assert "IVA a pagar" not in page
    found = client.get("/fr/admin/billing/ledgeraccount/", {"q": "ana@example"}).content.decode()
    assert "Portefeuille de ana@example.com (GBP)" in found and "TVA à reverser (USD)" not in found
