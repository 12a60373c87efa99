"""The market rules, through the services: price-time priority, maker prices, all-or-none bids."""

from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core import mail
from django.core.management import call_command
from django.utils import timezone

from exchange.exceptions import BidRejected
from exchange.models import Bid, BidState, Rental, RentalState, TimeInForce
from exchange.services import market_close, market_open, offer_post
from sellers.models import Server
from tests.factories import GpuModelFactory, ProfileFactory, ServerFactory, UserFactory

from .support import market_set, place

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("balances")]

D = Decimal
NBSP = "\u00a0"


@pytest.fixture
def gpu():
    return GpuModelFactory()


def server(gpu, *, count=8, region="europe", **extra) -> Server:
    return ServerFactory(gpu_model=gpu, gpu_count=count, region=region, **extra)


def ask(srv: Server, *, price: str, gpus: int | None = None):
    return offer_post(server=srv, gpus=gpus or srv.gpu_count, price_usd=D(price))


def rented(srv: Server) -> int:
    srv.refresh_from_db()
    return srv.gpus_rented


def trades():
    return list(Rental.objects.order_by("id").values_list("bid_id", "server_id", "gpus", "price_usd"))


# --- price-time priority and the maker's price ------------------------------------------------


def test_an_incoming_bid_takes_the_cheapest_oldest_ask_at_its_price(open_market, gpu, ssh_key):
    dear, first_cheap, later_cheap = server(gpu), server(gpu), server(gpu)
    ask(dear, price="2.10")
    offer = ask(first_cheap, price="1.90")
    ask(later_cheap, price="1.90")
    buyer = UserFactory()

    placed = place(buyer, gpu, ssh_key, gpus=2, price="2.50", hours=5)

    rental = placed.rental
    assert placed.bid.state == BidState.FILLED
    assert (rental.server_id, rental.offer_id, rental.gpus, rental.price_usd) == (
        first_cheap.pk, offer.pk, 2, D("1.90")
    )
    assert rental.state == RentalState.STARTING and rental.paid_through is None
    assert (rental.buyer_id, rental.bid_id, rental.gpu_model_id, rental.hours) == (
        buyer.pk, placed.bid.pk, gpu.pk, 5
    )
    assert rental.ssh_public_key == ssh_key and rental.username == "" and rental.delivered_at is None
    assert abs(rental.started_at - timezone.now()) < timedelta(seconds=10)
    assert [rented(s) for s in (dear, first_cheap, later_cheap)] == [0, 2, 0]


def test_an_incoming_offer_gets_the_best_bids_price(open_market, gpu, ssh_key):
    server(gpu, count=1)  # so that bids for one GPU are allowed
    low = place(UserFactory(), gpu, ssh_key, price="2.00").bid
    high_old = place(UserFactory(), gpu, ssh_key, price="2.50").bid
    high_new = place(UserFactory(), gpu, ssh_key, price="2.50").bid
    assert not Rental.objects.exists()

    ask(server(gpu, count=1), price="1.50")
    ask(server(gpu, count=1), price="1.50")
    ask(server(gpu, count=1), price="2.20")  # above the last bid: rests

    assert [(bid_id, price) for bid_id, _s, _g, price in trades()] == [
        (high_old.pk, D("2.50")), (high_new.pk, D("2.50"))
    ]
    ask(server(gpu, count=1), price="1.99")
    assert trades()[-1][0] == low.pk and trades()[-1][3] == D("2.00")


def test_one_offer_fills_several_bids_best_first(open_market, gpu, ssh_key):
    srv = server(gpu, count=8)
    bids = [place(UserFactory(), gpu, ssh_key, gpus=g, price=p).bid
            for g, p in [(4, "3.00"), (4, "2.00"), (2, "2.50"), (1, "2.40")]]
    ask(srv, price="1.00", gpus=8)
    assert [(bid_id, gpus, price) for bid_id, _s, gpus, price in trades()] == [
        (bids[0].pk, 4, D("3.00")), (bids[2].pk, 2, D("2.50")), (bids[3].pk, 1, D("2.40"))
    ]
    # The 4-GPU bid at 2.00 found one GPU left: it rests, all or none.
    assert Bid.objects.get(pk=bids[1].pk).state == BidState.OPEN
    assert rented(srv) == 7


def test_market_open_the_older_order_sets_the_price(gpu, ssh_key):
    market_set(False)
    older_offer = ask(server(gpu, count=1), price="1.50")
    first = place(UserFactory(), gpu, ssh_key, price="2.00").bid
    second = place(UserFactory(), gpu, ssh_key, price="1.80").bid
    newer_offer = ask(server(gpu, count=1), price="1.60")
    assert not Rental.objects.exists()

    made = market_open(by="tests")

    # The 2.00 bid takes the cheapest offer (1.50, older than the bid: the offer's price); the
    # 1.80 bid takes the 1.60 offer, which came after it: the bid's price.
    assert [(r.bid_id, r.offer_id, r.price_usd) for r in made] == [
        (first.pk, older_offer.pk, D("1.50")), (second.pk, newer_offer.pk, D("1.80"))
    ]
    assert trades() == [(r.bid_id, r.server_id, r.gpus, r.price_usd) for r in made]


def test_a_bid_skips_a_server_without_enough_free_gpus(open_market, gpu, ssh_key):
    two_free = server(gpu, count=8)
    ask(two_free, price="1.00", gpus=2)
    four_free = server(gpu, count=4)
    ask(four_free, price="1.50")

    four = place(UserFactory(), gpu, ssh_key, gpus=4, price="2.00")
    two = place(UserFactory(), gpu, ssh_key, gpus=2, price="2.00")

    assert (four.rental.server_id, four.rental.price_usd) == (four_free.pk, D("1.50"))
    assert (two.rental.server_id, two.rental.price_usd) == (two_free.pk, D("1.00"))
    # Free GPUs spread over two servers never fill one bid.
    eight = place(UserFactory(), gpu, ssh_key, gpus=8, price="9.00")
    assert eight.rental is None and eight.bid.state == BidState.OPEN


def test_region_filter(open_market, gpu, ssh_key):
    ask(server(gpu, region="europe"), price="1.00")
    america = server(gpu, region="north-america")
    ask(america, price="1.70")

    placed = place(UserFactory(), gpu, ssh_key, price="2.00", region="north-america")
    assert (placed.rental.server_id, placed.rental.price_usd) == (america.pk, D("1.70"))
    asia = place(UserFactory(), gpu, ssh_key, price="2.00", region="asia-pacific")
    assert asia.rental is None and asia.bid.state == BidState.OPEN
    anywhere = place(UserFactory(), gpu, ssh_key, price="2.00")
    assert anywhere.rental.price_usd == D("1.00")


def test_an_unfillable_best_bid_does_not_block_the_next(open_market, gpu, ssh_key):
    server(gpu, count=8)  # lets 8-GPU bids in; offers nothing
    big = place(UserFactory(), gpu, ssh_key, gpus=8, price="3.00").bid
    small = place(UserFactory(), gpu, ssh_key, gpus=1, price="2.00").bid
    srv = server(gpu, count=4)
    ask(srv, price="1.00")
    assert [(bid_id, price) for bid_id, _s, _g, price in trades()] == [(small.pk, D("2.00"))]
    assert Bid.objects.get(pk=big.pk).state == BidState.OPEN


def test_offers_of_inactive_servers_do_not_trade(open_market, gpu, ssh_key):
    server(gpu)
    ask(server(gpu, status="pending"), price="1.00")
    placed = place(UserFactory(), gpu, ssh_key, price="5.00")
    assert placed.rental is None


def test_other_gpu_models_are_another_market(open_market, gpu, ssh_key):
    ask(server(GpuModelFactory()), price="1.00")
    server(gpu)
    assert place(UserFactory(), gpu, ssh_key, price="5.00").rental is None


# --- time in force and the market state -------------------------------------------------------


def test_buy_now_fills_at_once_or_is_cancelled(open_market, gpu, ssh_key):
    srv = server(gpu, count=1)
    ask(srv, price="2.00")
    too_low = place(UserFactory(), gpu, ssh_key, price="1.99", tif=TimeInForce.BUY_NOW)
    assert too_low.rental is None
    assert (too_low.bid.state, too_low.bid.cancel_reason) == ("cancelled", "not_filled")

    bought = place(UserFactory(), gpu, ssh_key, price="2.00", tif=TimeInForce.BUY_NOW)
    assert bought.rental.price_usd == D("2.00")

    sold_out = place(UserFactory(), gpu, ssh_key, price="50.00", tif=TimeInForce.BUY_NOW)
    assert (sold_out.bid.state, sold_out.bid.cancel_reason) == ("cancelled", "not_filled")
    assert sold_out.rental is None
    assert Bid.objects.filter(state="open").count() == 0


def test_buy_now_is_refused_while_the_market_is_closed(gpu, ssh_key):
    market_set(False)
    ask(server(gpu), price="1.00")
    with pytest.raises(BidRejected) as refused:
        place(UserFactory(), gpu, ssh_key, price="2.00", tif=TimeInForce.BUY_NOW)
    assert refused.value.code == "market_closed"
    assert not Bid.objects.exists() and not Rental.objects.exists()


def test_bids_rest_while_closed_and_match_when_the_market_opens(gpu, ssh_key):
    market_set(False)
    srv = server(gpu, count=2)
    ask(srv, price="1.00")
    first = place(UserFactory(), gpu, ssh_key, price="2.00")
    assert first.rental is None and first.bid.state == BidState.OPEN
    other_gpu = GpuModelFactory()
    ask(server(other_gpu), price="3.00")
    other = place(UserFactory(), other_gpu, ssh_key, price="3.00")

    made = market_open()

    assert {(r.bid_id, r.price_usd) for r in made} == {(first.bid.pk, D("1.00")), (other.bid.pk, D("3.00"))}
    market_close()
    late = place(UserFactory(), gpu, ssh_key, price="2.00")
    assert late.rental is None and rented(srv) == 1


def test_expired_bids_are_skipped_and_marked(open_market, gpu, ssh_key):
    from exchange.services import bids_expire

    server(gpu)
    soon = timezone.now() + timedelta(hours=1)
    lapsing = place(UserFactory(), gpu, ssh_key, price="3.00", expires_at=soon).bid
    lasting = place(UserFactory(), gpu, ssh_key, price="2.00", expires_at=soon + timedelta(days=1)).bid
    assert bids_expire(now=soon - timedelta(seconds=1)) == 0
    assert bids_expire(now=soon) == 1
    assert Bid.objects.get(pk=lapsing.pk).state == BidState.EXPIRED
    # Matching expires the ones it meets, even before `bids_expire` runs.
    Bid.objects.filter(pk=lasting.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    ask(server(gpu), price="1.00")
    assert not Rental.objects.exists()
    assert Bid.objects.get(pk=lasting.pk).state == BidState.EXPIRED


def test_a_deep_book_is_read_a_chunk_at_a_time_in_price_time_order(open_market, gpu, ssh_key, monkeypatch):
    from exchange.matching import _Candidates

    monkeypatch.setattr(_Candidates, "CHUNK", 3)
    # Cheapest first: one-GPU servers (too small), then servers elsewhere (wrong region), then a tie
    # at the same price where the older ask must win, then a dearer one.
    small = [server(gpu, count=1) for _ in range(5)]
    for srv in small:
        ask(srv, price="1.00")
    for _ in range(4):
        ask(server(gpu, count=4, region="asia-pacific"), price="1.10")
    older, newer, dearer = server(gpu, count=4), server(gpu, count=4), server(gpu, count=4)
    ask(older, price="1.20")
    ask(newer, price="1.20")
    ask(dearer, price="1.30")

    first = place(UserFactory(), gpu, ssh_key, gpus=2, price="5.00", region="europe")
    second = place(UserFactory(), gpu, ssh_key, gpus=4, price="5.00", region="europe")
    third = place(UserFactory(), gpu, ssh_key, gpus=4, price="5.00", region="europe")
    too_dear = place(UserFactory(), gpu, ssh_key, gpus=4, price="1.25", region="europe")

    assert (first.rental.server_id, first.rental.price_usd) == (older.pk, D("1.20"))
    assert (second.rental.server_id, second.rental.price_usd) == (newer.pk, D("1.20"))
    assert (third.rental.server_id, third.rental.price_usd) == (dearer.pk, D("1.30"))
    assert too_dear.rental is None and too_dear.bid.state == BidState.OPEN
    assert [rented(srv) for srv in (*small, older, newer, dearer)] == [0] * 5 + [2, 4, 4]


# --- the first hour must be payable -----------------------------------------------------------


def test_the_first_hour_is_checked_at_the_trade_price(open_market, gpu, ssh_key, balances):
    ask(server(gpu), price="1.25")
    buyer = UserFactory()
    balances.set(buyer, "5.00")  # 4 GPUs at 1.25 = 5.00, at the maximum 2.00 = 8.00
    with pytest.raises(BidRejected) as refused:
        place(buyer, gpu, ssh_key, gpus=4, price="2.00")
    assert refused.value.code == "insufficient_balance"
    assert not Bid.objects.exists() and not Rental.objects.exists()
    balances.calls.clear()
    placed = place(buyer, gpu, ssh_key, gpus=4, price="1.25")
    assert placed.rental.price_usd == D("1.25")
    # Checked once, when the bid was placed, at its maximum price: its own matching pass trades at
    # or below that price, so it does not read the wallet and the rate again (issue 17).
    assert balances.calls == [(buyer.pk, D("1.25"), 4)]


def test_a_resting_bid_its_buyer_cannot_pay_is_cancelled_and_the_buyer_told(
    open_market, gpu, ssh_key, balances, django_capture_on_commit_callbacks
):
    srv = server(gpu, count=1)
    broke = ProfileFactory(preferred_language="fr").user
    solvent = UserFactory()  # no profile: the site's language
    poor_bid = place(broke, gpu, ssh_key, price="3.00").bid
    next_bid = place(solvent, gpu, ssh_key, price="2.00").bid
    balances.set(broke, "2.99")

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        ask(srv, price="1.00")

    poor_bid.refresh_from_db()
    assert (poor_bid.state, poor_bid.cancel_reason) == ("cancelled", "insufficient_balance")
    assert trades() == [(next_bid.pk, srv.pk, 1, D("2.00"))]
    assert len(callbacks) == 1  # the outbox's nudge after commit, which sends the email written with it
    [message] = mail.outbox
    assert message.to == [broke.email]
    assert message.subject == "Votre enchère EverXCloud a été annulée"
    assert message.body == (
        "Bonjour,\n\n"
        f"Votre enchère pour 1 × {gpu.name} à 3,00{NBSP}$US maximum par heure GPU était sur le point "
        f"d'être exécutée, mais votre solde ne couvre plus sa première heure{NBSP}: nous l'avons donc "
        "annulée.\n\n"
        f"Rechargez votre solde et placez à nouveau votre enchère{NBSP}: http://testserver/fr/account/top-up/\n\n"
        "Merci d'utiliser EverXCloud.\n"
    )


def test_nothing_is_payable_until_billing_registers_its_check(open_market, gpu, ssh_key, monkeypatch):
    from exchange import payments

    monkeypatch.setattr(payments, "_check", None)
    assert payments.first_hour_payable(buyer_id=1, price_usd=D("0.01"), gpus=1) is False
    registered = payments.first_hour_check_register(lambda **kwargs: True)
    assert payments.first_hour_payable(buyer_id=1, price_usd=D("0.01"), gpus=1) is True
    assert registered is payments._check


def test_market_commands(gpu, ssh_key):
    market_set(False)
    ask(server(gpu, count=1), price="1.00")
    place(UserFactory(), gpu, ssh_key, price="2.00", expires_at=timezone.now() + timedelta(hours=1))
    out = StringIO()
    call_command("market", "status", stdout=out)
    call_command("market", "open", stdout=out)
    call_command("market", "close", stdout=out)
    call_command("expire_bids", stdout=out)
    assert out.getvalue().splitlines() == [
        "Market closed.", "Market open; the opening pass matched 1 bid(s).", "Market closed.",
        "0 bid(s) expired.",
    ]
