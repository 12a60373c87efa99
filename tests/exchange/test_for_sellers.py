"""What a seller reaches of the exchange: the reads of the seller portal take the seller's id and
find that seller's servers, offers and rentals only (another seller's id finds nothing), and a
seller retires its own servers only."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from django.utils.crypto import salted_hmac

from exchange.models import BidState, EndReason, Offer, OfferState, RentalState
from exchange.selectors import (
    BookPlace,
    ServerTotals,
    buyer_alias,
    offer_active_for_server,
    offer_book_place,
    offer_book_places,
    offer_get_for_seller,
    rentals_for_seller,
    seller_utilisation,
    server_totals,
    servers_with_offers_for_seller,
)
from exchange.services import server_retire
from sellers.exceptions import ServerLocked, ServerNotFound
from sellers.models import Server, ServerStatus
from tests.factories import (
    BidFactory,
    GpuModelFactory,
    OfferFactory,
    RentalFactory,
    SellerFactory,
    ServerFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db

D = Decimal


@pytest.fixture
def two_sellers():
    """Seller A: a server with an active offer (and an older, withdrawn one) and an idle server;
    seller B: a server of the same GPU model with a cheaper offer."""
    gpu = GpuModelFactory()
    a, b = SellerFactory(name="Alpha GPU Lda"), SellerFactory(name="Beta GPU SA")
    a_busy = ServerFactory(seller=a, gpu_model=gpu, name="a-busy", gpu_count=8)
    OfferFactory(server=a_busy, state=OfferState.WITHDRAWN, price_usd=D("1.00"))
    a_offer = OfferFactory(server=a_busy, gpus_offered=6, price_usd=D("2.40"))
    a_idle = ServerFactory(seller=a, gpu_model=gpu, name="a-idle", gpu_count=4, status=ServerStatus.PENDING)
    b_server = ServerFactory(seller=b, gpu_model=gpu, name="b-one", gpu_count=8)
    b_offer = OfferFactory(server=b_server, gpus_offered=3, price_usd=D("2.10"))
    return {"a": a, "b": b, "a_busy": a_busy, "a_idle": a_idle, "a_offer": a_offer, "b_offer": b_offer}


def test_offers_are_found_for_their_own_seller_only(two_sellers):
    a, b, a_offer = two_sellers["a"], two_sellers["b"], two_sellers["a_offer"]
    assert offer_get_for_seller(seller_id=a.pk, offer_id=a_offer.pk) == a_offer
    assert offer_get_for_seller(seller_id=b.pk, offer_id=a_offer.pk) is None
    busy, idle = two_sellers["a_busy"], two_sellers["a_idle"]
    assert offer_active_for_server(seller_id=a.pk, server_id=busy.pk) == a_offer
    assert offer_active_for_server(seller_id=b.pk, server_id=busy.pk) is None
    assert offer_active_for_server(seller_id=a.pk, server_id=idle.pk) is None
    assert offer_book_place(seller_id=b.pk, offer_id=a_offer.pk) is None


def test_the_place_of_an_offer_in_the_book(two_sellers, django_assert_num_queries):
    a, a_offer = two_sellers["a"], two_sellers["a_offer"]
    with django_assert_num_queries(3):
        place = offer_book_place(seller_id=a.pk, offer_id=a_offer.pk)
    assert place == BookPlace(best_ask=D("2.10"), gpus_cheaper=3, sells_now=False)
    BidFactory(gpu_model=a_offer.server.gpu_model, max_price_usd=D("2.40"), state=BidState.OPEN,
               time_in_force="bid")
    assert offer_book_place(seller_id=a.pk, offer_id=a_offer.pk).sells_now is True


def test_the_places_of_many_offers_in_three_queries(two_sellers, django_assert_num_queries):
    """The API's lists place every offer of a page at once: the same answers as one by one."""
    a, a_offer = two_sellers["a"], two_sellers["a_offer"]
    other_gpu = ServerFactory(seller=a, gpu_model=GpuModelFactory(), name="a-other", gpu_count=2)
    lone = OfferFactory(server=other_gpu, gpus_offered=2, price_usd=D("9.00"))
    BidFactory(gpu_model=other_gpu.gpu_model, max_price_usd=D("9.50"), state=BidState.OPEN,
               time_in_force="bid")
    ids = [a_offer.pk, lone.pk, two_sellers["b_offer"].pk]
    with django_assert_num_queries(3):
        places = offer_book_places(seller_id=a.pk, offer_ids=ids)
    assert places == {
        a_offer.pk: BookPlace(best_ask=D("2.10"), gpus_cheaper=3, sells_now=False),
        lone.pk: BookPlace(best_ask=D("9.00"), gpus_cheaper=0, sells_now=True),
    }
    assert places == {pk: offer_book_place(seller_id=a.pk, offer_id=pk) for pk in places}
    assert offer_book_places(seller_id=a.pk, offer_ids=[]) == {}


def test_servers_and_totals_are_the_sellers_own(two_sellers, django_assert_num_queries):
    a, b = two_sellers["a"], two_sellers["b"]
    RentalFactory(offer=two_sellers["a_offer"], gpus=2)
    ServerFactory(seller=a, name="a-gone", gpu_count=16, status=ServerStatus.RETIRED)
    with django_assert_num_queries(2):
        servers = list(servers_with_offers_for_seller(seller_id=a.pk))
    assert [(server.name, server.active_offers) for server in servers] == [
        ("a-busy", [two_sellers["a_offer"]]), ("a-gone", []), ("a-idle", []),
    ]
    assert server_totals(seller_id=a.pk) == ServerTotals(servers=2, gpus=12, gpus_rented=2)
    assert [server.name for server in servers_with_offers_for_seller(seller_id=b.pk)] == ["b-one"]
    assert server_totals(seller_id=SellerFactory().pk) == ServerTotals(servers=0, gpus=0, gpus_rented=0)


def test_rentals_are_the_sellers_own_with_anonymous_buyers(two_sellers, django_assert_num_queries):
    a, b = two_sellers["a"], two_sellers["b"]
    buyer = UserFactory()
    now = timezone.now()
    running = RentalFactory(offer=two_sellers["a_offer"], buyer=buyer, started_at=now - timedelta(hours=1))
    ended = RentalFactory(
        offer=two_sellers["a_offer"], buyer=buyer, started_at=now - timedelta(hours=5),
        ended_at=now - timedelta(hours=4), state=RentalState.ENDED, end_reason=EndReason.STOPPED_BY_BUYER,
    )
    theirs = RentalFactory(offer=two_sellers["b_offer"], buyer=buyer)

    with django_assert_num_queries(2):
        mine, past = rentals_for_seller(seller_id=a.pk)
    assert (mine, past) == ([running], [ended])
    assert {rental.buyer_alias for rental in mine + past} == {buyer_alias(buyer_id=buyer.pk, seller_id=a.pk)}
    assert rentals_for_seller(seller_id=b.pk) == ([theirs], [])
    assert rentals_for_seller(seller_id=SellerFactory().pk) == ([], [])


def test_a_buyers_alias_is_stable_and_differs_from_seller_to_seller():
    alias = buyer_alias(buyer_id=7, seller_id=3)
    # The same salt as when the portal first showed aliases: a buyer keeps the alias sellers know.
    assert alias == salted_hmac("sellers.buyer_alias", "7:3").hexdigest()[:8].upper()
    assert len(alias) == 8 and alias != buyer_alias(buyer_id=7, seller_id=4)


def test_utilisation_is_the_share_of_the_sellers_gpus_rented_per_hour(django_assert_num_queries):
    seller = SellerFactory()
    server = ServerFactory(seller=seller, gpu_count=4)
    now = timezone.now().replace(minute=30, second=0, microsecond=0)
    hour = now.replace(minute=0)
    # 2 of 4 GPUs for the whole previous hour; another seller's rental does not count.
    RentalFactory(offer__server=server, gpus=2, started_at=hour - timedelta(hours=1), ended_at=hour,
                  state=RentalState.ENDED, end_reason=EndReason.STOPPED_BY_BUYER)
    other = ServerFactory(gpu_count=4)
    RentalFactory(offer__server=other, gpus=4, started_at=hour - timedelta(hours=1),
                  ended_at=hour, state=RentalState.ENDED, end_reason=EndReason.STOPPED_BY_BUYER)
    with django_assert_num_queries(1):
        utilisation = seller_utilisation(seller_id=seller.pk, now=now, gpus=4)
    # From midnight six days ago to the end of the current hour: today's hours so far included.
    assert len(utilisation.shares) == 6 * 24 + now.hour + 1
    assert utilisation.shares[-2] == pytest.approx(0.5)
    assert utilisation.peak == pytest.approx(0.5)
    assert sum(utilisation.shares) == pytest.approx(0.5)
    nobody_id = SellerFactory().pk
    with django_assert_num_queries(2):
        nobody = seller_utilisation(seller_id=nobody_id, now=now)
    assert (nobody.gpus, nobody.peak, sum(nobody.shares)) == (0, 0.0, 0.0)


def test_a_seller_retires_its_own_server_only(two_sellers):
    a, b, busy = two_sellers["a"], two_sellers["b"], two_sellers["a_busy"]
    with pytest.raises(ServerNotFound) as refused:
        server_retire(seller_id=b.pk, server_id=busy.pk)
    assert refused.value.code == "server_not_found"
    assert Server.objects.get(pk=busy.pk).status == ServerStatus.ACTIVE
    assert Offer.objects.get(pk=two_sellers["a_offer"].pk).state == OfferState.ACTIVE

    retired = server_retire(seller_id=a.pk, server_id=busy.pk)
    assert retired.status == ServerStatus.RETIRED
    assert Offer.objects.get(pk=two_sellers["a_offer"].pk).state == OfferState.WITHDRAWN
    assert server_retire(seller_id=a.pk, server_id=busy.pk).status == ServerStatus.RETIRED  # again: nothing


def test_a_server_with_a_starting_rental_is_not_retired(two_sellers):
    a, busy = two_sellers["a"], two_sellers["a_busy"]
    RentalFactory(offer=two_sellers["a_offer"], state=RentalState.STARTING)
    with pytest.raises(ServerLocked) as refused:
        server_retire(seller_id=a.pk, server_id=busy.pk)
    assert refused.value.code == "server_has_rentals"
    assert Server.objects.get(pk=busy.pk).status == ServerStatus.ACTIVE
