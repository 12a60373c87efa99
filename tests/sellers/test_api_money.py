"""A seller's earnings and payouts in the API: the figures of the portal's dashboard, earnings and
payouts pages, read by the same billing selectors, for the token's seller only."""

from decimal import Decimal

import pytest
import time_machine

from billing.selectors import payout_available, seller_earnings_summary, seller_payouts_pending
from billing.services import payout_mark_paid, payout_reject, payout_request
from tests.billing.support import earn, member, seller_charge
from tests.factories import SellerFactory, operator_make
from tests.sellers.support import Api, sell_token

pytestmark = pytest.mark.django_db


def usd(amount: str) -> dict:
    return {"amount": amount, "currency": "USD"}


@pytest.fixture
def seller():
    return SellerFactory(name="Alpha GPU Lda", payout_iban="PT50000201231234567890154",
                         payout_account_holder="Alpha GPU Lda")


@pytest.fixture
def owner(seller):
    return member(seller)


@pytest.fixture
def api(client, seller, owner):
    return Api(client, sell_token(seller, user=owner))


def test_earnings_are_the_portals_figures(api, seller, owner):
    earn(seller, "500.00")
    payout_request(seller_id=seller.pk, requested_by=owner, amount_text="120")
    body = api.get("/seller/earnings").json()
    summary = seller_earnings_summary(seller_id=seller.pk)
    assert body["available"] == usd(f"{payout_available(seller=seller):.2f}") == usd("380.00")
    assert body["pending_payouts"] == {"count": 1, "total": usd("120.00")}
    assert seller_payouts_pending(seller_id=seller.pk).total == Decimal("120.00")
    assert body["payout_minimum"]["currency"] == "USD"
    assert body["this_month"]["month"] == summary.this_month.month.strftime("%Y-%m")
    total = summary.total
    assert body["total"] == {"gross": usd(f"{total.gross:.2f}"), "fee": usd(f"{total.fee:.2f}"),
                             "net": usd(f"{total.net:.2f}")}
    assert len(body["months"]) == len(summary.months)


def test_earnings_from_rental_charges_per_month(api, seller):
    with time_machine.travel("2026-11-15 12:00Z", tick=False):
        seller_charge(seller, 1, net="9.00", fee="1.00")
    with time_machine.travel("2026-12-01 12:00Z", tick=False):
        seller_charge(seller, 2, net="18.00", fee="2.00")
        body = api.get("/seller/earnings").json()
    assert body["this_month"] == {"month": "2026-12", "gross": usd("20.00"), "fee": usd("2.00"),
                                  "net": usd("18.00")}
    assert body["total"] == {"gross": usd("30.00"), "fee": usd("3.00"), "net": usd("27.00")}
    assert [month["month"] for month in body["months"]] == ["2026-12", "2026-11"]
    assert body["available"] == usd("27.00")


def test_payouts_newest_first_with_their_decisions(api, seller, owner):
    earn(seller, "1000.00")
    first = payout_request(seller_id=seller.pk, requested_by=owner, amount_text="100")
    second = payout_request(seller_id=seller.pk, requested_by=owner, amount_text="200")
    third = payout_request(seller_id=seller.pk, requested_by=owner, amount_text="300")
    finance = operator_make("finance")
    payout_mark_paid(payout_id=first.pk, operator=finance, reason="SEPA 2026-12-01 #7")
    payout_reject(payout_id=second.pk, operator=finance, reason="Wrong account")
    other = SellerFactory()
    earn(other, "100.00", key="other")
    payout_request(seller_id=other.pk, requested_by=member(other), amount_text="60")

    page = api.get("/seller/payouts", limit=2).json()
    assert [item["id"] for item in page["items"]] == [third.pk, second.pk]
    rejected = page["items"][1]
    assert (rejected["status"], rejected["amount"], rejected["rejection_reason"]) == (
        "rejected", usd("200.00"), "Wrong account"
    )
    assert rejected["decided_at"].endswith("Z") and page["items"][0]["decided_at"] is None
    rest = api.get("/seller/payouts", limit=2, cursor=page["next_cursor"]).json()
    assert ([item["id"] for item in rest["items"]], rest["next_cursor"]) == ([first.pk], None)
    assert rest["items"][0]["status"] == "paid"


def test_money_lists_run_a_fixed_number_of_queries(api, seller, owner, django_assert_max_num_queries):
    earn(seller, "10000.00")
    payout_request(seller_id=seller.pk, requested_by=owner, amount_text="60")
    for path in ("/seller/payouts", "/seller/earnings"):
        with django_assert_max_num_queries(10) as small:
            assert api.get(path).status_code == 200
        for _ in range(10):
            payout_request(seller_id=seller.pk, requested_by=owner, amount_text="60")
        with django_assert_max_num_queries(len(small.captured_queries)):
            assert api.get(path).status_code == 200
