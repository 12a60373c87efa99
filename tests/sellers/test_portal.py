from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import translation
from django.utils.html import escape
from django.utils.translation import gettext

from billing.services import rental_charge_next_hour
from exchange.models import Offer, OfferState, Rental
from exchange.selectors import buyer_alias
from exchange.services import price_message, server_activate, server_retire
from sellers.exceptions import ServerInvalid, ServerLocked
from sellers.models import Server, ServerStatus
from sellers.services import server_register, server_update
from tests.billing.support import START, buyer_with
from tests.factories import (
    GpuModelFactory,
    OfferFactory,
    RentalFactory,
    SellerFactory,
    ServerFactory,
    UserFactory,
    operator_make,
)
from tests.sellers.support import member, url

pytestmark = pytest.mark.django_db


@pytest.fixture
def seller_a():
    return SellerFactory(name="Alpha GPU Lda")


@pytest.fixture
def client_a(client, seller_a):
    client.force_login(member(seller_a))
    return client


def server_data(gpu_model, **overrides):
    data = {
        "gpu_model": gpu_model.pk, "gpu_count": 8, "region": "europe", "name": "lis-h100-01",
        "host": "lis-h100-01.example.pt", "ssh_port": 22,
    }
    data.update(overrides)
    return data


def server_state(server):
    server.refresh_from_db()
    return (server.name, server.gpu_count, server.region, server.host, server.ssh_port, server.status)


# --- authorization -------------------------------------------------------------------------------

def other_seller_urls():
    server = ServerFactory()
    offer = OfferFactory(server=server)
    return server, offer, [
        ("get", url("sellers:portal-server", server_id=server.pk)),
        ("get", url("sellers:portal-server-edit", server_id=server.pk)),
        ("post", url("sellers:portal-server-edit", server_id=server.pk)),
        ("post", url("sellers:portal-server-retire", server_id=server.pk)),
        ("post", url("sellers:portal-server-failure", server_id=server.pk)),
        ("post", url("sellers:portal-offer-post", server_id=server.pk)),
        ("post", url("sellers:portal-offer-update", offer_id=offer.pk)),
        ("post", url("sellers:portal-offer-withdraw", offer_id=offer.pk)),
    ]


def test_member_of_seller_a_gets_404_for_every_url_of_seller_b(client_a):
    server, offer, urls = other_seller_urls()
    RentalFactory(offer=offer, state="starting")
    before = server_state(server)
    for method, address in urls:
        response = getattr(client_a, method)(address, {"gpus": 1, "price_usd": "1.00", **server_data(
            server.gpu_model, gpu_count=16)})
        assert response.status_code == 404, address
    assert server_state(server) == before
    offer.refresh_from_db()
    assert offer.state == OfferState.ACTIVE and offer.price_usd == Decimal("2.00")
    assert Rental.objects.get().state == "starting"


PORTAL_PAGES = (
    "sellers:portal", "sellers:portal-servers", "sellers:portal-server-register", "sellers:portal-rentals",
)


def test_non_member_is_sent_away_from_every_portal_url(client):
    server, _offer, urls = other_seller_urls()
    urls += [("get", url(name)) for name in PORTAL_PAGES]
    for method, address in urls:
        assert getattr(client, method)(address).status_code == 302, address  # anonymous: sign in
    client.force_login(UserFactory())
    for method, address in urls:
        response = getattr(client, method)(address)
        assert response.status_code == 302 and response["Location"] == url("sellers:sell"), address
    assert server.offers.get().state == OfferState.ACTIVE


def test_member_without_two_factor_is_sent_to_set_it_up(client, seller_a):
    client.force_login(member(seller_a, mfa=False))
    for name in PORTAL_PAGES:
        response = client.get(url(name))
        assert response.status_code == 302
        assert response["Location"].startswith(url("sellers:two-factor") + "?next=")
        assert client.get(response["Location"])["Location"] == reverse("mfa_activate_totp")


# --- pages ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("language", ["en", "pt", "fr"])
def test_pages_render_in_each_language(client_a, seller_a, language):
    server = ServerFactory(seller=seller_a, name="lis-01")
    OfferFactory(server=server)
    RentalFactory(offer=server.offers.get(), state="starting")
    pages = [url(name, language) for name in PORTAL_PAGES]
    pages += [url("sellers:portal-server", language, server_id=server.pk),
              url("sellers:portal-server-edit", language, server_id=server.pk)]
    for page in pages:
        response = client_a.get(page)
        assert response.status_code == 200, page
    with translation.override(language):
        dashboard = client_a.get(url("sellers:portal", language)).content.decode()
        assert escape(gettext("GPUs rented now")) in dashboard
        detail = client_a.get(url("sellers:portal-server", language, server_id=server.pk)).content.decode()
        assert escape(gettext("Report a server failure")) in detail


def test_dashboard_and_servers_page_run_a_constant_number_of_queries(
    client_a, seller_a, django_assert_max_num_queries
):
    def servers(count):
        for _ in range(count):
            OfferFactory(server=ServerFactory(seller=seller_a))

    servers(2)
    for name in ("sellers:portal", "sellers:portal-servers"):
        with django_assert_max_num_queries(14) as small:
            assert client_a.get(url(name)).status_code == 200
        servers(18)
        with django_assert_max_num_queries(len(small.captured_queries)):
            assert client_a.get(url(name)).status_code == 200


# --- servers -------------------------------------------------------------------------------------

def test_register_a_server_starts_pending(client_a, seller_a):
    gpu = GpuModelFactory()
    response = client_a.post(url("sellers:portal-server-register"), server_data(gpu))
    server = Server.objects.get(seller=seller_a)
    assert response.status_code == 302
    assert response["Location"] == url("sellers:portal-server", server_id=server.pk)
    assert (server.status, server.gpu_count, server.gpu_model) == (ServerStatus.PENDING, 8, gpu)
    server_activate(server_id=server.pk, operator=operator_make())
    server.refresh_from_db()
    assert server.status == ServerStatus.ACTIVE


@pytest.mark.parametrize("count", [0, 17])
def test_gpu_count_out_of_range_is_refused(client_a, seller_a, count):
    gpu = GpuModelFactory()
    response = client_a.post(url("sellers:portal-server-register"), server_data(gpu, gpu_count=count))
    assert response.status_code == 200
    assert escape(gettext("A server has from 1 to %(max)s GPUs.") % {"max": 16}) in response.content.decode()
    assert not Server.objects.exists()
    with pytest.raises(ServerInvalid) as error:
        server_register(seller=seller_a, gpu_model_id=gpu.pk, name="x", gpu_count=count, region="europe",
                        host="x.example", ssh_port=22)
    assert list(error.value.errors) == ["gpu_count"]
    server = ServerFactory(seller=seller_a)
    before = server_state(server)
    client_a.post(url("sellers:portal-server-edit", server_id=server.pk), server_data(gpu, gpu_count=count))
    assert server_state(server) == before


def test_gpu_count_cannot_drop_below_the_gpus_rented(client_a, seller_a):
    server = ServerFactory(seller=seller_a, gpu_count=8)
    offer = OfferFactory(server=server, gpus_offered=8)
    RentalFactory(offer=offer, gpus=4, state="starting")
    before = server_state(server)
    response = client_a.post(
        url("sellers:portal-server-edit", server_id=server.pk), server_data(server.gpu_model, gpu_count=2,
                                                                            name=server.name)
    )
    assert response.status_code == 200
    assert server_state(server) == before
    with pytest.raises(ServerInvalid) as error:
        server_update(seller=seller_a, server_id=server.pk, name=server.name, gpu_count=3, region="europe",
                      host="h.example", ssh_port=22)
    assert error.value.code == "gpu_count_below_rented"
    assert server_state(server) == before
    server_update(seller=seller_a, server_id=server.pk, name=server.name, gpu_count=4, region="europe",
                  host="h.example", ssh_port=2222)
    assert server_state(server)[1] == 4


def test_retire_only_without_running_rentals(client_a, seller_a):
    server = ServerFactory(seller=seller_a)
    offer = OfferFactory(server=server)
    rental = RentalFactory(offer=offer, state="starting")
    with pytest.raises(ServerLocked):
        server_retire(seller_id=seller_a.pk, server_id=server.pk)
    response = client_a.post(url("sellers:portal-server-retire", server_id=server.pk), follow=True)
    assert escape(gettext("This server has running rentals. You can retire it once they have ended.")) in (
        response.content.decode()
    )
    assert server_state(server)[-1] == ServerStatus.ACTIVE
    rental.delete()
    Server.objects.filter(pk=server.pk).update(gpus_rented=0)
    client_a.post(url("sellers:portal-server-retire", server_id=server.pk))
    assert server_state(server)[-1] == ServerStatus.RETIRED
    offer.refresh_from_db()
    assert offer.state == OfferState.WITHDRAWN


# --- offers --------------------------------------------------------------------------------------

def test_post_update_and_withdraw_an_offer(client_a, seller_a):
    server = ServerFactory(seller=seller_a, gpu_count=8)
    ServerFactory(gpu_model=server.gpu_model, gpu_count=8)  # another seller's cheaper offer
    OfferFactory(server=Server.objects.exclude(pk=server.pk).get(), gpus_offered=3, price_usd=Decimal("1.50"))
    response = client_a.post(url("sellers:portal-offer-post", server_id=server.pk),
                             {"gpus": 4, "price_usd": "2.10"})
    assert response.status_code == 302
    offer = Offer.objects.get(server=server)
    assert (offer.gpus_offered, offer.price_usd, offer.state) == (4, Decimal("2.10"), OfferState.ACTIVE)
    page = client_a.get(url("sellers:portal-server", server_id=server.pk)).content.decode()
    assert "3 GPUs are offered cheaper than yours." in page
    assert "The best ask of this GPU model is $1.50 per GPU-hour." in page

    client_a.post(url("sellers:portal-offer-update", offer_id=offer.pk), {"gpus": 6, "price_usd": "1.99"})
    offer.refresh_from_db()
    assert (offer.gpus_offered, offer.price_usd) == (6, Decimal("1.99"))

    client_a.post(url("sellers:portal-offer-withdraw", offer_id=offer.pk))
    offer.refresh_from_db()
    assert offer.state == OfferState.WITHDRAWN


@pytest.mark.parametrize("price", ["2.005", "0", "-1.00", "100.01"])
def test_price_off_tick_or_not_positive_is_refused(client_a, seller_a, price):
    server = ServerFactory(seller=seller_a)
    data = {"gpus": 2, "price_usd": price}
    response = client_a.post(url("sellers:portal-offer-post", server_id=server.pk), data)
    assert response.status_code == 400
    expected = price_message("price_off_tick" if price == "2.005" else "price_out_of_range")
    assert escape(str(expected)) in response.content.decode()
    assert not Offer.objects.exists()
    offer = OfferFactory(server=server)
    response = client_a.post(url("sellers:portal-offer-update", offer_id=offer.pk), data)
    assert response.status_code == 400
    assert escape(str(expected)) in response.content.decode()
    offer.refresh_from_db()
    assert (offer.gpus_offered, offer.price_usd) == (4, Decimal("2.00"))


@pytest.mark.parametrize("language", ["en", "pt", "fr"])
def test_a_whole_server_offers_all_its_gpus_or_nothing(client_a, seller_a, language):
    server = ServerFactory(seller=seller_a, gpu_count=8, isolation_level="whole")
    response = client_a.post(url("sellers:portal-offer-post", language, server_id=server.pk),
                             {"gpus": 4, "price_usd": "2.10"})
    assert response.status_code == 400
    with translation.override(language):
        message = "This server is sold as a whole server, one rental at a time: offer all its %(count)d GPUs."
        expected = gettext(message) % {"count": 8}
        assert language == "en" or gettext(message) != message
    assert escape(expected) in response.content.decode()
    assert not Offer.objects.exists()

    offer = OfferFactory(server=server, gpus_offered=8)
    response = client_a.post(url("sellers:portal-offer-update", offer_id=offer.pk),
                             {"gpus": 7, "price_usd": "2.10"})
    assert response.status_code == 400
    offer.refresh_from_db()
    assert (offer.gpus_offered, offer.price_usd) == (8, Decimal("2.00"))


# --- rentals -------------------------------------------------------------------------------------

def test_rentals_show_buyers_anonymously(client_a, seller_a):
    server = ServerFactory(seller=seller_a)
    buyer = UserFactory(email="secret-buyer@example.com")
    rental = RentalFactory(offer=OfferFactory(server=server), buyer=buyer, state="starting")
    page = client_a.get(url("sellers:portal-rentals")).content.decode()
    assert "secret-buyer" not in page and str(buyer.pk) not in page.split("Buyer #")[1][:8]
    alias = buyer_alias(buyer_id=buyer.pk, seller_id=seller_a.pk)
    assert f"Buyer #{alias}" in page
    assert alias != buyer_alias(buyer_id=buyer.pk, seller_id=seller_a.pk + 1)
    assert rental.server_id == server.pk


def test_rentals_show_what_each_has_earned_the_seller(client_a, seller_a):
    """The rows are the exchange's, the earnings billing's: the page gathers both."""
    paid = RentalFactory(
        buyer=buyer_with("USD", "10.00"), started_at=START, gpus=2,
        offer=OfferFactory(server=ServerFactory(seller=seller_a, name="lis-paid"), price_usd=Decimal("2.50")),
    )
    rental_charge_next_hour(rental_id=paid.pk, now=START)  # 2 GPUs at $2.50, less the 10 % fee
    RentalFactory(offer=OfferFactory(server=ServerFactory(seller=seller_a, name="lis-new")))
    page = client_a.get(url("sellers:portal-rentals")).content.decode()
    rows = {row.split("</td>")[1].split(">")[-1]: row for row in page.split("<tr>")[2:]}
    assert '<td class="num">$4.50</td>' in rows["lis-paid"]
    assert '<td class="num">—</td>' in rows["lis-new"]


def test_report_a_server_failure_ends_its_rentals(client_a, seller_a):
    server = ServerFactory(seller=seller_a)
    offer = OfferFactory(server=server)
    rental = RentalFactory(offer=offer, state="starting")
    response = client_a.post(url("sellers:portal-server-failure", server_id=server.pk))
    assert response.status_code == 302
    rental.refresh_from_db()
    offer.refresh_from_db()
    assert (rental.state, rental.end_reason) == ("ended", "server_failure")
    assert offer.state == OfferState.WITHDRAWN


# --- server details ------------------------------------------------------------------------------

def test_register_and_edit_a_server_with_its_details(client_a, seller_a):
    gpu = GpuModelFactory()
    details = {"city": "Lisboa", "cpu_cores": 64, "ram_gb": 512, "disk_gb": 4000, "network_gbps": 25}
    response = client_a.post(url("sellers:portal-server-register"), server_data(gpu, **details))
    assert response.status_code == 302
    server = Server.objects.get(seller=seller_a)
    assert (server.city, server.cpu_cores, server.ram_gb, server.disk_gb, server.network_gbps) == (
        "Lisboa", 64, 512, 4000, 25
    )
    page = client_a.get(url("sellers:portal-server", server_id=server.pk)).content.decode()
    assert "Lisboa" in page and "4,000" in page
    edit = server_data(gpu, city="Porto", cpu_cores="", ram_gb=256, disk_gb="", network_gbps=10)
    assert client_a.post(url("sellers:portal-server-edit", server_id=server.pk), edit).status_code == 302
    server.refresh_from_db()
    assert (server.city, server.cpu_cores, server.ram_gb, server.disk_gb, server.network_gbps) == (
        "Porto", None, 256, None, 10
    )


@pytest.mark.parametrize("field", ["cpu_cores", "ram_gb", "disk_gb", "network_gbps"])
def test_server_details_must_be_positive(client_a, seller_a, field):
    gpu = GpuModelFactory()
    response = client_a.post(url("sellers:portal-server-register"), server_data(gpu, **{field: 0}))
    assert response.status_code == 200
    message = gettext("Enter a whole number above zero, or leave the field empty.")
    assert escape(message) in response.content.decode()
    assert not Server.objects.filter(seller=seller_a).exists()
    with pytest.raises(ServerInvalid) as error:
        server_register(seller=seller_a, gpu_model_id=gpu.pk, name="x", gpu_count=1, region="europe",
                        host="h.example", **{field: -3})
    assert field in error.value.errors
    assert not Server.objects.filter(seller=seller_a).exists()
