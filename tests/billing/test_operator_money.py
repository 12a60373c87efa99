"""Operators moving money (finance): crediting bank transfers, deciding payouts, ending a rental
with a refund, loading exchange rates; and the operations page's figures. Support may look but
not move money; every refusal leaves the books and the audit log as they were."""

import json
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.exceptions import OperatorNotAllowed, ReasonRequired
from accounts.models import AuditAction, AuditEntry, Wallet
from billing.exceptions import PayoutRefused, RatesFileInvalid, TopUpRejected
from billing.models import (
    ExchangeRate,
    Invoice,
    LedgerEntry,
    LedgerTransaction,
    Payout,
    PayoutStatus,
    ReconciliationRun,
    RentalCharge,
    TopUp,
    TopUpStatus,
)
from billing.selectors import CurrencyPosition, TradingWindow, operations_summary, payout_available
from billing.services import (
    exchange_rate_save,
    exchange_rates_load_by_operator,
    operator_refund_idempotency_key,
    payout_mark_paid,
    payout_reject,
    payout_request,
    rental_charge_next_hour,
    rental_end_by_operator,
    top_up_create,
    top_up_credit_bank_transfer,
    top_up_mark_paid,
)
from exchange.exceptions import RentalEnded, RentalNotFound
from exchange.models import EndReason, Rental, RentalState
from exchange.services import rental_end
from sellers.services import application_save
from tests.accounts.support import audit_log
from tests.billing.support import (
    START,
    assert_books_consistent,
    balance,
    buyer_with,
    earn,
    entries_by_code,
    member,
    rental_for,
    totals_by_currency,
)
from tests.factories import (
    ExchangeRateFactory,
    OfferFactory,
    ProfileFactory,
    RentalFactory,
    SellerFactory,
    UserFactory,
    operator_make,
)
from tests.sellers.support import submitted

pytestmark = pytest.mark.django_db

D = Decimal


@pytest.fixture(autouse=True)
def _books_consistent_after_each_test():
    yield
    assert_books_consistent()


@pytest.fixture
def finance():
    return operator_make("finance")


@pytest.fixture
def support():
    return operator_make("support")


def books() -> tuple:
    """The ledger, the wallets, top-ups, payouts, rentals and the audit log."""
    return (
        LedgerTransaction.objects.count(),
        LedgerEntry.objects.count(),
        list(Wallet.objects.order_by("pk").values_list("pk", "balance")),
        list(TopUp.objects.order_by("pk").values_list("pk", "status", "credited_by")),
        Invoice.objects.count(),
        list(Payout.objects.order_by("pk").values_list("pk", "status", "decided_by")),
        list(Rental.objects.order_by("pk").values_list("pk", "state", "end_reason", "ended_at")),
        audit_log(),
    )


# --- crediting a bank transfer -------------------------------------------------------------------


def bank_top_up(amount: str = "200") -> TopUp:
    user = ProfileFactory().user  # a consumer in Portugal: 23 % VAT on top
    return top_up_create(
        user=user, amount_text=amount, currency="EUR", provider="bank", form_token=uuid.uuid4()
    )


def top_up_credit(top_up, operator, *, reason="Transfer seen on the statement", reference=None):
    return top_up_credit_bank_transfer(
        reference=top_up.reference if reference is None else reference, operator=operator, reason=reason
    )


def test_finance_credits_a_bank_transfer_and_the_audit_log_says_why(finance):
    top_up = bank_top_up("200")

    credited = top_up_credit(top_up, finance, reason="  Statement 2026-12-01, line 14  ")

    assert (credited.status, credited.credited_by) == (TopUpStatus.PAID, finance)
    wallet = Wallet.objects.get(user=top_up.user)
    assert (wallet.currency, wallet.balance) == ("EUR", D("200.00"))
    assert entries_by_code(credited.ledger_transaction) == {
        "clearing:bank:EUR": D("-246.00"), f"wallet:{wallet.pk}": D("200.00"), "vat_payable:EUR": D("46.00"),
    }
    assert credited.ledger_transaction.created_by == finance
    assert Invoice.objects.filter(top_up=credited).count() == 1
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action, entry.reason) == (
        finance, AuditAction.TOP_UP_CREDIT, "Statement 2026-12-01, line 14"
    )
    assert (entry.target_type.model, entry.target_id) == ("topup", str(top_up.pk))
    assert entry.before == {"status": "pending"}
    assert entry.after == {"status": "paid", "amount": "200.00", "total": "246.00", "currency": "EUR"}


def test_crediting_the_same_transfer_twice_credits_once(finance):
    top_up = bank_top_up("200")
    top_up_credit(top_up, finance)
    before = books()

    with pytest.raises(TopUpRejected) as refused:
        top_up_credit(top_up, operator_make("finance"), reference=f" {top_up.reference.lower()} ")

    assert refused.value.code == "already_credited"
    assert books() == before
    assert Wallet.objects.get(user=top_up.user).balance == D("200.00")
    assert AuditEntry.objects.count() == 1


def test_support_may_not_credit_a_transfer(support):
    top_up = bank_top_up()
    before = books()

    with pytest.raises(OperatorNotAllowed):
        top_up_credit(top_up, support)

    assert books() == before
    assert TopUp.objects.get(pk=top_up.pk).status == TopUpStatus.PENDING
    assert not Wallet.objects.filter(user=top_up.user).exists()


@pytest.mark.parametrize("reason", ["", "   ", None])
def test_crediting_a_transfer_needs_a_reason(finance, reason):
    top_up = bank_top_up()
    before = books()

    with pytest.raises(ReasonRequired):
        top_up_credit(top_up, finance, reason=reason)

    assert books() == before


def test_an_unknown_or_closed_reference_credits_nothing(finance):
    top_up = bank_top_up()
    TopUp.objects.filter(pk=top_up.pk).update(status=TopUpStatus.CANCELLED)
    before = books()
    for reference, code in (("EXC-NOPE2345", "reference_unknown"), (top_up.reference, "top_up_closed")):
        with pytest.raises(TopUpRejected) as refused:
            top_up_credit(top_up, finance, reference=reference)
        assert refused.value.code == code
    assert books() == before


# --- payouts ---------------------------------------------------------------------------------------


@pytest.fixture
def payout():
    """A seller with 300.00 USD of earnings that asked for 120.50 of them."""
    seller = SellerFactory(name="Alpha GPU Lda")
    earn(seller, "300.00")
    return payout_request(seller_id=seller.pk, requested_by=member(seller), amount_text="120.50")


def test_finance_marks_a_payout_paid_with_an_audit_entry(finance, payout):
    paid = payout_mark_paid(payout_id=payout.pk, operator=finance, reason=" SEPA ref 2026-12-02/7 ")

    assert (paid.status, paid.decided_by) == (PayoutStatus.PAID, finance)
    assert entries_by_code(paid.settlement) == {
        "payouts_pending:USD": D("-120.50"), "clearing:bank:USD": D("120.50")
    }
    assert paid.settlement.created_by == finance
    assert balance("payouts_pending:USD") == D("0.00")
    assert payout_available(seller=payout.seller) == D("179.50")
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action, entry.reason) == (
        finance, AuditAction.PAYOUT_PAY, "SEPA ref 2026-12-02/7"
    )
    assert (entry.target_type.model, entry.target_id) == ("payout", str(payout.pk))
    assert entry.before == {"status": "requested"}
    assert entry.after == {"status": "paid", "amount": "120.50", "currency": "USD",
                           "bank_reference": "SEPA ref 2026-12-02/7"}
    assert paid.bank_reference == "SEPA ref 2026-12-02/7"


def test_a_payout_is_paid_once(finance, payout):
    payout_mark_paid(payout_id=payout.pk, operator=finance, reason="SEPA 1")
    before = books()

    for decide in (payout_mark_paid, payout_reject):
        with pytest.raises(PayoutRefused) as refused:
            decide(payout_id=payout.pk, operator=finance, reason="again")
        assert refused.value.code == "payout_already_paid"

    assert books() == before
    assert AuditEntry.objects.count() == 1


def test_finance_rejects_a_payout_and_the_earnings_come_back(finance, payout):
    rejected = payout_reject(payout_id=payout.pk, operator=finance, reason=" IBAN closed ")

    assert (rejected.status, rejected.rejection_reason, rejected.decided_by) == (
        PayoutStatus.REJECTED, "IBAN closed", finance
    )
    assert entries_by_code(rejected.settlement) == {
        "payouts_pending:USD": D("-120.50"), f"seller_earnings:{payout.seller_id}:USD": D("120.50")
    }
    assert payout_available(seller=payout.seller) == D("300.00")
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.reason, entry.actor) == (AuditAction.PAYOUT_REJECT, "IBAN closed", finance)
    assert entry.before == {"status": "requested"}
    assert entry.after == {"status": "rejected", "amount": "120.50", "currency": "USD"}


@pytest.mark.parametrize("decide", [payout_mark_paid, payout_reject])
def test_support_may_not_decide_a_payout(support, payout, decide):
    before = books()

    with pytest.raises(OperatorNotAllowed):
        decide(payout_id=payout.pk, operator=support, reason="Looks fine")

    assert books() == before
    assert Payout.objects.get(pk=payout.pk).status == PayoutStatus.REQUESTED


def test_paying_a_payout_needs_a_reference(finance, payout):
    before = books()
    with pytest.raises(PayoutRefused) as refused:
        payout_mark_paid(payout_id=payout.pk, operator=finance, reason="  ")
    assert refused.value.code == "payout_reference_missing"
    with pytest.raises(PayoutRefused) as refused:
        payout_reject(payout_id=payout.pk, operator=finance, reason="")
    assert refused.value.code == "payout_reason_missing"
    assert books() == before


# --- ending a rental, with a refund ---------------------------------------------------------------

# 20 minutes and 30 seconds into the first hour: 39 whole minutes of it are unused.
ENDED_AT = START + timedelta(minutes=20, seconds=30)


@pytest.fixture
def rates():
    ExchangeRateFactory(currency="EUR", rate=D("0.92000000"))
    ExchangeRateFactory(currency="GBP", rate=D("0.79000000"))


def charged_rental(currency: str, amount: str = "100.00", **fields) -> Rental:
    rental = rental_for(buyer_with(currency, amount), **fields)
    rental_charge_next_hour(rental_id=rental.pk, now=START)
    rental.refresh_from_db()
    return rental


@pytest.mark.usefixtures("rates")
class TestRentalEndByOperator:
    @pytest.fixture(autouse=True)
    def _clock(self, time_machine):
        time_machine.move_to(ENDED_AT, tick=False)

    def test_mid_hour_the_buyer_gets_the_unused_minutes_back(self, finance):
        rental = charged_rental("USD", gpus=2, price="1.44")  # 2.88 an hour: seller 2.59, fee 0.29
        server, seller = rental.server, rental.server.seller
        assert server.gpus_rented == 2

        refund = rental_end_by_operator(rental_id=rental.pk, operator=finance, reason=" Abuse report #12 ")

        # 39/60 of each line, half-up: 1.872 -> 1.87 and 1.6835 -> 1.68; the fee is what is left, 0.19.
        assert (refund.unused_minutes, refund.amount, refund.currency) == (39, D("1.87"), "USD")
        assert (refund.cost_usd, refund.seller_earnings_usd, refund.fee_usd) == (
            D("1.87"), D("1.68"), D("0.19")
        )
        posted = refund.transaction
        assert posted.idempotency_key == operator_refund_idempotency_key(rental_id=rental.pk)
        assert (posted.kind, posted.created_by) == (LedgerTransaction.Kind.REFUND, finance)
        assert entries_by_code(posted) == {
            f"wallet:{rental.buyer.wallet.pk}": D("1.87"),
            f"seller_earnings:{seller.pk}:USD": D("-1.68"),
            "platform_revenue:USD": D("-0.19"),
        }
        assert totals_by_currency(posted) == {"USD": D("0.00")}
        assert Wallet.objects.get(user=rental.buyer).balance == D("98.99")  # 100 - 2.88 + 1.87
        rental.refresh_from_db()
        assert (rental.state, rental.end_reason, rental.ended_at) == (
            RentalState.ENDED, EndReason.OPERATOR, ENDED_AT
        )
        server.refresh_from_db()
        assert server.gpus_rented == 0
        entry = AuditEntry.objects.get()
        assert (entry.actor, entry.action, entry.reason) == (
            finance, AuditAction.RENTAL_END, "Abuse report #12"
        )
        assert (entry.target_type.model, entry.target_id) == ("rental", str(rental.pk))
        assert entry.before == {"state": "running"}
        assert entry.after == {"state": "ended", "refund": "1.87", "currency": "USD", "unused_minutes": 39}

    def test_a_euro_wallet_is_refunded_in_euros_at_the_rate_of_the_charge(self, finance):
        rental = charged_rental("EUR")  # 2.88 USD -> 2.65 EUR at 0.92
        charge = rental.charges.get()
        ExchangeRateFactory(currency="EUR", rate=D("0.95000000"), valid_from=START + timedelta(minutes=10))

        refund = rental_end_by_operator(rental_id=rental.pk, operator=finance, reason="Buyer asked")

        assert refund.transaction.fx_rate_id == charge.fx_rate_id
        # 2.65 x 39/60 = 1.7225 -> 1.72 EUR; in dollars 1.87 = 1.68 to the seller + 0.19 fee.
        assert entries_by_code(refund.transaction) == {
            f"wallet:{rental.buyer.wallet.pk}": D("1.72"),
            "fx:EUR": D("-1.72"),
            "fx:USD": D("1.87"),
            f"seller_earnings:{rental.server.seller_id}:USD": D("-1.68"),
            "platform_revenue:USD": D("-0.19"),
        }
        assert totals_by_currency(refund.transaction) == {"EUR": D("0.00"), "USD": D("0.00")}
        assert Wallet.objects.get(user=rental.buyer).balance == D("99.07")  # 100 - 2.65 + 1.72
        assert AuditEntry.objects.get().after["refund"] == "1.72"

    def test_a_rental_not_charged_yet_ends_without_a_refund(self, finance):
        rental = rental_for(buyer_with("USD", "10.00"))  # starting: billing has not charged it
        before = LedgerTransaction.objects.count()

        refund = rental_end_by_operator(rental_id=rental.pk, operator=finance, reason="Stuck")

        assert (refund.amount, refund.transaction) == (D("0.00"), None)
        assert LedgerTransaction.objects.count() == before
        rental.refresh_from_db()
        assert (rental.state, rental.end_reason) == (RentalState.ENDED, EndReason.OPERATOR)
        assert AuditEntry.objects.get().after == {
            "state": "ended", "refund": "0.00", "currency": "", "unused_minutes": 0
        }
        assert AuditEntry.objects.get().before == {"state": "starting"}

    def test_ending_twice_is_refused_and_moves_nothing(self, finance):
        rental = charged_rental("USD")
        rental_end_by_operator(rental_id=rental.pk, operator=finance, reason="Abuse")
        before = books()

        with pytest.raises(RentalEnded):
            rental_end_by_operator(rental_id=rental.pk, operator=finance, reason="Abuse, again")

        assert books() == before
        assert AuditEntry.objects.count() == 1

    def test_a_rental_the_buyer_stopped_is_not_refunded_by_an_operator(self, finance):
        rental = charged_rental("USD")
        rental_end(rental_id=rental.pk, reason=EndReason.STOPPED_BY_BUYER)
        before = books()
        with pytest.raises(RentalEnded):
            rental_end_by_operator(rental_id=rental.pk, operator=finance, reason="Refund please")
        assert books() == before

    def test_an_unknown_rental(self, finance):
        with pytest.raises(RentalNotFound):
            rental_end_by_operator(rental_id=999_999, operator=finance, reason="?")

    def test_support_may_not_end_a_rental(self, support):
        rental = charged_rental("USD")
        before = books()

        with pytest.raises(OperatorNotAllowed):
            rental_end_by_operator(rental_id=rental.pk, operator=support, reason="Abuse")

        assert books() == before
        rental.refresh_from_db()
        assert rental.state == RentalState.RUNNING
        rental.server.refresh_from_db()
        assert rental.server.gpus_rented == 1

    def test_ending_a_rental_needs_a_reason(self, finance):
        rental = charged_rental("USD")
        before = books()
        with pytest.raises(ReasonRequired):
            rental_end_by_operator(rental_id=rental.pk, operator=finance, reason=" ")
        assert books() == before


# --- exchange rates --------------------------------------------------------------------------------


def rates_file(**changes) -> bytes:
    data = {
        "base": "USD", "valid_from": "2026-12-01T00:00:00Z", "source": "ECB reference rates",
        "rates": {"EUR": "0.9312", "GBP": 0.7845, "USD": "1"},
    }
    data.update(changes)
    return json.dumps(data).encode()


def rate_rows() -> list[tuple]:
    return list(ExchangeRate.objects.order_by("pk").values_list("currency", "rate", "valid_from", "source"))


def test_finance_loads_a_rates_file_with_one_audit_entry(finance):
    added = exchange_rates_load_by_operator(
        operator=finance, content=rates_file(), name="rates-2026-12-01.json", reason="Monthly rates"
    )

    valid_from = datetime(2026, 12, 1, tzinfo=UTC)
    assert added == 2
    assert rate_rows() == [
        ("EUR", D("0.93120000"), valid_from, "ECB reference rates"),
        ("GBP", D("0.78450000"), valid_from, "ECB reference rates"),
    ]
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action, entry.reason) == (
        finance, AuditAction.EXCHANGE_RATES_LOAD, "Monthly rates"
    )
    assert entry.target_type.model == "exchangerate"
    assert entry.after == {
        "file": "rates-2026-12-01.json", "valid_from": "2026-12-01T00:00:00Z", "added": 2,
        "rates": {"EUR": "0.93120000", "GBP": "0.78450000", "USD": "1.00000000"},
    }


def test_loading_the_same_file_again_adds_no_rate(finance):
    exchange_rates_load_by_operator(operator=finance, content=rates_file(), name="a.json")
    assert exchange_rates_load_by_operator(operator=finance, content=rates_file(), name="a.json") == 0
    assert ExchangeRate.objects.count() == 2


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"\xff\xfe\x00garbage", id="not_utf8"),
        pytest.param(b"", id="empty"),
        pytest.param(b"rates: EUR 0.93", id="not_json"),
        pytest.param(b"[1, 2, 3]", id="not_an_object"),
        pytest.param(b'{"valid_from": "2026-12-01T00:00:00Z"}', id="no_rates"),
        pytest.param(b"[" * 100_000, id="deeply_nested_json"),
        pytest.param(rates_file(rates={"EUR": "-0.93"}), id="negative_rate"),
        pytest.param(rates_file(rates={"EUR": "0"}), id="zero_rate"),
        pytest.param(rates_file(rates={"EUR": "abc"}), id="rate_not_a_number"),
        pytest.param(rates_file(rates={"EUR": "NaN"}), id="rate_nan"),
        pytest.param(rates_file(rates={"EUR": "0.123456789"}), id="rate_too_many_decimals"),
        pytest.param(rates_file(rates={"EUR": True}), id="rate_boolean"),
        pytest.param(rates_file(rates={"EUR": "0.93", "JPY": "150"}), id="unknown_currency"),
        pytest.param(rates_file(rates={"EUR": "0.93", "USD": "1.1"}), id="dollar_not_one"),
        pytest.param(rates_file(rates={"USD": "1"}), id="only_the_dollar"),
        pytest.param(rates_file(rates=["EUR", "0.93"]), id="rates_a_list"),
        pytest.param(rates_file(base="EUR"), id="base_not_usd"),
        pytest.param(rates_file(valid_from="2026-12-01T00:00:00"), id="valid_from_naive"),
        pytest.param(rates_file(valid_from="tomorrow"), id="valid_from_not_a_date"),
        pytest.param(rates_file(valid_from=20261201), id="valid_from_a_number"),
    ],
)
def test_a_file_that_is_not_a_rates_file_loads_nothing(finance, content):
    ExchangeRateFactory(currency="EUR", rate=D("0.92000000"))
    before = (rate_rows(), audit_log())

    with pytest.raises(RatesFileInvalid) as refused:
        exchange_rates_load_by_operator(operator=finance, content=content, name="upload.json")

    assert refused.value.code == "rates_file_invalid"
    assert (rate_rows(), audit_log()) == before


def test_support_may_not_load_rates(support):
    with pytest.raises(OperatorNotAllowed):
        exchange_rates_load_by_operator(operator=support, content=rates_file(), name="a.json")
    assert (rate_rows(), audit_log()) == ([], [])


def test_a_new_rate_set_by_finance_is_audited(finance):
    rate = ExchangeRate(currency="GBP", rate=D("0.78000000"), valid_from=datetime(2026, 12, 1, tzinfo=UTC))

    exchange_rate_save(operator=finance, rate=rate, changed=["currency", "rate", "valid_from", "source"])

    assert rate_rows() == [("GBP", D("0.78000000"), datetime(2026, 12, 1, tzinfo=UTC), "")]
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action, entry.target_id) == (
        finance, AuditAction.EXCHANGE_RATE_CHANGE, str(rate.pk)
    )
    assert entry.before is None
    assert entry.after == {
        "currency": "GBP", "rate": "0.78000000", "valid_from": "2026-12-01T00:00:00Z", "source": ""
    }


def test_a_changed_rate_is_audited_with_its_value_before_and_after(finance):
    rate = ExchangeRateFactory(currency="EUR", rate=D("0.93000000"))
    rate = ExchangeRate.objects.get(pk=rate.pk)
    rate.rate = D("0.94000000")

    exchange_rate_save(operator=finance, rate=rate, changed=["rate"])

    assert ExchangeRate.objects.get(pk=rate.pk).rate == D("0.94000000")
    entry = AuditEntry.objects.get()
    assert (entry.before, entry.after) == ({"rate": "0.93000000"}, {"rate": "0.94000000"})


def test_a_rate_saved_unchanged_writes_no_entry(finance):
    rate = ExchangeRateFactory(currency="EUR")
    exchange_rate_save(operator=finance, rate=rate, changed=[])
    assert not AuditEntry.objects.exists()


def test_support_may_not_set_a_rate(support):
    rate = ExchangeRate(currency="GBP", rate=D("0.78000000"), valid_from=datetime(2026, 12, 1, tzinfo=UTC))
    with pytest.raises(OperatorNotAllowed):
        exchange_rate_save(operator=support, rate=rate, changed=["currency", "rate", "valid_from"])
    existing = ExchangeRateFactory(currency="EUR", rate=D("0.93000000"))
    existing.rate = D("0.50000000")
    with pytest.raises(OperatorNotAllowed):
        exchange_rate_save(operator=support, rate=existing, changed=["rate"])
    assert rate_rows() == [("EUR", D("0.93000000"), datetime(2026, 11, 1, tzinfo=UTC), "tests")]
    assert not AuditEntry.objects.exists()


# --- the operations page ---------------------------------------------------------------------------

NOW = datetime(2026, 12, 10, 12, 0, tzinfo=UTC)


def charged(buyer, *, started_at, hours=1, price="2.88", gpus=1) -> Rental:
    """A rental started at `started_at` with its first `hours` hours charged by the real billing."""
    rental = rental_for(buyer, price=price, gpus=gpus, started_at=started_at)
    for hour in range(hours):
        rental_charge_next_hour(rental_id=rental.pk, now=started_at + timedelta(hours=hour))
    return rental


def test_operations_summary_on_a_small_world(time_machine, finance):
    time_machine.move_to(NOW, tick=False)
    ExchangeRateFactory(currency="EUR", rate=D("0.92000000"))
    dollars = buyer_with("USD", "200.00")  # through clearing:bank:USD
    euro_top_up = top_up_create(
        user=ProfileFactory().user, amount_text="50", currency="EUR", provider="sandbox",
        form_token=uuid.uuid4(),
    )
    top_up_mark_paid(top_up_id=euro_top_up.pk)  # 50.00 + 11.50 VAT through clearing:sandbox:EUR
    euros = euro_top_up.user

    old = charged(dollars, started_at=NOW - timedelta(days=40))  # 2.88, fee 0.29: outside 30 days
    rental_end(rental_id=old.pk, reason=EndReason.STOPPED_BY_BUYER, at=NOW - timedelta(days=40))
    month = charged(dollars, started_at=NOW - timedelta(days=10), price="1.50", gpus=2)  # 3.00, fee 0.30
    rental_end(rental_id=month.pk, reason=EndReason.STOPPED_BY_BUYER, at=NOW - timedelta(days=10))
    charged(dollars, started_at=NOW - timedelta(hours=2), hours=2, price="2.00", gpus=4)  # 2 x 8.00, fee 0.80
    charged(euros, started_at=NOW - timedelta(minutes=30), price="1.00")  # 1.00 USD = 0.92 EUR, fee 0.10
    rental_for(dollars, started_at=NOW)  # starting, not charged yet

    seller = SellerFactory()
    earn(seller, "300.00")
    owner = member(seller)
    for amount in ("120.50", "60.00"):
        payout_request(seller_id=seller.pk, requested_by=owner, amount_text=amount)
    paid = payout_request(seller_id=seller.pk, requested_by=owner, amount_text="80.00")
    payout_mark_paid(payout_id=paid.pk, operator=finance, reason="SEPA")

    submitted(), submitted()
    application_save(applicant=UserFactory(), fields={"legal_name": "Draft GPU Lda"})
    ReconciliationRun.objects.create(started_at=NOW - timedelta(days=1), finished_at=NOW, ok=True)
    latest = ReconciliationRun.objects.create(started_at=NOW - timedelta(hours=2), ok=False, problems=["x"])

    summary = operations_summary(now=NOW)

    assert summary.market_open is False
    assert (summary.rentals_running, summary.gpus_rented) == (3, 6)  # 4 + 1 running, 1 starting
    assert summary.last_24_hours == TradingWindow(gpu_hours=9, gross_usd=D("17.00"), fee_usd=D("1.70"))
    assert summary.last_30_days == TradingWindow(gpu_hours=11, gross_usd=D("20.00"), fee_usd=D("2.00"))
    assert summary.positions == [
        # 50.00 - 0.92 in the wallet; 61.50 came in with 11.50 of VAT.
        CurrencyPosition(currency="EUR", wallets=D("49.08"), clearing=D("61.50"), revenue=D("0.00"),
                         vat=D("11.50")),
        # 200 - 2.88 - 3.00 - 16.00; the bank clearing account took 200 in and paid 80 out to the seller.
        CurrencyPosition(currency="USD", wallets=D("178.12"), clearing=D("120.00"), revenue=D("2.29"),
                         vat=D("0.00")),
        CurrencyPosition(currency="GBP", wallets=D("0.00"), clearing=D("0.00"), revenue=D("0.00"),
                         vat=D("0.00")),
    ]
    assert (summary.applications_waiting, summary.payouts_waiting, summary.payouts_waiting_usd) == (
        2, 2, D("180.50")
    )
    assert summary.last_reconciliation == latest


def test_operations_summary_on_empty_books():
    summary = operations_summary(now=NOW)
    assert (summary.rentals_running, summary.gpus_rented) == (0, 0)
    assert summary.last_24_hours == summary.last_30_days == TradingWindow(0, D("0.00"), D("0.00"))
    assert [(p.currency, p.wallets, p.clearing) for p in summary.positions] == [
        ("EUR", D("0.00"), D("0.00")), ("USD", D("0.00"), D("0.00")), ("GBP", D("0.00"), D("0.00"))
    ]
    assert (summary.payouts_waiting, summary.payouts_waiting_usd, summary.last_reconciliation) == (
        0, D("0.00"), None
    )


def running_rentals(count: int, buyers: list, servers: list) -> None:
    """`count` more running rentals of 1 GPU, each with its first hour charged, spread over the
    buyers (one per wallet currency) and the servers."""
    for _ in range(count):
        index = Rental.objects.count()
        server = servers[index % len(servers)]
        rental = RentalFactory(
            buyer=buyers[index % len(buyers)], offer=server.offers.get(),
            started_at=NOW - timedelta(minutes=index),
        )
        rental_charge_next_hour(rental_id=rental.pk, now=rental.started_at)


def test_operations_summary_reads_in_constant_queries(time_machine, django_assert_max_num_queries):
    time_machine.move_to(NOW, tick=False)
    ExchangeRateFactory(currency="EUR", rate=D("0.92000000"))
    ExchangeRateFactory(currency="GBP", rate=D("0.79000000"))
    buyers = [buyer_with(currency, "1000.00") for currency in ("USD", "EUR", "GBP")]
    servers = [
        OfferFactory(server__gpu_count=16, gpus_offered=16, price_usd=D("2.88")).server for _ in range(4)
    ]
    running_rentals(2, buyers, servers)
    with CaptureQueriesContext(connection) as small:
        few = operations_summary(now=NOW)
    assert few.rentals_running == 2
    assert len(small) <= 9

    running_rentals(48, buyers, servers)
    with django_assert_max_num_queries(len(small)):
        many = operations_summary(now=NOW)

    assert (many.rentals_running, many.gpus_rented) == (50, 50)
    assert many.last_24_hours == TradingWindow(gpu_hours=50, gross_usd=D("144.00"), fee_usd=D("14.50"))
    assert RentalCharge.objects.count() == 50
