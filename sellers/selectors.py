"""Reads of the seller portal, each scoped to one seller and running a constant number of
queries, whatever the number of servers, offers or rentals."""

from dataclasses import dataclass

from django.db.models import Count, Prefetch, Sum
from django.db.models.functions import Coalesce
from django.utils.crypto import salted_hmac

from .models import (
    OPEN_APPLICATION_STATUSES,
    MemberRole,
    Seller,
    SellerApplication,
    SellerInvitation,
    SellerMembership,
    Server,
    ServerStatus,
)


def seller_for_member(*, user) -> Seller | None:
    """The seller the user works for (the oldest membership), or None."""
    if not user.is_authenticated:
        return None
    return Seller.objects.filter(memberships__user=user).order_by("memberships__created_at").first()


@dataclass(frozen=True)
class ServerTotals:
    servers: int
    gpus: int
    gpus_rented: int


def server_totals(*, seller: Seller) -> ServerTotals:
    """The seller's servers that are not retired, their GPUs and the GPUs rented now. One query."""
    row = Server.objects.filter(seller=seller).exclude(status=ServerStatus.RETIRED).aggregate(
        servers=Count("pk"), gpus=Coalesce(Sum("gpu_count"), 0), rented=Coalesce(Sum("gpus_rented"), 0)
    )
    return ServerTotals(servers=row["servers"], gpus=row["gpus"], gpus_rented=row["rented"])


def servers_for_seller(*, seller: Seller):
    """The seller's servers with their GPU model and `active_offers` (a list, one at most). Two queries."""
    from exchange.models import Offer, OfferState

    return (
        Server.objects.filter(seller=seller)
        .select_related("gpu_model")
        .prefetch_related(
            Prefetch(
                "offers", queryset=Offer.objects.filter(state=OfferState.ACTIVE), to_attr="active_offers"
            )
        )
        .order_by("name")
    )


def server_get_for_seller(*, seller: Seller, server_id: int) -> Server | None:
    return Server.objects.filter(seller=seller, pk=server_id).select_related("gpu_model").first()


def offer_get_for_seller(*, seller: Seller, offer_id: int):
    from exchange.models import Offer

    return Offer.objects.filter(server__seller=seller, pk=offer_id).select_related("server").first()


def active_offer_for_server(*, server: Server):
    from exchange.models import Offer, OfferState

    return Offer.objects.filter(server=server, state=OfferState.ACTIVE).first()


@dataclass(frozen=True)
class BookPlace:
    """Where an offer stands in the book of its GPU model."""

    best_ask: object  # Decimal | None
    gpus_cheaper: int
    sells_now: bool  # a resting bid at or above its price exists


def offer_book_place(*, offer) -> BookPlace:
    """Three queries: the book of the model and the GPUs offered below the offer's price."""
    from exchange.selectors import gpus_offered_below, order_book

    gpu_model_id = offer.server.gpu_model_id
    book = order_book(gpu_model_id=gpu_model_id, levels=1)
    return BookPlace(
        best_ask=book.best_ask,
        gpus_cheaper=gpus_offered_below(gpu_model_id=gpu_model_id, price_usd=offer.price_usd),
        sells_now=book.best_bid is not None and book.best_bid >= offer.price_usd,
    )


def buyer_alias(*, buyer_id: int, seller_id: int) -> str:
    """An anonymous, stable id of a buyer as one seller sees them: the same buyer gets another id
    at another seller."""
    digest = salted_hmac("sellers.buyer_alias", f"{buyer_id}:{seller_id}").hexdigest()
    return digest[:8].upper()


def rentals_for_seller(*, seller: Seller, limit: int = 200) -> tuple[list, list]:
    """(running, past) rentals on the seller's servers, newest first, each with `buyer_alias` and
    `revenue_usd` (the seller's earnings from it so far, or None). Three queries."""
    from billing.selectors import seller_revenue_by_rental
    from exchange.models import Rental, RentalState

    rentals = Rental.objects.filter(server__seller=seller).select_related("server", "gpu_model")
    running = list(rentals.exclude(state=RentalState.ENDED).order_by("-started_at", "-id"))
    past = list(rentals.filter(state=RentalState.ENDED).order_by("-started_at", "-id")[:limit])
    revenue = seller_revenue_by_rental(rental_ids=[rental.pk for rental in running + past])
    for rental in running + past:
        rental.buyer_alias = buyer_alias(buyer_id=rental.buyer_id, seller_id=seller.pk)
        rental.revenue_usd = revenue.get(rental.pk)
    return running, past


def application_latest_for(*, applicant) -> SellerApplication | None:
    """The user's open application, or else their latest decided one: never anyone else's."""
    applications = SellerApplication.objects.filter(applicant=applicant)
    return (
        applications.filter(status__in=OPEN_APPLICATION_STATUSES).first()
        or applications.order_by("-created_at").first()
    )


def is_owner(*, seller: Seller, user) -> bool:
    return SellerMembership.objects.filter(seller=seller, user=user, role=MemberRole.OWNER).exists()


def members_for_seller(*, seller: Seller):
    return SellerMembership.objects.filter(seller=seller).select_related("user").order_by("created_at")


def invitations_open_for_seller(*, seller: Seller):
    return SellerInvitation.objects.filter(seller=seller, accepted_at__isnull=True).order_by("created_at")


@dataclass(frozen=True)
class Utilisation:
    start: object  # datetime, the first hour
    end: object  # datetime, the end of the last hour
    gpus: int  # the seller's GPUs now (not retired servers)
    shares: list  # per hour: the share (0..1) of the GPUs rented
    average: float
    peak: float


UTILISATION_HOURS = 7 * 24


def seller_utilisation(*, seller: Seller, now=None, gpus: int | None = None) -> Utilisation:
    """The hourly share of the seller's GPUs rented over the past 7 days: GPU-seconds rented in each
    hour over GPU-seconds available. Two queries (one for the rentals, one for the GPU total)."""
    from datetime import timedelta

    from django.db.models import Q
    from django.utils import timezone

    from exchange.models import Rental

    now = now or timezone.now()
    end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    start = end - timedelta(hours=UTILISATION_HOURS)
    if gpus is None:
        gpus = server_totals(seller=seller).gpus
    rows = Rental.objects.filter(server__seller=seller, started_at__lt=end).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=start)
    ).values_list("started_at", "ended_at", "gpus")
    rented = [0.0] * UTILISATION_HOURS
    for started_at, ended_at, count in rows:
        begin, finish = max(started_at, start), min(ended_at or now, end)
        while begin < finish:
            index = int((begin - start).total_seconds() // 3600)
            hour_end = start + timedelta(hours=index + 1)
            step_end = min(finish, hour_end)
            rented[index] += (step_end - begin).total_seconds() * count
            begin = step_end
    capacity = gpus * 3600
    shares = [min(1.0, seconds / capacity) if capacity else 0.0 for seconds in rented]
    return Utilisation(
        start=start, end=end, gpus=gpus, shares=shares,
        average=sum(shares) / len(shares), peak=max(shares),
    )
