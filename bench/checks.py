"""The invariants each benchmark checks after its run. Each check returns the problems it found,
as sentences; an empty list means the books and the book are exact."""

from datetime import timedelta

from django.db.models import Count, Exists, F, Max, Min, OuterRef, Q, Sum
from django.db.models.functions import Coalesce

from accounts.models import Wallet
from billing.services import ledger_reconcile
from exchange.models import Bid, BidState, Offer, OfferState, Rental, RentalState
from exchange.selectors import bids_open, gpu_prices, gpu_prices_aggregated, market_is_open, offers_available
from sellers.models import Server

HOUR = timedelta(hours=1)


def _problem(problems: list[str], count: int, what: str) -> None:
    if count:
        problems.append(f"{count} {what}")


def book_problems(*, gpu_model_ids: list[int]) -> list[str]:
    """No GPU sold twice, every order in a state that matches its rental, and the book of each
    model at the fixed point of matching (no open bid that an available offer could fill)."""
    problems: list[str] = []
    held = Coalesce(Sum("rentals__gpus", filter=~Q(rentals__state=RentalState.ENDED)), 0)
    _problem(problems, Server.objects.annotate(held=held).exclude(gpus_rented=F("held")).count(),
             "servers whose rented GPUs differ from their rentals' GPUs")
    _problem(problems, Server.objects.filter(gpus_rented__gt=F("gpu_count")).count(), "servers oversold")
    _problem(
        problems,
        Offer.objects.filter(state=OfferState.ACTIVE).values("server").annotate(n=Count("id"))
        .filter(n__gt=1).count(),
        "servers with more than one active offer",
    )
    _problem(problems, Bid.objects.filter(state=BidState.FILLED, rental__isnull=True).count(),
             "filled bids without a rental")
    _problem(problems, Bid.objects.exclude(state=BidState.FILLED).filter(rental__isnull=False).count(),
             "rentals of bids that are not filled")
    _problem(
        problems,
        Rental.objects.filter(
            Q(price_usd__gt=F("bid__max_price_usd")) | Q(price_usd__lt=F("offer__price_usd"))
        ).count(),
        "rentals priced above their bid's maximum or below their offer",
    )
    _problem(problems, Rental.objects.exclude(gpus=F("bid__gpus")).count(),
             "rentals of another size than their bid")
    kept, counted = gpu_prices(), gpu_prices_aggregated()
    _problem(problems, sum(kept.get(model) != counted.get(model) for model in set(kept) | set(counted)),
             "books whose summary (best ask, GPUs on offer) differs from their offers")
    if market_is_open():
        fillable = offers_available().filter(
            server__gpu_model_id=OuterRef("gpu_model_id"),
            price_usd__lte=OuterRef("max_price_usd"),
            available__gte=OuterRef("gpus"),
        )
        open_bids = bids_open().filter(gpu_model_id__in=gpu_model_ids)
        in_region = fillable.filter(server__region=OuterRef("region"))
        crossed = (
            open_bids.filter(region="").filter(Exists(fillable)).count()
            + open_bids.exclude(region="").filter(Exists(in_region)).count()
        )
        _problem(problems, crossed, "open bids that an available offer could fill (the book is crossed)")
    return problems


def ledger_problems(*, grace: timedelta = timedelta(days=365)) -> list[str]:
    """The ledger reconciliation of billing (every wallet's cached balance is the sum of its
    entries, every transaction balances per currency; with the default `grace`, rentals waiting
    for the charging run are not counted as unpaid), and no wallet below zero."""
    run = ledger_reconcile(grace=grace)
    problems = [str(problem) for problem in run.problems[:20]]
    _problem(problems, Wallet.objects.filter(balance__lt=0).count(), "wallets below zero")
    return problems


def charge_problems(*, rental_ids_filter: Q, hours: int) -> list[str]:
    """Every rental selected by `rental_ids_filter` charged exactly `hours` hours by the charging
    run, hour after hour, and paid through the end of its last charged hour."""
    rentals = Rental.objects.filter(rental_ids_filter)
    problems: list[str] = []
    _problem(problems, rentals.annotate(charged=Count("charges")).exclude(charged=hours).count(),
             f"rentals not charged exactly {hours} hour(s)")
    _problem(problems, rentals.exclude(state=RentalState.RUNNING).count(), "rentals no longer running")
    # With one charge per (rental, hour start), enforced by the database: the charged hours follow
    # each other from where the rental was paid through before the runs to where it is now.
    _problem(
        problems,
        rentals.annotate(first=Min("charges__period_start"), last=Max("charges__period_end"))
        .exclude(paid_through=F("last"), first=F("paid_through") - hours * HOUR).count(),
        "rentals whose charged hours do not run from the old to the new paid-through time",
    )
    return problems
