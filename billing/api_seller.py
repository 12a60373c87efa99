"""The seller's money in the API: its earnings and its payouts, read only (docs/api.md, "Seller").
Entry points only: the selectors of the portal's dashboard, earnings and payouts pages."""

from ninja import Field, Router, Schema

from marketplace.api_support import (
    SELL,
    TOKEN_ERRORS,
    Money,
    Page,
    PageCursor,
    PageLimit,
    Problem,
    UtcTime,
    page_of,
    token_of,
    usd,
)

from .models import PayoutStatus
from .selectors import (
    SellerMonth,
    payout_available,
    payout_minimum,
    payouts_for_seller,
    seller_earnings_summary,
    seller_payouts_pending,
)

router = Router(tags=["seller"], auth=SELL)


class EarningsFigures(Schema):
    gross: Money = Field(description="What buyers paid for hours on the seller's servers.")
    fee: Money = Field(description="The platform's fee.")
    net: Money = Field(description="What the seller earned: gross less the fee.")


class MonthOut(EarningsFigures):
    month: str = Field(examples=["2026-12"], description="A calendar month in UTC.")


class PendingPayoutsOut(Schema):
    count: int = Field(examples=[1])
    total: Money


class EarningsOut(Schema):
    this_month: MonthOut = Field(description="The current UTC month; zeros when nothing was earned yet.")
    total: EarningsFigures = Field(description="Every month together.")
    months: list[MonthOut] = Field(description="Every month with earnings, newest first.")
    available: Money = Field(description="What the seller may ask to be paid now.")
    payout_minimum: Money = Field(description="The smallest payout.")
    pending_payouts: PendingPayoutsOut = Field(description="Payouts requested, not yet paid or rejected.")


class PayoutOut(Schema):
    id: int = Field(examples=[7])
    amount: Money
    status: str = Field(examples=["requested"], json_schema_extra={"enum": PayoutStatus.values})
    requested_at: UtcTime
    decided_at: UtcTime | None
    rejection_reason: str = Field(examples=[""], description="Why an operator rejected it; empty otherwise.")


def _figures(figures) -> dict:
    return {"gross": usd(figures.gross), "fee": usd(figures.fee), "net": usd(figures.net)}


def _month(month: SellerMonth) -> MonthOut:
    return MonthOut(month=month.month.strftime("%Y-%m"), **_figures(month))


@router.get(
    "/seller/earnings", response={200: EarningsOut, **TOKEN_ERRORS}, operation_id="seller_earnings_get",
    summary="The seller's earnings: this month, in total, available for payout and pending payouts",
)
def seller_earnings_get(request):
    """In US dollars, read from the ledger: the portal's dashboard and earnings page."""
    seller = token_of(request).seller
    earnings = seller_earnings_summary(seller_id=seller.pk)
    pending = seller_payouts_pending(seller_id=seller.pk)
    return EarningsOut(
        this_month=_month(earnings.this_month), total=EarningsFigures(**_figures(earnings.total)),
        months=[_month(month) for month in earnings.months],
        available=usd(payout_available(seller=seller)), payout_minimum=usd(payout_minimum()),
        pending_payouts=PendingPayoutsOut(count=pending.count, total=usd(pending.total)),
    )


@router.get(
    "/seller/payouts", response={200: Page[PayoutOut], **TOKEN_ERRORS, frozenset({400, 422}): Problem},
    operation_id="seller_payouts_list", summary="The seller's payout requests, newest first",
)
def seller_payouts_list(request, limit: PageLimit = None, cursor: PageCursor = None):
    """Requested, paid or rejected (with the operator's reason)."""
    payouts, next_cursor = page_of(
        payouts_for_seller(seller=token_of(request).seller), cursor=cursor, limit=limit
    )
    return {
        "items": [
            PayoutOut(id=payout.pk, amount=usd(payout.amount), status=payout.status,
                      requested_at=payout.requested_at, decided_at=payout.decided_at,
                      rejection_reason=payout.rejection_reason)
            for payout in payouts
        ],
        "next_cursor": next_cursor,
    }
