"""The ledger service: balanced postings, wallet balances, idempotency, refusals, reversals."""

from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from djmoney.money import Money

from accounts.models import Wallet
from billing.exceptions import AlreadyReversed, InsufficientBalance, LedgerLineInvalid, UnbalancedTransaction
from billing.ledger import (
    KeysAlreadyPosted,
    Posting,
    _wallets_lock_and_check,
    ledger_account_for_seller,
    ledger_account_for_wallet,
    ledger_account_system,
    ledger_post,
    ledger_post_many,
    ledger_reverse,
)
from billing.models import LedgerAccount, LedgerEntry, LedgerTransaction
from billing.selectors import ledger_account_balance, wallet_ledger_balance
from tests.factories import ExchangeRateFactory, SellerFactory, UserFactory, WalletFactory

pytestmark = pytest.mark.django_db

Kind = LedgerAccount.Kind


def top_up(wallet: Wallet, net: str, *, vat: str = "0.00", key: str | None = None):
    """A card top-up: the wallet gets `net`, VAT payable `vat`, the clearing account pays both."""
    clearing = ledger_account_system(kind=Kind.PAYMENT_CLEARING, currency=wallet.currency, provider="sandbox")
    lines = [(ledger_account_for_wallet(wallet=wallet), Decimal(net))]
    if Decimal(vat):
        lines.append((ledger_account_system(kind=Kind.VAT_PAYABLE, currency=wallet.currency), Decimal(vat)))
    lines.append((clearing, -(Decimal(net) + Decimal(vat))))
    return ledger_post(
        idempotency_key=key or f"top-up:{wallet.pk}:{LedgerTransaction.objects.count()}",
        kind=LedgerTransaction.Kind.TOP_UP,
        description="Top-up",
        lines=lines,
    )


def ledger_counts() -> tuple[int, int]:
    return LedgerTransaction.objects.count(), LedgerEntry.objects.count()


# --- accounts ---------------------------------------------------------------------------------


def test_account_codes_and_get_or_create():
    wallet = WalletFactory(currency="GBP")
    seller = SellerFactory()
    account = ledger_account_for_wallet(wallet=wallet)
    assert (account.code, account.kind, account.currency, account.wallet) == (
        f"wallet:{wallet.pk}", Kind.WALLET, "GBP", wallet
    )
    assert ledger_account_for_wallet(wallet=wallet).pk == account.pk
    assert ledger_account_for_seller(seller=seller, currency="USD").code == f"seller_earnings:{seller.pk}:USD"
    assert ledger_account_system(kind=Kind.PLATFORM_REVENUE, currency="USD").code == "platform_revenue:USD"
    assert ledger_account_system(kind=Kind.VAT_PAYABLE, currency="EUR").code == "vat_payable:EUR"
    assert ledger_account_system(kind=Kind.ADJUSTMENTS, currency="EUR").code == "adjustments:EUR"
    assert ledger_account_system(kind=Kind.FX, currency="EUR").code == "fx:EUR"
    stripe = ledger_account_system(kind=Kind.PAYMENT_CLEARING, currency="GBP", provider="stripe")
    assert (stripe.code, stripe.provider) == ("clearing:stripe:GBP", "stripe")
    assert ledger_account_system(kind=Kind.FX, currency="EUR").pk == ledger_account_system(
        kind=Kind.FX, currency="EUR"
    ).pk
    assert LedgerAccount.objects.count() == 7


@pytest.mark.parametrize(
    ("kind", "currency", "provider"),
    [
        (Kind.WALLET, "EUR", ""),
        (Kind.SELLER_EARNINGS, "EUR", ""),
        (Kind.PAYMENT_CLEARING, "EUR", ""),
        (Kind.PAYMENT_CLEARING, "EUR", "Not A Slug"),
        (Kind.VAT_PAYABLE, "EUR", "stripe"),
        (Kind.VAT_PAYABLE, "JPY", ""),
    ],
)
def test_system_accounts_refuse_nonsense(kind, currency, provider):
    with pytest.raises(ValueError):
        ledger_account_system(kind=kind, currency=currency, provider=provider)
    assert LedgerAccount.objects.count() == 0


# --- posting ----------------------------------------------------------------------------------


def test_balanced_top_up_moves_the_wallet_and_writes_the_entries():
    wallet = WalletFactory(currency="EUR")
    result = top_up(wallet, "50.00", vat="11.50", key="evt_1")

    assert result.created is True
    posted = result.transaction
    assert (posted.kind, posted.idempotency_key) == ("top_up", "evt_1")
    amounts = {entry.account.code: (entry.amount.amount, entry.currency) for entry in posted.entries.all()}
    assert amounts == {
        f"wallet:{wallet.pk}": (Decimal("50.00"), "EUR"),
        "vat_payable:EUR": (Decimal("11.50"), "EUR"),
        "clearing:sandbox:EUR": (Decimal("-61.50"), "EUR"),
    }
    wallet.refresh_from_db()
    assert wallet.balance == Decimal("50.00")
    assert wallet_ledger_balance(wallet=wallet) == Decimal("50.00")
    vat = LedgerAccount.objects.get(code="vat_payable:EUR")
    assert ledger_account_balance(account=vat) == Decimal("11.50")
    clearing = LedgerAccount.objects.get(code="clearing:sandbox:EUR")
    assert ledger_account_balance(account=clearing) == Decimal("-61.50")


def test_entries_are_money_with_the_account_currency():
    wallet = WalletFactory(currency="GBP")
    entry = top_up(wallet, "10.00").transaction.entries.get(account__kind=Kind.WALLET)
    assert entry.amount == Money(Decimal("10.00"), "GBP")
    assert entry.currency == "GBP"


def test_money_lines_are_accepted_in_the_account_currency_only():
    wallet = WalletFactory(currency="USD")
    revenue = ledger_account_system(kind=Kind.ADJUSTMENTS, currency="USD")
    account = ledger_account_for_wallet(wallet=wallet)
    ledger_post(
        idempotency_key="adj-1", kind="adjustment", description="Goodwill",
        lines=[(account, Money("5.00", "USD")), (revenue, Money("-5.00", "USD"))],
    )
    wallet.refresh_from_db()
    assert wallet.balance == Decimal("5.00")
    with pytest.raises(LedgerLineInvalid) as refused:
        ledger_post(
            idempotency_key="adj-2", kind="adjustment", description="Goodwill",
            lines=[(account, Money("5.00", "EUR")), (revenue, Money("-5.00", "USD"))],
        )
    assert refused.value.code == "currency_mismatch"


def test_a_charge_pays_the_seller_and_the_platform_from_the_wallet():
    wallet = WalletFactory(currency="USD")
    seller = SellerFactory()
    top_up(wallet, "20.00")
    result = ledger_post(
        idempotency_key="charge:rental-1:0",
        kind=LedgerTransaction.Kind.CHARGE,
        description="GPU hour",
        lines=[
            (ledger_account_for_wallet(wallet=wallet), Decimal("-2.88")),
            (ledger_account_for_seller(seller=seller, currency="USD"), Decimal("2.59")),
            (ledger_account_system(kind=Kind.PLATFORM_REVENUE, currency="USD"), Decimal("0.29")),
        ],
    )
    assert result.created
    wallet.refresh_from_db()
    assert wallet.balance == Decimal("17.12")
    earnings = LedgerAccount.objects.get(code=f"seller_earnings:{seller.pk}:USD")
    assert ledger_account_balance(account=earnings) == Decimal("2.59")


def test_the_service_stores_the_fx_rate_and_author():
    wallet = WalletFactory(currency="EUR")
    user = UserFactory()
    rate = ExchangeRateFactory()
    account = ledger_account_for_wallet(wallet=wallet)
    clearing = ledger_account_system(kind=Kind.PAYMENT_CLEARING, currency="EUR", provider="bank")
    posted = ledger_post(
        idempotency_key="bank-1", kind="top_up", description="Bank transfer",
        lines=[(account, Decimal("2.65")), (clearing, Decimal("-2.65"))], created_by=user, fx_rate=rate,
    ).transaction
    posted.refresh_from_db()
    assert (posted.created_by, posted.fx_rate) == (user, rate)


# --- refusals before the database -------------------------------------------------------------


def _accounts(currency="EUR"):
    return (
        ledger_account_system(kind=Kind.ADJUSTMENTS, currency=currency),
        ledger_account_system(kind=Kind.PLATFORM_REVENUE, currency=currency),
    )


@pytest.mark.parametrize(
    ("amounts", "code"),
    [
        (("10.005", "-10.005"), "amount_not_rounded"),
        (("0.00", "0.00"), "amount_zero"),
        (("10.00",), "too_few_lines"),
    ],
)
def test_invalid_lines_are_refused_without_a_query(django_assert_num_queries, amounts, code):
    adjustments, revenue = _accounts()
    lines = list(zip((adjustments, revenue), (Decimal(a) for a in amounts), strict=False))
    with django_assert_num_queries(0), pytest.raises(LedgerLineInvalid) as refused:
        ledger_post(idempotency_key="bad", kind="adjustment", description="", lines=lines)
    assert refused.value.code == code
    assert ledger_counts() == (0, 0)


def test_floats_are_refused():
    adjustments, revenue = _accounts()
    with pytest.raises(LedgerLineInvalid) as refused:
        ledger_post(idempotency_key="f", kind="adjustment", description="",
                    lines=[(adjustments, 1.5), (revenue, -1.5)])
    assert refused.value.code == "amount_not_decimal"


def test_unbalanced_lines_are_refused_before_the_database(django_assert_num_queries):
    adjustments, revenue = _accounts()
    with django_assert_num_queries(0), pytest.raises(UnbalancedTransaction) as refused:
        ledger_post(
            idempotency_key="unbalanced", kind="adjustment", description="",
            lines=[(adjustments, Decimal("10.00")), (revenue, Decimal("-9.99"))],
        )
    assert refused.value.code == "unbalanced_transaction"
    assert refused.value.totals == {"EUR": Decimal("0.01")}
    assert ledger_counts() == (0, 0)


def test_lines_must_balance_in_each_currency_not_overall():
    eur, _ = _accounts("EUR")
    usd, _ = _accounts("USD")
    with pytest.raises(UnbalancedTransaction):
        ledger_post(
            idempotency_key="cross", kind="fx", description="",
            lines=[(eur, Decimal("10.00")), (usd, Decimal("-10.00"))],
        )
    assert ledger_counts() == (0, 0)


def test_an_fx_transaction_balances_each_currency_through_the_fx_accounts():
    eur_wallet = WalletFactory(currency="EUR")
    usd_wallet = WalletFactory(currency="USD")
    top_up(usd_wallet, "10.00")
    ledger_post(
        idempotency_key="fx-1", kind="fx", description="Move 10 USD to a EUR wallet",
        lines=[
            (ledger_account_for_wallet(wallet=usd_wallet), Decimal("-10.00")),
            (ledger_account_system(kind=Kind.FX, currency="USD"), Decimal("10.00")),
            (ledger_account_system(kind=Kind.FX, currency="EUR"), Decimal("-9.20")),
            (ledger_account_for_wallet(wallet=eur_wallet), Decimal("9.20")),
        ],
    )
    usd_wallet.refresh_from_db()
    eur_wallet.refresh_from_db()
    assert (usd_wallet.balance, eur_wallet.balance) == (Decimal("0.00"), Decimal("9.20"))


def test_unknown_kind_or_empty_key_is_refused():
    adjustments, revenue = _accounts()
    lines = [(adjustments, Decimal("1.00")), (revenue, Decimal("-1.00"))]
    with pytest.raises(ValueError):
        ledger_post(idempotency_key="k", kind="gift", description="", lines=lines)
    with pytest.raises(ValueError):
        ledger_post(idempotency_key="", kind="adjustment", description="", lines=lines)
    assert ledger_counts() == (0, 0)


# --- insufficient balance ---------------------------------------------------------------------


def test_insufficient_balance_writes_nothing():
    wallet = WalletFactory(currency="EUR")
    other = WalletFactory(currency="EUR")
    top_up(wallet, "10.00")
    revenue = ledger_account_system(kind=Kind.PLATFORM_REVENUE, currency="EUR")
    counts = ledger_counts()

    with pytest.raises(InsufficientBalance) as refused:
        ledger_post(
            idempotency_key="charge-too-much", kind="charge", description="",
            lines=[
                (ledger_account_for_wallet(wallet=other), Decimal("0.01")),
                (ledger_account_for_wallet(wallet=wallet), Decimal("-10.01")),
                (revenue, Decimal("10.00")),
            ],
        )

    assert refused.value.code == "insufficient_balance"
    assert str(refused.value.message) == "Your balance is too low for this payment."
    assert (refused.value.wallet_id, refused.value.shortfall) == (wallet.pk, Decimal("0.01"))
    assert ledger_counts() == counts
    wallet.refresh_from_db()
    other.refresh_from_db()
    assert (wallet.balance, other.balance) == (Decimal("10.00"), Decimal("0.00"))
    assert ledger_account_balance(account=revenue) == Decimal("0.00")
    assert not LedgerTransaction.objects.filter(idempotency_key="charge-too-much").exists()


def test_spending_exactly_the_balance_is_allowed():
    wallet = WalletFactory(currency="EUR")
    top_up(wallet, "10.00")
    ledger_post(
        idempotency_key="all-of-it", kind="charge", description="",
        lines=[
            (ledger_account_for_wallet(wallet=wallet), Decimal("-10.00")),
            (ledger_account_system(kind=Kind.PLATFORM_REVENUE, currency="EUR"), Decimal("10.00")),
        ],
    )
    wallet.refresh_from_db()
    assert wallet.balance == Decimal("0.00")


def test_a_refusal_inside_an_outer_transaction_leaves_the_outer_work_alone():
    wallet = WalletFactory(currency="EUR")
    with transaction.atomic():
        top_up(wallet, "5.00", key="outer-1")
        with pytest.raises(InsufficientBalance):
            ledger_post(
                idempotency_key="outer-2", kind="charge", description="",
                lines=[
                    (ledger_account_for_wallet(wallet=wallet), Decimal("-6.00")),
                    (ledger_account_system(kind=Kind.PLATFORM_REVENUE, currency="EUR"), Decimal("6.00")),
                ],
            )
    wallet.refresh_from_db()
    assert wallet.balance == Decimal("5.00")
    assert list(LedgerTransaction.objects.values_list("idempotency_key", flat=True)) == ["outer-1"]


def test_an_outer_rollback_undoes_the_posting():
    wallet = WalletFactory(currency="EUR")
    with pytest.raises(RuntimeError), transaction.atomic():
        top_up(wallet, "5.00")
        raise RuntimeError("the caller changed its mind")
    wallet.refresh_from_db()
    assert wallet.balance == Decimal("0.00")
    assert ledger_counts() == (0, 0)


# --- idempotency ------------------------------------------------------------------------------


def test_the_same_key_twice_returns_the_first_transaction_and_moves_nothing():
    wallet = WalletFactory(currency="EUR")
    first = top_up(wallet, "50.00", vat="11.50", key="evt_42")
    counts = ledger_counts()
    again = top_up(wallet, "99.00", key="evt_42")

    assert (first.created, again.created) == (True, False)
    assert again.transaction.pk == first.transaction.pk
    assert ledger_counts() == counts
    wallet.refresh_from_db()
    assert wallet.balance == Decimal("50.00")


# --- reversal ---------------------------------------------------------------------------------


def test_reversal_posts_the_negated_lines_and_never_edits():
    wallet = WalletFactory(currency="EUR")
    user = UserFactory()
    original = top_up(wallet, "50.00", vat="11.50", key="evt_9").transaction
    before = sorted(original.entries.values_list("account__code", "amount"))

    result = ledger_reverse(transaction=original, idempotency_key="refund:evt_9",
                            description="Refund", created_by=user)

    reversal = result.transaction
    assert result.created
    assert (reversal.kind, reversal.reverses, reversal.created_by) == ("reversal", original, user)
    assert sorted(reversal.entries.values_list("account__code", "amount")) == sorted(
        (code, -amount) for code, amount in before
    )
    assert sorted(original.entries.values_list("account__code", "amount")) == before
    wallet.refresh_from_db()
    assert wallet.balance == Decimal("0.00")
    vat_payable = LedgerAccount.objects.get(code="vat_payable:EUR")
    assert ledger_account_balance(account=vat_payable) == Decimal("0.00")

    again = ledger_reverse(transaction=original, idempotency_key="refund:evt_9", description="Refund")
    assert (again.created, again.transaction.pk) == (False, reversal.pk)
    with pytest.raises(AlreadyReversed):
        ledger_reverse(transaction=original, idempotency_key="refund:evt_9:bis", description="Refund")
    assert LedgerTransaction.objects.count() == 2


def test_reversing_money_already_spent_is_refused():
    wallet = WalletFactory(currency="EUR")
    original = top_up(wallet, "10.00").transaction
    ledger_post(
        idempotency_key="spend", kind="charge", description="",
        lines=[
            (ledger_account_for_wallet(wallet=wallet), Decimal("-4.00")),
            (ledger_account_system(kind=Kind.PLATFORM_REVENUE, currency="EUR"), Decimal("4.00")),
        ],
    )
    counts = ledger_counts()
    with pytest.raises(InsufficientBalance):
        ledger_reverse(transaction=original, idempotency_key="undo", description="")
    assert ledger_counts() == counts
    wallet.refresh_from_db()
    assert wallet.balance == Decimal("6.00")


def test_reverses_goes_with_the_reversal_kind_only():
    adjustments, revenue = _accounts()
    lines = [(adjustments, Decimal("1.00")), (revenue, Decimal("-1.00"))]
    original = ledger_post(idempotency_key="o", kind="adjustment", description="", lines=lines).transaction
    with pytest.raises(ValueError):
        ledger_post(idempotency_key="r1", kind="adjustment", description="", lines=lines, reverses=original)
    with pytest.raises(ValueError):
        ledger_post(idempotency_key="r2", kind="reversal", description="", lines=lines)
    with pytest.raises(ValueError):
        ledger_post(idempotency_key="k" * 201, kind="adjustment", description="", lines=lines)
    assert ledger_counts() == (1, 2)


# --- many postings at once (the charging run's batches) ------------------------------------------


def _spend(wallet: Wallet, amount: str, key: str) -> Posting:
    return Posting(
        idempotency_key=key, kind=LedgerTransaction.Kind.CHARGE, description=key,
        lines=[
            (ledger_account_for_wallet(wallet=wallet), -Decimal(amount)),
            (ledger_account_system(kind=Kind.PLATFORM_REVENUE, currency=wallet.currency), Decimal(amount)),
        ],
    )


def test_many_postings_are_written_in_order_with_a_constant_number_of_queries(django_assert_num_queries):
    eur, usd = WalletFactory(currency="EUR"), WalletFactory(currency="USD")
    top_up(eur, "10.00")
    top_up(usd, "10.00")
    postings = [_spend(wallet, "1.50", f"spend:{wallet.pk}:{n}") for n in range(3) for wallet in (eur, usd)]

    # savepoint, lock the wallets, look for the keys, two inserts, one update, release
    with django_assert_num_queries(7):
        posted = ledger_post_many(postings=postings)

    assert [row.idempotency_key for row in posted] == [posting.idempotency_key for posting in postings]
    assert all(row.pk for row in posted)
    for wallet in (eur, usd):
        wallet.refresh_from_db()
        assert wallet.balance == Decimal("5.50") == wallet_ledger_balance(wallet=wallet)
    assert LedgerEntry.objects.filter(transaction__in=posted).count() == 12
    assert ledger_post_many(postings=[]) == []


def test_many_postings_are_refused_whole():
    wallet = WalletFactory(currency="EUR")
    top_up(wallet, "3.00")
    ledger_post(**vars(_spend(wallet, "1.00", "taken")))
    counts = ledger_counts()

    with pytest.raises(InsufficientBalance):  # 1.50 + 1.50 of the 2.00 left
        ledger_post_many(postings=[_spend(wallet, "1.50", "a"), _spend(wallet, "1.50", "b")])
    with pytest.raises(KeysAlreadyPosted):
        ledger_post_many(postings=[_spend(wallet, "0.50", "c"), _spend(wallet, "0.50", "taken")])
    with pytest.raises(ValueError):
        ledger_post_many(postings=[_spend(wallet, "0.50", "d"), _spend(wallet, "0.50", "d")])
    unbalanced = Posting(
        idempotency_key="e", kind="charge", description="",
        lines=[(ledger_account_for_wallet(wallet=wallet), Decimal("-1.00")),
               (ledger_account_system(kind=Kind.PLATFORM_REVENUE, currency="EUR"), Decimal("0.99"))],
    )
    with pytest.raises(UnbalancedTransaction):
        ledger_post_many(postings=[_spend(wallet, "0.50", "f"), unbalanced])
    with pytest.raises(ValueError):
        ledger_post_many(postings=[Posting(**{**vars(_spend(wallet, "0.50", "g")), "kind": "reversal"})])

    assert ledger_counts() == counts
    wallet.refresh_from_db()
    assert wallet.balance == Decimal("2.00")


# --- the lock and check both posting functions share ---------------------------------------------


def _books() -> tuple:
    return ledger_counts(), list(Wallet.objects.order_by("pk").values_list("balance", flat=True))


def test_the_lock_and_check_locks_the_wallets_in_ascending_id_and_sums_their_lines():
    first, second = WalletFactory(currency="EUR"), WalletFactory(currency="EUR")
    top_up(first, "5.00")
    top_up(second, "5.00")
    revenue = ledger_account_system(kind=Kind.PLATFORM_REVENUE, currency="EUR")
    lines = [
        (ledger_account_for_wallet(wallet=second), Decimal("-3.00")),
        (ledger_account_for_wallet(wallet=first), Decimal("-1.00")),
        (ledger_account_for_wallet(wallet=second), Decimal("1.00")),
        (revenue, Decimal("3.00")),
    ]
    before = _books()

    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        locked = _wallets_lock_and_check(lines=lines, keys=["new"])

    lock = queries.captured_queries[0]["sql"]
    assert "FOR UPDATE" in lock and 'ORDER BY "accounts_wallet"."id" ASC' in lock
    assert [wallet.pk for wallet in locked.wallets] == [first.pk, second.pk]
    assert locked.changes == {first.pk: Decimal("-1.00"), second.pk: Decimal("-2.00")}
    assert locked.posted == []
    assert _books() == before  # it only reads and locks


def test_the_lock_and_check_refuses_a_wallet_going_below_zero_and_nothing_moves():
    rich, poor = WalletFactory(currency="EUR"), WalletFactory(currency="EUR")
    top_up(rich, "50.00")
    top_up(poor, "2.00")
    revenue = ledger_account_system(kind=Kind.PLATFORM_REVENUE, currency="EUR")
    lines = [
        (ledger_account_for_wallet(wallet=rich), Decimal("-10.00")),
        (ledger_account_for_wallet(wallet=poor), Decimal("-2.01")),
        (revenue, Decimal("12.01")),
    ]
    before = _books()

    with pytest.raises(InsufficientBalance) as refused, transaction.atomic():
        _wallets_lock_and_check(lines=lines, keys=["charge"])

    assert (refused.value.wallet_id, refused.value.balance, refused.value.change) == (
        poor.pk, Decimal("2.00"), Decimal("-2.01")
    )
    assert refused.value.shortfall == Decimal("0.01")
    assert _books() == before


def test_a_key_already_posted_is_found_before_any_balance_is_checked():
    wallet = WalletFactory(currency="EUR")
    top_up(wallet, "3.00")
    first = ledger_post(**vars(_spend(wallet, "2.00", "hour-1")))
    before = _books()  # 1.00 left: spending 2.00 again would be refused, were the key new

    with transaction.atomic():
        locked = _wallets_lock_and_check(lines=_spend(wallet, "2.00", "hour-1").lines, keys=["hour-1"])
    again = ledger_post(**vars(_spend(wallet, "2.00", "hour-1")))
    with pytest.raises(KeysAlreadyPosted, match="hour-1"):
        ledger_post_many(postings=[_spend(wallet, "0.50", "hour-2"), _spend(wallet, "2.00", "hour-1")])

    assert locked.posted == [first.transaction]
    assert (again.transaction, again.created) == (first.transaction, False)
    assert _books() == before


def test_both_posting_functions_refuse_the_same_overdraft_through_the_lock_and_check():
    wallet = WalletFactory(currency="GBP")
    top_up(wallet, "1.00")
    before = _books()

    with pytest.raises(InsufficientBalance) as one:
        ledger_post(**vars(_spend(wallet, "1.01", "one")))
    with pytest.raises(InsufficientBalance) as many:
        ledger_post_many(postings=[_spend(wallet, "0.51", "many-1"), _spend(wallet, "0.50", "many-2")])

    assert one.value.shortfall == many.value.shortfall == Decimal("0.01")
    assert _books() == before
