"""Operators' corrections of buyers' money: refunding a paid top-up (its VAT taken back in
proportion) and adjusting a balance. Each is one balanced ledger transaction with its audit entry;
every refusal leaves the ledger, the wallets and the audit log exactly as they were."""

import threading
import time
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.utils import timezone

from accounts.exceptions import OperatorNotAllowed, ReasonRequired
from accounts.models import AuditAction, AuditEntry, Wallet
from billing.exceptions import CorrectionRefused
from billing.ledger import ledger_account_for_wallet, ledger_account_system
from billing.models import (
    CreditNote,
    LedgerAccount,
    LedgerEntry,
    LedgerTransaction,
    TopUp,
    TopUpRefund,
    TopUpStatus,
)
from billing.selectors import ledger_account_balance
from billing.services import (
    rental_charge_next_hour,
    top_up_create,
    top_up_mark_paid,
    top_up_refund,
    wallet_adjust,
)
from tests.accounts.support import audit_log
from tests.billing.support import (
    START,
    assert_books_consistent,
    buyer_with,
    entries_by_code,
    rental_for,
    totals_by_currency,
)
from tests.factories import ExchangeRateFactory, ProfileFactory, WalletFactory, operator_make
from tests.threads import run_together

Kind = LedgerAccount.Kind
D = Decimal


@pytest.fixture(autouse=True)
def _books_consistent_after_each_test():
    yield
    assert_books_consistent()


@pytest.fixture
def finance():
    return operator_make("finance")


def key() -> str:
    """The admin form's one-time token."""
    return uuid.uuid4().hex


def books() -> tuple:
    """Everything a correction could touch: the ledger, the wallets, the refunds, the audit log."""
    return (
        LedgerTransaction.objects.count(),
        LedgerEntry.objects.count(),
        list(Wallet.objects.order_by("pk").values_list("pk", "balance")),
        TopUpRefund.objects.count(),
        audit_log(),
    )


def paid_top_up(amount: str = "50", currency: str = "EUR", **profile) -> TopUp:
    """A top-up paid through the sandbox, by a buyer with `profile` (a consumer in Portugal unless
    told otherwise: 23 % VAT on top)."""
    user = ProfileFactory(**profile).user
    top_up = top_up_create(
        user=user, amount_text=amount, currency=currency, provider="sandbox", form_token=uuid.uuid4()
    )
    return top_up_mark_paid(top_up_id=top_up.pk)


def refund(top_up: TopUp, operator, amount: str, *, reason: str = "Customer asked", request_key=None):
    return top_up_refund(
        top_up_id=top_up.pk, operator=operator, amount_text=amount, reason=reason,
        request_key=request_key or key(),
    )


def wallet_of(top_up: TopUp) -> Wallet:
    return Wallet.objects.get(user=top_up.user)


def balance_of(code: str) -> Decimal:
    return ledger_account_balance(account=LedgerAccount.objects.get(code=code))


# --- refunding a top-up ----------------------------------------------------------------------------


@pytest.mark.django_db
class TestTopUpRefund:
    def test_full_refund_of_a_portuguese_consumer_top_up_gives_back_the_vat_too(self, finance):
        top_up = paid_top_up("50")  # 50.00 + 11.50 VAT = 61.50 paid
        wallet = wallet_of(top_up)

        made = refund(top_up, finance, "50", reason="  Card charged twice  ", request_key="form-1")

        assert (made.currency, made.amount, made.vat_amount, made.total) == (
            "EUR", D("50.00"), D("11.50"), D("61.50")
        )
        assert (made.reason, made.created_by) == ("Card charged twice", finance)
        posted = made.ledger_transaction
        assert (posted.kind, posted.created_by) == (LedgerTransaction.Kind.REFUND, finance)
        assert posted.idempotency_key == f"top-up:{top_up.pk}:refund:form-1"
        assert entries_by_code(posted) == {
            f"wallet:{wallet.pk}": D("-50.00"),
            "vat_payable:EUR": D("-11.50"),
            "clearing:sandbox:EUR": D("61.50"),
        }
        assert totals_by_currency(posted) == {"EUR": D("0.00")}
        assert wallet_of(top_up).balance == D("0.00")
        # The top-up and its refund cancel out on every account.
        assert balance_of("vat_payable:EUR") == D("0.00")
        assert balance_of("clearing:sandbox:EUR") == D("0.00")

    def test_the_refund_is_in_the_audit_log(self, finance):
        top_up = paid_top_up("50")

        refund(top_up, finance, "33.33", reason="Unused credit")

        entry = AuditEntry.objects.get()
        assert (entry.actor, entry.action, entry.reason) == (
            finance, AuditAction.TOP_UP_REFUND, "Unused credit"
        )
        assert (entry.target_type.model, entry.target_id) == ("topup", str(top_up.pk))
        assert entry.before == {"refunded": "0.00", "wallet_balance": "50.00"}
        assert entry.after == {
            "refunded": "33.33", "wallet_balance": "16.67", "vat_refunded": "7.67", "currency": "EUR",
            "credit_note": CreditNote.objects.get().number,
        }

    def test_partial_refund_takes_back_the_vat_in_proportion_rounded_half_up(self, finance):
        top_up = paid_top_up("50")
        wallet = wallet_of(top_up)

        made = refund(top_up, finance, "33.33")

        # 11.50 x 33.33 / 50 = 7.6659 -> 7.67
        assert (made.amount, made.vat_amount, made.total) == (D("33.33"), D("7.67"), D("41.00"))
        assert entries_by_code(made.ledger_transaction) == {
            f"wallet:{wallet.pk}": D("-33.33"),
            "vat_payable:EUR": D("-7.67"),
            "clearing:sandbox:EUR": D("41.00"),
        }
        assert wallet_of(top_up).balance == D("16.67")
        assert balance_of("vat_payable:EUR") == D("3.83")
        assert balance_of("clearing:sandbox:EUR") == D("-20.50")

    def test_the_last_refund_takes_the_vat_that_is_left_so_no_cent_remains(self, finance):
        top_up = paid_top_up("10")  # 10.00 + 2.30 VAT
        made = [refund(top_up, finance, amount) for amount in ("3.33", "3.33", "3.34")]

        # 2.30 x 3.33 / 10 = 0.7659 -> 0.77 on the first; each on its own would round to 0.77 and
        # give back 2.31: the last one takes what is left instead, so the VAT refunded is 2.30.
        assert made[0].vat_amount == D("0.77")
        assert made[2].vat_amount == D("2.30") - made[0].vat_amount - made[1].vat_amount
        assert sum(r.vat_amount for r in made) == D("2.30")
        assert all(r.total == r.amount + r.vat_amount and r.vat_amount >= 0 for r in made)
        assert sum(r.total for r in made) == top_up.total == D("12.30")
        assert wallet_of(top_up).balance == D("0.00")
        assert balance_of("vat_payable:EUR") == D("0.00")
        assert balance_of("clearing:sandbox:EUR") == D("0.00")

    def test_small_refunds_never_give_back_more_vat_than_was_paid(self, finance):
        top_up = paid_top_up("10")  # 10.00 + 2.30 VAT
        # Each of these rounds its VAT up (9.24 -> 2.1252 -> 2.13; 0.11 -> 0.0253 -> 0.03), so VAT
        # worked out on each refund alone would add up to more than the VAT the buyer paid.
        for amount in ["9.24"] + ["0.11"] * 6 + ["0.10"]:
            refund(top_up, finance, amount)
            vat_refunded = sum(top_up.refunds.values_list("vat_amount", flat=True))
            assert vat_refunded <= D("2.30"), amount
            assert not top_up.refunds.filter(vat_amount__lt=0).exists(), amount

        assert sum(top_up.refunds.values_list("amount", flat=True)) == D("10.00")
        assert sum(top_up.refunds.values_list("vat_amount", flat=True)) == D("2.30")
        assert balance_of("vat_payable:EUR") == D("0.00")
        assert balance_of("clearing:sandbox:EUR") == D("0.00")

    def test_reverse_charged_top_up_is_refunded_without_vat(self, finance):
        top_up = paid_top_up(
            "100", billing_country="DE", billing_type="business", company_name="GPU Labs GmbH",
            vat_id="DE136695976", vat_id_status="valid", vat_id_checked_at=timezone.now(),
        )
        assert top_up.vat_kind == "reverse_charge"

        made = refund(top_up, finance, "40")

        assert (made.amount, made.vat_amount, made.total) == (D("40.00"), D("0.00"), D("40.00"))
        assert entries_by_code(made.ledger_transaction) == {
            f"wallet:{wallet_of(top_up).pk}": D("-40.00"),
            "clearing:sandbox:EUR": D("40.00"),
        }
        assert wallet_of(top_up).balance == D("60.00")

    def test_top_up_from_outside_the_eu_is_refunded_in_its_currency_without_vat(self, finance):
        top_up = paid_top_up("20", currency="USD", billing_country="US")

        made = refund(top_up, finance, "20")

        assert (made.currency, made.vat_amount, made.total) == ("USD", D("0.00"), D("20.00"))
        assert entries_by_code(made.ledger_transaction) == {
            f"wallet:{wallet_of(top_up).pk}": D("-20.00"),
            "clearing:sandbox:USD": D("20.00"),
        }
        assert wallet_of(top_up).balance == D("0.00")

    def test_an_amount_written_with_a_decimal_comma_is_read(self, finance):
        top_up = paid_top_up("50")
        assert refund(top_up, finance, " 12,50 ").amount == D("12.50")

    def test_refunds_never_exceed_the_top_up(self, finance):
        top_up = paid_top_up("50")
        refund(top_up, finance, "30")
        before = books()

        with pytest.raises(CorrectionRefused) as refused:
            refund(top_up, finance, "20.01")

        assert refused.value.code == "refund_exceeds_top_up"
        assert "20.00" in str(refused.value)  # what is left to refund
        assert books() == before
        refund(top_up, finance, "20.00")
        with pytest.raises(CorrectionRefused) as refused:
            refund(top_up, finance, "0.01")
        assert refused.value.code == "refund_exceeds_top_up"

    def test_a_refund_above_the_top_up_is_refused_even_when_the_wallet_holds_more(self, finance):
        top_up = paid_top_up("50")
        paid_top_up_again = top_up_create(
            user=top_up.user, amount_text="100", currency="EUR", provider="sandbox", form_token=uuid.uuid4()
        )
        top_up_mark_paid(top_up_id=paid_top_up_again.pk)
        assert wallet_of(top_up).balance == D("150.00")
        before = books()

        with pytest.raises(CorrectionRefused) as refused:
            refund(top_up, finance, "50.01")

        assert refused.value.code == "refund_exceeds_top_up"
        assert books() == before

    def test_a_refund_above_what_the_buyer_has_left_is_refused(self, finance, time_machine):
        time_machine.move_to(START + timedelta(minutes=1), tick=False)
        ExchangeRateFactory(currency="EUR", rate=D("0.92000000"))
        top_up = paid_top_up("50")
        rental = rental_for(top_up.user, price="8.00", gpus=4)  # 32.00 USD an hour
        rental_charge_next_hour(rental_id=rental.pk, now=START)  # 32.00 x 0.92 = 29.44 EUR spent
        assert wallet_of(top_up).balance == D("20.56")
        before = books()

        with pytest.raises(CorrectionRefused) as refused:
            refund(top_up, finance, "25")

        assert refused.value.code == "balance_too_low"
        assert "20.56" in str(refused.value)
        assert books() == before
        assert refund(top_up, finance, "20.56").vat_amount == D("4.73")  # 11.50 x 20.56 / 50 = 4.7288
        assert wallet_of(top_up).balance == D("0.00")

    @pytest.mark.parametrize("status", [TopUpStatus.PENDING, TopUpStatus.FAILED])
    def test_a_top_up_that_was_not_paid_is_not_refunded(self, finance, status):
        user = ProfileFactory().user
        top_up = top_up_create(
            user=user, amount_text="50", currency="EUR", provider="bank", form_token=uuid.uuid4()
        )
        TopUp.objects.filter(pk=top_up.pk).update(status=status)
        before = books()

        with pytest.raises(CorrectionRefused) as refused:
            refund(top_up, finance, "10")

        assert refused.value.code == "top_up_not_paid"
        assert books() == before

    @pytest.mark.parametrize(
        ("amount", "code"),
        [
            ("abc", "amount_invalid"),
            ("1.234", "amount_invalid"),
            ("", "amount_invalid"),
            ("   ", "amount_invalid"),
            ("NaN", "amount_invalid"),
            ("1e3", "amount_invalid"),
            ("1,000.00", "amount_invalid"),
            ("-5", "amount_not_positive"),
            ("0", "amount_not_positive"),
            ("0.00", "amount_not_positive"),
        ],
    )
    def test_an_amount_that_is_not_a_positive_amount_is_refused(self, finance, amount, code):
        top_up = paid_top_up("50")
        before = books()

        with pytest.raises(CorrectionRefused) as refused:
            refund(top_up, finance, amount)

        assert refused.value.code == code
        assert books() == before

    def test_the_same_form_sent_twice_refunds_once(self, finance):
        top_up = paid_top_up("50")
        first = refund(top_up, finance, "10", request_key="form-7")
        before = books()

        again = refund(top_up, finance, "10", request_key="form-7")

        assert again.pk == first.pk
        assert books() == before
        assert wallet_of(top_up).balance == D("40.00")
        assert AuditEntry.objects.count() == 1

    def test_two_forms_are_two_refunds(self, finance):
        top_up = paid_top_up("50")
        refund(top_up, finance, "10")
        refund(top_up, finance, "10")
        assert wallet_of(top_up).balance == D("30.00")
        assert (TopUpRefund.objects.count(), AuditEntry.objects.count()) == (2, 2)

    @pytest.mark.parametrize("request_key", ["", "   ", "k" * 65])
    def test_a_form_without_its_token_is_refused(self, finance, request_key):
        top_up = paid_top_up("50")
        before = books()
        with pytest.raises(CorrectionRefused) as refused:
            top_up_refund(top_up_id=top_up.pk, operator=finance, amount_text="10", reason="x",
                          request_key=request_key)
        assert refused.value.code == "request_key_missing"
        assert books() == before

    def test_support_may_not_refund(self):
        top_up = paid_top_up("50")
        before = books()

        with pytest.raises(OperatorNotAllowed):
            refund(top_up, operator_make("support"), "10")

        assert books() == before
        assert not AuditEntry.objects.exists()

    @pytest.mark.parametrize("reason", ["", "   ", None])
    def test_a_refund_needs_a_reason(self, finance, reason):
        top_up = paid_top_up("50")
        before = books()

        with pytest.raises(ReasonRequired):
            top_up_refund(top_up_id=top_up.pk, operator=finance, amount_text="10", reason=reason,
                          request_key=key())

        assert books() == before


# --- adjusting a balance ----------------------------------------------------------------------------


def adjust(wallet: Wallet, operator, amount: str, *, reason: str = "Goodwill", request_key=None):
    return wallet_adjust(
        wallet_id=wallet.pk, operator=operator, amount_text=amount, reason=reason,
        request_key=request_key or key(),
    )


def funded(currency: str = "EUR", amount: str = "50.00") -> Wallet:
    return Wallet.objects.get(user=buyer_with(currency, amount))


@pytest.mark.django_db
class TestWalletAdjust:
    def test_adding_to_a_balance(self, finance):
        wallet = funded("EUR", "50.00")

        made = adjust(wallet, finance, "12.50", reason=" Outage on 1 December ")

        assert made.amount == D("12.50")
        assert made.wallet.balance == D("62.50")
        assert Wallet.objects.get(pk=wallet.pk).balance == D("62.50")
        posted = made.transaction
        assert (posted.kind, posted.created_by) == (LedgerTransaction.Kind.ADJUSTMENT, finance)
        assert entries_by_code(posted) == {f"wallet:{wallet.pk}": D("12.50"), "adjustments:EUR": D("-12.50")}
        entry = AuditEntry.objects.get()
        assert (entry.actor, entry.action, entry.reason) == (
            finance, AuditAction.WALLET_ADJUST, "Outage on 1 December"
        )
        assert (entry.target_type.model, entry.target_id) == ("wallet", str(wallet.pk))
        assert entry.before == {"balance": "50.00", "currency": "EUR"}
        assert entry.after == {"balance": "62.50", "currency": "EUR", "amount": "12.50"}

    def test_taking_from_a_balance(self, finance):
        wallet = funded("EUR", "50.00")

        made = adjust(wallet, finance, "-20")

        assert (made.amount, Wallet.objects.get(pk=wallet.pk).balance) == (D("-20.00"), D("30.00"))
        assert entries_by_code(made.transaction) == {
            f"wallet:{wallet.pk}": D("-20.00"), "adjustments:EUR": D("20.00")
        }
        assert AuditEntry.objects.get().after == {"balance": "30.00", "currency": "EUR", "amount": "-20.00"}

    @pytest.mark.parametrize("currency", ["USD", "GBP"])
    def test_balanced_against_the_adjustments_account_of_the_wallets_currency(self, finance, currency):
        wallet = WalletFactory(currency=currency)

        made = adjust(wallet, finance, "7.05")

        assert entries_by_code(made.transaction) == {
            f"wallet:{wallet.pk}": D("7.05"), f"adjustments:{currency}": D("-7.05")
        }
        assert totals_by_currency(made.transaction) == {currency: D("0.00")}
        assert Wallet.objects.get(pk=wallet.pk).balance == D("7.05")

    def test_taking_everything_leaves_zero(self, finance):
        wallet = funded("EUR", "50.00")
        adjust(wallet, finance, "-50.00")
        assert Wallet.objects.get(pk=wallet.pk).balance == D("0.00")

    def test_a_balance_never_goes_below_zero(self, finance):
        wallet = funded("EUR", "50.00")
        before = books()

        with pytest.raises(CorrectionRefused) as refused:
            adjust(wallet, finance, "-50.01")

        assert refused.value.code == "balance_too_low"
        assert "50.00" in str(refused.value)
        assert books() == before

    @pytest.mark.parametrize(
        ("amount", "code"),
        [("0", "amount_zero"), ("0.00", "amount_zero"), ("-0", "amount_zero"),
         ("abc", "amount_invalid"), ("1.234", "amount_invalid"), ("", "amount_invalid")],
    )
    def test_zero_or_an_unreadable_amount_is_refused(self, finance, amount, code):
        wallet = funded("EUR", "50.00")
        before = books()

        with pytest.raises(CorrectionRefused) as refused:
            adjust(wallet, finance, amount)

        assert refused.value.code == code
        assert books() == before

    @pytest.mark.parametrize("reason", ["", "  \n", None])
    def test_an_adjustment_needs_a_reason(self, finance, reason):
        wallet = funded("EUR", "50.00")
        before = books()
        with pytest.raises(ReasonRequired):
            adjust(wallet, finance, "5", reason=reason)
        assert books() == before

    def test_support_may_not_adjust(self):
        wallet = funded("EUR", "50.00")
        before = books()
        with pytest.raises(OperatorNotAllowed):
            adjust(wallet, operator_make("support"), "5")
        assert books() == before

    def test_the_same_form_sent_twice_moves_money_once(self, finance):
        wallet = funded("EUR", "50.00")
        first = adjust(wallet, finance, "5", request_key="form-3")
        before = books()

        again = adjust(wallet, finance, "5", request_key="form-3")

        assert again.transaction.pk == first.transaction.pk
        assert books() == before
        assert Wallet.objects.get(pk=wallet.pk).balance == D("55.00")
        assert AuditEntry.objects.count() == 1


# --- at the same moment, from real threads ----------------------------------------------------------


def waiting_for_locks() -> int:
    """How many connections to this database are waiting for a lock right now."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def behind_a_lock(row, count: int, work) -> tuple[list, list[BaseException]]:
    """Hold `row` locked in another connection, start `count` threads running `work`, give them
    the time to queue behind that lock (the services lock it), then let go: they all got past
    whatever runs before the lock at the same time, which is the race of a form sent twice."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                type(row).objects.select_for_update().get(pk=row.pk)
                held.set()
                release.wait(timeout=20)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(timeout=10)
    outcome: dict = {}

    def start() -> None:
        outcome["results"], outcome["errors"] = run_together(count, work)

    workers = threading.Thread(target=start)
    workers.start()
    deadline = time.monotonic() + 5
    while waiting_for_locks() < count and time.monotonic() < deadline:
        time.sleep(0.02)
    release.set()
    holder.join(timeout=20)
    workers.join(timeout=60)
    return outcome["results"], outcome["errors"]


@pytest.mark.django_db(transaction=True)
def test_concurrent_adjustments_of_one_wallet_add_up_exactly():
    finance = operator_make("finance")
    wallet = funded("EUR", "100.00")
    amounts = ["12.34", "-7.50", "0.01", "25.00", "-30.00", "3.33", "-0.99", "8.80"]

    results, errors = run_together(
        len(amounts), lambda i: adjust(wallet, finance, amounts[i], reason=f"Thread {i}")
    )

    assert errors == []
    assert len(results) == len(amounts)
    assert Wallet.objects.get(pk=wallet.pk).balance == D("100.00") + sum(D(a) for a in amounts)  # 110.99
    assert Wallet.objects.get(pk=wallet.pk).balance == D("110.99")
    assert balance_of("adjustments:EUR") == -sum(D(a) for a in amounts)
    # Each entry saw the balance under the wallet's lock: together they chain from 100.00 to 110.99.
    entries = list(AuditEntry.objects.filter(action=AuditAction.WALLET_ADJUST))
    assert len(entries) == len(amounts)
    befores = sorted([D(e.before["balance"]) for e in entries] + [D("110.99")])
    afters = sorted([D(e.after["balance"]) for e in entries] + [D("100.00")])
    assert befores == afters
    for e in entries:
        assert D(e.after["balance"]) - D(e.before["balance"]) == D(e.after["amount"])
    assert_books_consistent()


@pytest.mark.django_db(transaction=True)
def test_concurrent_withdrawals_never_take_a_wallet_below_zero():
    finance = operator_make("finance")
    wallet = funded("EUR", "50.00")

    results, errors = run_together(5, lambda i: adjust(wallet, finance, "-20.00"))

    assert len(results) == 2
    assert len(errors) == 3 and {getattr(e, "code", e) for e in errors} == {"balance_too_low"}
    assert Wallet.objects.get(pk=wallet.pk).balance == D("10.00")
    assert AuditEntry.objects.count() == 2
    assert_books_consistent()


@pytest.mark.django_db(transaction=True)
def test_an_adjustment_form_sent_twice_at_the_same_moment_moves_once_and_is_audited_once():
    finance = operator_make("finance")
    wallet = funded("EUR", "50.00")
    ledger_account_system(kind=Kind.ADJUSTMENTS, currency="EUR")
    ledger_account_for_wallet(wallet=wallet)

    results, errors = behind_a_lock(
        wallet, 2, lambda i: adjust(wallet, finance, "5.00", request_key="form-9")
    )

    assert errors == []
    assert {made.transaction.pk for made in results} == {
        LedgerTransaction.objects.get(idempotency_key="adjustment:form-9").pk
    }
    assert Wallet.objects.get(pk=wallet.pk).balance == D("55.00")
    assert AuditEntry.objects.filter(action=AuditAction.WALLET_ADJUST).count() == 1
    assert_books_consistent()


@pytest.mark.django_db(transaction=True)
def test_a_refund_form_sent_twice_at_the_same_moment_refunds_once():
    finance = operator_make("finance")
    top_up = paid_top_up("50")

    results, errors = behind_a_lock(
        top_up, 2, lambda i: refund(top_up, finance, "10", request_key="form-5")
    )

    assert errors == []
    assert len({made.pk for made in results}) == 1
    assert wallet_of(top_up).balance == D("40.00")
    assert (TopUpRefund.objects.count(), AuditEntry.objects.count()) == (1, 1)
    assert_books_consistent()
