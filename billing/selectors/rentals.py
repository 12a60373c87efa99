"""What rentals have cost their buyers and earned their sellers so far, for the pages that list
rentals (the exchange's and the seller portal's). One query each, whatever the number of rentals."""

from collections.abc import Iterable
from decimal import Decimal

from django.db.models import Sum

from ..models import RentalCharge

ZERO = Decimal("0.00")


def rental_costs(*, rental_ids: Iterable[int]) -> dict[int, tuple[Decimal, str]]:
    """What each rental has cost its buyer so far, as (total, currency of the wallet), in one
    query. Rentals without a charge yet are left out. A wallet keeps its currency for good, so
    a rental's charges share one currency."""
    rows = (
        RentalCharge.objects.filter(rental_id__in=list(rental_ids))
        .values("rental_id", "currency")
        .annotate(total=Sum("amount"))
        .order_by("rental_id", "currency")
    )
    return {row["rental_id"]: (Decimal(row["total"]).quantize(ZERO), row["currency"]) for row in rows}


def seller_revenue_by_rental(*, rental_ids: Iterable[int]) -> dict[int, Decimal]:
    """What the seller has earned from each rental so far (US dollars, after the platform's fee),
    in one query. Rentals without a charge yet are left out."""
    rows = (
        RentalCharge.objects.filter(rental_id__in=list(rental_ids))
        .values("rental_id")
        .annotate(total=Sum("seller_earnings_usd"))
        .order_by("rental_id")
    )
    return {row["rental_id"]: Decimal(row["total"]).quantize(ZERO) for row in rows}
