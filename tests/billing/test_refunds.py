"""A server fails: its rentals end and each buyer gets back the unused minutes of the paid hour, in
one balanced ledger transaction per rental that takes back the seller's part and the fee."""

from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from accounts.models import Wallet
from billing.ledger import ledger_account_for_seller
from billing.models import LedgerEntry, LedgerTransaction
from billing.selectors import ledger_account_balance
from billing.services import rental_charge_next_hour, server_failure_report
from exchange.models import Bid, EndReason, Market, Offer, OfferState, Rental, RentalState
from sellers.models import Server, ServerStatus
from tests.billing.support import (
    HOUR,
    START,
    assert_books_consistent,
    books,
    buyer_with,
    charged_rental,
    entries_by_code,
    totals_by_currency,
)
from tests.factories import BidFactory, ExchangeRateFactory, OfferFactory, RentalFactory, operator_make

pytestmark = pytest.mark.django_db

# 20 minutes and 30 seconds into the first hour: 39 whole minutes of it are unused.
FAILED_AT = START + timedelta(minutes=20, seconds=30)


@pytest.fixture(autouse=True)
def _setup(time_machine):
    time_machine.move_to(START + timedelta(minutes=30), tick=False)
    ExchangeRateFactory(currency="EUR", rate=Decimal("0.92000000"))
    ExchangeRateFactory(currency="GBP", rate=Decimal("0.79000000"))
    yield
    assert_books_consistent()


def refund_of(rental: Rental) -> LedgerTransaction:
    return LedgerTransaction.objects.get(idempotency_key=f"rental:{rental.pk}:server-failure-refund")


def test_usd_wallet_gets_the_unused_minutes_back_from_the_seller_and_the_fee():
    rental = charged_rental("USD")  # 2.88 charged: 2.59 to the seller, 0.29 fee
    seller = rental.server.seller

    failure = server_failure_report(server_id=rental.server_id, at=FAILED_AT)

    refund = refund_of(rental)
    assert refund.kind == LedgerTransaction.Kind.REFUND and refund.fx_rate is None
    # 39/60 of each line, half-up: 1.872 -> 1.87 and 1.6835 -> 1.68; the fee is what is left, 0.19.
    assert entries_by_code(refund) == {
        f"wallet:{rental.buyer.wallet.pk}": Decimal("1.87"),
        f"seller_earnings:{seller.pk}:USD": Decimal("-1.68"),
        "platform_revenue:USD": Decimal("-0.19"),
    }
    assert totals_by_currency(refund) == {"USD": Decimal("0.00")}
    assert Wallet.objects.get(user=rental.buyer).balance == Decimal("98.99")  # 100 - 2.88 + 1.87
    earnings = ledger_account_for_seller(seller=seller, currency="USD")
    assert ledger_account_balance(account=earnings) == Decimal("0.91")  # 2.59 - 1.68
    [computed] = failure.refunds
    assert (computed.unused_minutes, computed.amount, computed.currency) == (39, Decimal("1.87"), "USD")
    assert (computed.cost_usd, computed.seller_earnings_usd, computed.fee_usd) == (
        Decimal("1.87"), Decimal("1.68"), Decimal("0.19")
    )


def test_eur_wallet_is_refunded_in_euros_at_the_rate_of_the_charge():
    rental = charged_rental("EUR")  # 2.88 USD -> 2.65 EUR at 0.92
    charge = rental.charges.get()
    ExchangeRateFactory(currency="EUR", rate=Decimal("0.95000000"), valid_from=START + timedelta(minutes=10))

    server_failure_report(server_id=rental.server_id, at=FAILED_AT)

    refund = refund_of(rental)
    assert refund.fx_rate_id == charge.fx_rate_id  # the charge's rate, not today's 0.95
    # 2.65 x 39/60 = 1.7225 -> 1.72 EUR; in dollars 1.87 = 1.68 to the seller + 0.19 fee.
    assert entries_by_code(refund) == {
        f"wallet:{rental.buyer.wallet.pk}": Decimal("1.72"),
        "fx:EUR": Decimal("-1.72"),
        "fx:USD": Decimal("1.87"),
        f"seller_earnings:{rental.server.seller_id}:USD": Decimal("-1.68"),
        "platform_revenue:USD": Decimal("-0.19"),
    }
    assert totals_by_currency(refund) == {"EUR": Decimal("0.00"), "USD": Decimal("0.00")}
    assert Wallet.objects.get(user=rental.buyer).balance == Decimal("99.07")  # 100 - 2.65 + 1.72


def test_gbp_wallet_with_several_gpus(time_machine):
    rental = charged_rental("GBP", gpus=4, price="1.37")  # 5.48 USD -> 4.33 GBP; fee 0.55, seller 4.93
    time_machine.move_to(START + timedelta(minutes=50), tick=False)

    server_failure_report(server_id=rental.server_id, at=START + timedelta(minutes=45))

    # 15 minutes unused: 4.33/4 = 1.0825 -> 1.08 GBP; 5.48/4 = 1.37 USD; 4.93/4 = 1.2325 -> 1.23.
    assert entries_by_code(refund_of(rental)) == {
        f"wallet:{rental.buyer.wallet.pk}": Decimal("1.08"),
        "fx:GBP": Decimal("-1.08"),
        "fx:USD": Decimal("1.37"),
        f"seller_earnings:{rental.server.seller_id}:USD": Decimal("-1.23"),
        "platform_revenue:USD": Decimal("-0.14"),
    }


def test_rental_ends_for_server_failure_its_gpus_are_freed_and_the_offer_withdrawn():
    rental = charged_rental("USD", gpus=2)
    server = rental.server
    assert server.gpus_rented == 2

    failure = server_failure_report(server_id=server.pk, at=FAILED_AT)

    rental.refresh_from_db()
    assert (rental.state, rental.end_reason, rental.ended_at) == (
        RentalState.ENDED, EndReason.SERVER_FAILURE, FAILED_AT
    )
    server.refresh_from_db()
    assert server.gpus_rented == 0
    assert server.status == ServerStatus.ACTIVE  # operators decide what becomes of it
    assert Offer.objects.get(pk=rental.offer_id).state == OfferState.WITHDRAWN
    assert failure.withdrawn_offer_id == rental.offer_id
    assert failure.ended_rental_ids == [rental.pk]


def test_every_rental_of_the_server_ends_and_others_run_on():
    first = charged_rental("USD")
    server = first.server
    second_buyer = buyer_with("EUR", "50.00")
    second = RentalFactory(buyer=second_buyer, offer=first.offer, started_at=START)
    rental_charge_next_hour(rental_id=second.pk, now=START)
    starting = RentalFactory(buyer=buyer_with("USD", "10.00"), offer=first.offer, started_at=START)
    elsewhere = charged_rental("USD")

    failure = server_failure_report(server_id=server.pk, at=FAILED_AT)

    assert failure.ended_rental_ids == [first.pk, second.pk, starting.pk]
    assert set(Rental.objects.filter(server=server).values_list("end_reason", flat=True)) == {
        EndReason.SERVER_FAILURE
    }
    # The starting rental had paid nothing: nothing to refund, no ledger transaction.
    assert not LedgerTransaction.objects.filter(idempotency_key__contains=f"rental:{starting.pk}:").exists()
    assert [refund.transaction is not None for refund in failure.refunds] == [True, True, False]
    assert Wallet.objects.get(user=second_buyer).balance == Decimal("49.07")
    elsewhere.refresh_from_db()
    assert elsewhere.state == RentalState.RUNNING
    server.refresh_from_db()
    assert server.gpus_rented == 0


def test_reporting_the_same_failure_again_changes_nothing():
    rental = charged_rental("EUR")
    server_failure_report(server_id=rental.server_id, at=FAILED_AT)
    before = books()

    again = server_failure_report(server_id=rental.server_id, at=FAILED_AT)

    assert books() == before
    assert again.ended_rental_ids == [] and again.refunds == []


def test_failure_at_the_start_of_the_paid_hour_refunds_all_of_it():
    rental = charged_rental("EUR")
    charge = rental.charges.get()

    server_failure_report(server_id=rental.server_id, at=START)

    refund = entries_by_code(refund_of(rental))
    original = entries_by_code(charge.ledger_transaction)
    assert refund == {code: -amount for code, amount in original.items()}
    assert Wallet.objects.get(user=rental.buyer).balance == Decimal("100.00")


def test_a_failure_reported_late_refunds_the_hours_charged_after_it_too(time_machine):
    rental = charged_rental("USD")
    time_machine.move_to(START + HOUR + timedelta(minutes=5), tick=False)
    rental_charge_next_hour(rental_id=rental.pk, now=START + HOUR)  # the next hour was charged meanwhile

    server_failure_report(server_id=rental.server_id, at=START + timedelta(minutes=50))

    # 10 minutes of the first hour (0.48; seller 0.4317 -> 0.43) and all of the second (2.88; 2.59).
    assert entries_by_code(refund_of(rental)) == {
        f"wallet:{rental.buyer.wallet.pk}": Decimal("3.36"),
        f"seller_earnings:{rental.server.seller_id}:USD": Decimal("-3.02"),
        "platform_revenue:USD": Decimal("-0.34"),
    }
    rental.refresh_from_db()
    assert rental.ended_at == START + timedelta(minutes=50)


def test_the_last_seconds_of_an_hour_refund_nothing(time_machine):
    rental = charged_rental("USD")
    before = books()
    time_machine.move_to(START + HOUR, tick=False)

    server_failure_report(server_id=rental.server_id, at=START + timedelta(minutes=59, seconds=1))

    ledger, entries, balances, charges = books()
    assert (ledger, entries, balances, charges) == before  # no whole minute was left unused
    rental.refresh_from_db()
    assert rental.end_reason == EndReason.SERVER_FAILURE


def test_freed_gpus_are_not_matched_again_on_the_failed_server():
    Market.objects.update_or_create(pk=1, defaults={"is_open": True})
    rental = charged_rental("USD")
    waiting = buyer_with("USD", "100.00")
    BidFactory(buyer=waiting, gpu_model=rental.gpu_model, state="open", max_price_usd=Decimal("5.00"),
               gpus=1)
    # The offer has 4 GPUs and the rental holds 1: make the server full so the bid rests.
    Server.objects.filter(pk=rental.server_id).update(gpu_count=1)

    server_failure_report(server_id=rental.server_id, at=FAILED_AT)

    assert not Rental.objects.filter(buyer=waiting).exists()
    assert Bid.objects.get(buyer=waiting).state == "open"


def test_an_unknown_server_moves_nothing():
    before = books()
    with pytest.raises(Server.DoesNotExist):
        server_failure_report(server_id=999_999)
    assert books() == before


def test_a_failure_in_the_future_is_refused():
    rental = charged_rental("USD")
    before = books()
    with pytest.raises(ValueError, match="not in advance"):
        server_failure_report(server_id=rental.server_id, at=START + 2 * HOUR)
    assert books() == before
    rental.refresh_from_db()
    assert rental.state == RentalState.RUNNING


def test_reported_by_an_operator_is_recorded_on_the_refund():
    operator = operator_make()
    rental = charged_rental("USD")

    server_failure_report(server_id=rental.server_id, at=FAILED_AT, reported_by=operator)

    assert refund_of(rental).created_by == operator


def test_management_command():
    rental = charged_rental("EUR")
    out = StringIO()

    call_command("server_failure", str(rental.server_id), "--at", FAILED_AT.isoformat(), stdout=out)

    text = out.getvalue()
    assert f"Server {rental.server_id} failed" in text
    assert f"rental {rental.pk}: 39 unused minutes, 1.72 EUR refunded" in text
    assert LedgerEntry.objects.filter(transaction=refund_of(rental)).count() == 5


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["999999"], "There is no server 999999"),
        (["1", "--at", "yesterday"], "not an ISO 8601 time"),
        (["1", "--at", "2026-12-01T10:20:00"], "needs a time zone"),
    ],
)
def test_management_command_refuses_bad_input(arguments, message):
    OfferFactory()
    with pytest.raises(CommandError, match=message):
        call_command("server_failure", *arguments, stdout=StringIO())
