"""Each book's summary (best ask, GPUs on offer) as PostgreSQL keeps it by differences: always what
aggregating the offers gives, whoever writes and however many write at once, and read in one query."""

from decimal import Decimal

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, given, settings

from exchange.models import EndReason, Offer, OfferState
from exchange.selectors import gpu_prices, gpu_prices_aggregated, markets_summary
from exchange.services import offer_post, offer_update, offer_withdraw, rental_end
from sellers.models import Server
from tests.factories import OfferFactory, ProfileFactory, ServerFactory
from tests.threads import run_together

from .support import place
from .test_properties import run, sequences

pytestmark = pytest.mark.usefixtures("balances", "open_market")


def prices(gpu) -> tuple[Decimal, int] | None:
    found = gpu_prices().get(gpu.pk)
    return (found.lowest_usd, found.gpus_on_offer) if found else None


def assert_summaries_agree():
    assert gpu_prices() == gpu_prices_aggregated()


@pytest.mark.django_db
def test_the_services_keep_the_summary(gpu_catalog, ssh_key):
    h100 = gpu_catalog["h100-sxm"]
    first = offer_post(server=ServerFactory(gpu_model=h100, gpu_count=8), gpus=8, price_usd=Decimal("2.40"))
    offer_post(server=ServerFactory(gpu_model=h100, gpu_count=4), gpus=4, price_usd=Decimal("2.10"))
    assert prices(h100) == (Decimal("2.10"), 12)
    placed = place(ProfileFactory().user, h100, ssh_key, gpus=4, price="2.10", tif="buy_now")
    assert placed.rental is not None
    assert prices(h100) == (Decimal("2.40"), 8)
    rental_end(rental_id=placed.rental.pk, reason=EndReason.STOPPED_BY_BUYER)
    assert prices(h100) == (Decimal("2.10"), 12)
    offer_update(offer_id=first.pk, price_usd=Decimal("1.90"))
    assert prices(h100) == (Decimal("1.90"), 12)
    offer_withdraw(offer_id=first.pk)
    assert prices(h100) == (Decimal("2.10"), 4)
    assert_summaries_agree()


@pytest.mark.django_db
def test_writes_around_the_services_keep_it_too(gpu_catalog):
    a100 = gpu_catalog["a100-sxm"]
    offer = OfferFactory(server=ServerFactory(gpu_model=a100, gpu_count=8), gpus_offered=8,
                         price_usd=Decimal("1.50"))
    Offer.objects.bulk_create([
        Offer(server=ServerFactory(gpu_model=a100, gpu_count=2), gpus_offered=2, price_usd=Decimal("1.70"))
        for _ in range(3)
    ])
    assert prices(a100) == (Decimal("1.50"), 14)
    Server.objects.filter(pk=offer.server_id).update(agent_verified_at=None)  # no longer verified
    assert prices(a100) == (Decimal("1.70"), 6)
    Server.objects.filter(pk=offer.server_id).update(reliability=Decimal("0.5"))  # counts for nothing here
    Server.objects.filter(gpu_model=a100).update(status="retired")
    assert prices(a100) is None
    assert_summaries_agree()


@pytest.mark.django_db
def test_a_server_moved_to_another_model_moves_its_offers(gpu_catalog):
    h100, h200 = gpu_catalog["h100-sxm"], gpu_catalog["h200"]
    offer = OfferFactory(server=ServerFactory(gpu_model=h100), gpus_offered=4, price_usd=Decimal("2.00"))
    Server.objects.filter(pk=offer.server_id).update(gpu_model=h200)
    assert prices(h100) is None and prices(h200) == (Decimal("2.00"), 4)
    Offer.objects.filter(pk=offer.pk).delete()
    assert prices(h200) is None


@pytest.mark.django_db
def test_the_summaries_are_one_query_whatever_the_book(gpu_catalog, django_assert_num_queries):
    h100 = gpu_catalog["h100-sxm"]
    servers = [ServerFactory(gpu_model=h100) for _ in range(30)]
    Offer.objects.bulk_create(
        Offer(server=server, gpus_offered=8, price_usd=Decimal("3.00")) for server in servers
    )
    with django_assert_num_queries(1):
        assert gpu_prices()[h100.pk].gpus_on_offer == 240


@pytest.mark.django_db(transaction=True)
def test_writers_at_once_leave_the_summary_right(gpu_catalog):
    h100 = gpu_catalog["h100-sxm"]
    servers = [ServerFactory(gpu_model=h100, gpu_count=8) for _ in range(6)]
    offers = [OfferFactory(server=s, gpus_offered=8, price_usd=Decimal("2.00")) for s in servers[:3]]

    def write(index: int):
        if index < 3:  # through the services, under the market lock
            return offer_post(server=servers[3 + index], gpus=8, price_usd=Decimal("1.0") + index)
        # around them: a plain update of another offer of the same book
        return Offer.objects.filter(pk=offers[index - 3].pk).update(state=OfferState.WITHDRAWN)

    _results, errors = run_together(6, write)
    assert errors == []
    assert prices(h100) == (Decimal("1.00"), 24)
    assert_summaries_agree()


@pytest.mark.django_db
def test_the_best_ask_is_found_again_when_its_offer_leaves_or_gets_dearer(gpu_catalog):
    l40s = gpu_catalog["l40s"]
    cheap, middle, dear = (
        OfferFactory(server=ServerFactory(gpu_model=l40s, gpu_count=4), gpus_offered=4,
                     price_usd=Decimal(price))
        for price in ("1.00", "1.20", "1.40")
    )
    OfferFactory(server=ServerFactory(gpu_model=l40s, gpu_count=2), gpus_offered=2, price_usd=Decimal("1.00"))
    Offer.objects.filter(pk=cheap.pk).update(price_usd=Decimal("1.50"))  # a tie at 1.00 stays
    assert prices(l40s) == (Decimal("1.00"), 14)
    Offer.objects.filter(server__gpu_model=l40s, price_usd=Decimal("1.00")).delete()
    assert prices(l40s) == (Decimal("1.20"), 12)
    Server.objects.filter(pk=middle.server_id).update(gpus_rented=4)  # sold out
    assert prices(l40s) == (Decimal("1.40"), 8)
    Server.objects.filter(pk=middle.server_id).update(gpus_rented=1)
    Offer.objects.filter(pk=dear.pk).update(gpus_offered=1, price_usd=Decimal("0.90"))
    assert prices(l40s) == (Decimal("0.90"), 8)
    Server.objects.filter(pk=dear.server_id).update(gpu_count=8, name="renamed")  # offers 1 GPU still
    assert prices(l40s) == (Decimal("0.90"), 8)
    assert_summaries_agree()


@pytest.mark.django_db
def test_a_server_that_rents_more_than_its_offer_counts_for_nothing(gpu_catalog):
    h200 = gpu_catalog["h200"]
    server = ServerFactory(gpu_model=h200, gpu_count=8)
    Server.objects.filter(pk=server.pk).update(gpus_rented=6)
    # GPUs rented through an older offer of the server: more than this one offers.
    offer = OfferFactory(server=server, gpus_offered=4, price_usd=Decimal("3.00"))
    assert prices(h200) is None
    Offer.objects.filter(pk=offer.pk).update(gpus_offered=8)
    assert prices(h200) == (Decimal("3.00"), 2)
    Server.objects.filter(pk=server.pk).update(gpus_rented=0)
    assert prices(h200) == (Decimal("3.00"), 8)
    assert_summaries_agree()


@pytest.mark.django_db
def test_the_markets_summary_reads_the_books_in_two_queries(gpu_catalog, ssh_key, django_assert_num_queries):
    h100 = gpu_catalog["h100-sxm"]
    for price in ("2.00", "2.10", "2.20"):
        offer_post(server=ServerFactory(gpu_model=h100, gpu_count=8), gpus=8, price_usd=Decimal(price))
    buyer = ProfileFactory().user
    place(buyer, h100, ssh_key, gpus=2, price="2.00", tif="buy_now")
    place(buyer, h100, ssh_key, gpus=1, price="1.50", tif="bid")
    with django_assert_num_queries(2):
        summary = markets_summary()[h100.pk]
    assert (summary.best_bid, summary.best_ask, summary.gpus_on_offer) == (
        Decimal("1.50"), Decimal("2.00"), 22
    )
    assert (summary.last_trade.price, summary.last_trade.gpus) == (Decimal("2.00"), 2)


@settings(max_examples=15, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=sequences)
@pytest.mark.django_db
def test_the_reference_model_s_sequences_leave_the_summaries_right(ops, balances, ssh_key):
    with transaction.atomic():
        run(ops, balances, ssh_key)
        assert_summaries_agree()
        transaction.set_rollback(True)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the summaries are PostgreSQL's")
@pytest.mark.django_db
def test_the_summary_is_written_by_the_database(gpu_catalog):
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'exchange_%%book_move%%'")
        assert cursor.fetchone()[0] == 3
