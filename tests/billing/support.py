"""Helpers the billing tests (and a few others) share: funded buyers, rentals to charge, the
state of the books, and the invariants every money test ends on."""

import io
import re
import uuid
from collections import defaultdict
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from html import unescape

import kombu.pools
import pypdf
from allauth.mfa.models import Authenticator
from django.db.models import Sum
from django.test import Client

from accounts.models import Wallet
from billing.ledger import (
    ledger_account_for_seller,
    ledger_account_for_wallet,
    ledger_account_system,
    ledger_post,
)
from billing.models import Invoice, LedgerAccount, LedgerEntry, LedgerTransaction, RentalCharge
from billing.selectors import ledger_unbalanced_transactions, wallet_ledger_balance
from billing.services import rental_charge_next_hour, top_up_create, top_up_pay_sandbox
from exchange.models import Rental
from marketplace.celery import app as celery_app
from sellers.models import MemberRole, SellerMembership
from tests.factories import OfferFactory, ProfileFactory, RentalFactory, UserFactory, WalletFactory

Kind = LedgerAccount.Kind


START = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


HOUR = timedelta(hours=1)


def fund(wallet: Wallet, amount: str) -> Wallet:
    """Money into a wallet as a top-up would bring it: through the ledger."""
    ledger_post(
        idempotency_key=f"fund:{wallet.pk}:{LedgerTransaction.objects.count()}", kind="top_up",
        description="test funds",
        lines=[
            (ledger_account_for_wallet(wallet=wallet), Decimal(amount)),
            (ledger_account_system(kind=Kind.PAYMENT_CLEARING, currency=wallet.currency, provider="bank"),
             -Decimal(amount)),
        ],
    )
    wallet.refresh_from_db()
    return wallet


def buyer_with(currency: str, amount: str | None = None, **profile):
    """A buyer with a profile and a wallet in `currency` holding `amount`."""
    user = ProfileFactory(**profile).user
    wallet = WalletFactory(user=user, currency=currency)
    if amount:
        fund(wallet, amount)
    return user


def rental_for(buyer, *, price="2.88", gpus=1, **fields) -> Rental:
    fields.setdefault("started_at", START)
    return RentalFactory(buyer=buyer, offer=OfferFactory(price_usd=Decimal(price)), gpus=gpus, **fields)


def books() -> tuple:
    """Everything a charge could have touched."""
    return (
        LedgerTransaction.objects.count(),
        LedgerEntry.objects.count(),
        list(Wallet.objects.order_by("pk").values_list("balance", flat=True)),
        RentalCharge.objects.count(),
    )


def entries_by_code(ledger_transaction: LedgerTransaction) -> dict[str, Decimal]:
    return {
        entry.account.code: entry.amount.amount
        for entry in ledger_transaction.entries.select_related("account")
    }


def totals_by_currency(ledger_transaction: LedgerTransaction) -> dict[str, Decimal]:
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for entry in ledger_transaction.entries.all():
        totals[entry.currency] += entry.amount.amount
    return dict(totals)


def assert_books_consistent() -> None:
    """Every ledger transaction sums to zero per currency, no wallet is negative, each wallet's
    cached balance is its ledger balance, and each charge matches its ledger transaction."""
    assert ledger_unbalanced_transactions() == []
    assert not LedgerEntry.objects.values("transaction_id", "currency").annotate(
        total=Sum("amount")
    ).exclude(total=0).exists()
    assert not Wallet.objects.filter(balance__lt=0).exists()
    for wallet in Wallet.objects.all():
        assert wallet.balance == wallet_ledger_balance(wallet=wallet)
    for charge in RentalCharge.objects.select_related("ledger_transaction", "rental"):
        posted = charge.ledger_transaction
        assert posted.kind == LedgerTransaction.Kind.CHARGE
        assert posted.fx_rate_id == charge.fx_rate_id
        assert posted.idempotency_key == (
            f"rental:{charge.rental_id}:hour:{charge.period_start.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"
        )
        wallet_line = posted.entries.get(account__kind=Kind.WALLET)
        assert wallet_line.amount.amount == -charge.amount
        assert wallet_line.currency == charge.currency
        assert charge.cost_usd == charge.rental.price_usd * charge.rental.gpus
        assert charge.period_end == charge.period_start + HOUR
    assert LedgerTransaction.objects.filter(kind="charge").count() == RentalCharge.objects.count()


def member(seller, *, role=MemberRole.OWNER, mfa=True):
    user = UserFactory()
    SellerMembership.objects.create(seller=seller, user=user, role=role)
    if mfa:
        Authenticator.objects.create(user=user, type=Authenticator.Type.TOTP, data={"secret": "x"})
    return user


def earn(seller, amount: str, key: str = "earn"):
    """Give the seller earnings (against the adjustments account, as an operator would)."""
    ledger_post(
        idempotency_key=f"test:{seller.pk}:{key}",
        kind=LedgerTransaction.Kind.ADJUSTMENT,
        description="test earnings",
        lines=[
            (ledger_account_for_seller(seller=seller, currency="USD"), Decimal(amount)),
            (ledger_account_system(kind=Kind.ADJUSTMENTS, currency="USD"), -Decimal(amount)),
        ],
    )


def seller_charge(seller, n: int, *, net: str = "9.00", fee: str = "1.00"):
    """A rental charge as the ledger records it: the seller's earnings and the platform's fee,
    against the adjustments account."""
    ledger_post(
        idempotency_key=f"test-charge:{seller.pk}:{n}",
        kind=LedgerTransaction.Kind.CHARGE,
        description="test charge",
        lines=[
            (ledger_account_for_seller(seller=seller, currency="USD"), Decimal(net)),
            (ledger_account_system(kind=Kind.PLATFORM_REVENUE, currency="USD"), Decimal(fee)),
            (ledger_account_system(kind=Kind.ADJUSTMENTS, currency="USD"), -(Decimal(net) + Decimal(fee))),
        ],
    )


def balance(code: str) -> Decimal:
    total = LedgerEntry.objects.filter(account__code=code).aggregate(total=Sum("amount"))["total"]
    return Decimal(total or 0)


def paid_invoice(user) -> Invoice:
    top_up = top_up_create(user=user, amount_text="50", currency="EUR", provider="sandbox",
                           form_token=uuid.uuid4())
    top_up_pay_sandbox(user=user, top_up_id=top_up.pk)
    return Invoice.objects.get(top_up=top_up)


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def charged_rental(currency: str, amount: str = "100.00", **fields) -> Rental:
    buyer = buyer_with(currency, amount)
    rental = rental_for(buyer, **fields)
    rental_charge_next_hour(rental_id=rental.pk, now=START)
    rental.refresh_from_db()
    return rental


def pdf_lines(body: bytes) -> list[str]:
    """The text of a PDF, line by line, as a reader (and pypdf) sees it."""
    reader = pypdf.PdfReader(io.BytesIO(body))
    lines = (line.strip() for page in reader.pages for line in page.extract_text().splitlines())
    return [line for line in lines if line]


def spaced(lines: list[str]) -> list[str]:
    """Lines with no-break spaces read as spaces: fpdf2 writes those of a paragraph it may wrap
    (`multi_cell`) as plain spaces, the page keeps them; a reader sees no difference."""
    return [line.replace("\u00a0", " ") for line in lines]


def document_page_lines(html: str) -> list[str]:
    """The text of an invoice or credit note page, from its title to its VAT mention: one line per
    heading, paragraph, line break and table row ("label amount"), tags removed, entities read."""
    body = html[html.index("<h1>"):html.index("</table>")]
    footnote = re.search(r'<p class="footnote">(.*?)</p>', html, re.S)
    body += footnote.group(0) if footnote else ""
    body = re.sub(r"</th>\s*<td[^>]*>", " ", body)
    body = re.sub(r"<br>|</(?:h1|h2|p|tr)>", "\n", body)
    text = unescape(re.sub(r"<[^>]+>", "", body))
    return [line.strip() for line in text.splitlines() if line.strip()]


@contextmanager
def celery_app_configured(settings, overrides: dict):
    """Run the Celery app with `overrides` (not eager), then put its configuration and connection
    pools back as they were. The values go into the app's own layer of changes, over the Django
    settings it reads otherwise; the app caches its connection and producer pools, and kombu keeps
    a registry of them."""
    settings.CELERY_TASK_ALWAYS_EAGER = False
    changes = celery_app.conf.changes
    saved = {key: changes[key] for key in overrides if key in changes}

    def forget_connections():
        celery_app._pool = None
        celery_app.amqp._producer_pool = None

    celery_app.conf.update({**overrides, "task_always_eager": False})
    forget_connections()
    try:
        yield
    finally:
        kombu.pools.reset()  # closes the broker connections and empties the registry
        forget_connections()
        for key in [*overrides, "task_always_eager"]:
            changes.pop(key, None)
        changes.update(saved)
        settings.CELERY_TASK_ALWAYS_EAGER = True
