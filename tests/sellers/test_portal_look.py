"""The seller portal's look (issue 18): the utilisation chart and its table include today, the
dashboard shows its four figures as cards, the tabs mark the page open, and every page runs a
fixed number of queries whatever the number of servers, rentals and payouts."""

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone, translation

from billing.services import payout_request
from exchange.charts import utilisation_by_day, utilisation_svg
from exchange.models import EndReason, RentalState
from exchange.selectors import seller_utilisation
from marketplace import formatting
from tests.factories import OfferFactory, RentalFactory, SellerFactory, ServerFactory
from tests.sellers.support import member, url
from tests.sellers.test_portal_money import charge

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 3, 14, 30, tzinfo=UTC)


@pytest.fixture
def seller():
    return SellerFactory(name="Alpha GPU Lda")


@pytest.fixture
def client_a(client, seller):
    client.force_login(member(seller))
    return client


def test_the_utilisation_includes_today_so_far(seller):
    offer = OfferFactory(server=ServerFactory(seller=seller, gpu_count=4))
    # 2 of 4 GPUs since 13:00 today, still running at 14:30; 4 of 4 for the whole of yesterday's
    # 10:00 hour.
    RentalFactory(offer=offer, gpus=2, started_at=NOW.replace(hour=13, minute=0), state="running",
                  paid_through=NOW + timedelta(minutes=30))
    yesterday = NOW.replace(hour=10, minute=0) - timedelta(days=1)
    RentalFactory(offer=offer, gpus=4, started_at=yesterday, ended_at=yesterday + timedelta(hours=1),
                  state=RentalState.ENDED, end_reason=EndReason.STOPPED_BY_BUYER)
    utilisation = seller_utilisation(seller_id=seller.pk, now=NOW, gpus=4)
    assert utilisation.start == datetime(2026, 11, 27, tzinfo=UTC)
    assert utilisation.end == datetime(2026, 12, 3, 15, tzinfo=UTC)
    assert utilisation.days_end == datetime(2026, 12, 4, tzinfo=UTC)
    assert len(utilisation.shares) == 6 * 24 + 15
    # The current hour counts the half hour gone by: half the GPUs for all of it.
    assert utilisation.shares[-1] == pytest.approx(0.5)
    assert utilisation.shares[-2] == pytest.approx(0.5)
    assert utilisation.shares[5 * 24 + 10] == pytest.approx(1.0)

    with translation.override("en"):
        days = utilisation_by_day(utilisation)
    assert [day for day, _share in days] == [datetime(2026, 11, 27 + n).date() for n in range(4)] + [
        datetime(2026, 12, n).date() for n in (1, 2, 3)
    ]
    # Today: two half-rented hours of the fifteen gone by; yesterday one full hour of 24.
    assert days[-1][1] == formatting.percent(round(1 / 15 * 100))
    assert days[-2][1] == formatting.percent(round(1 / 24 * 100))


def test_the_days_follow_the_current_time_zone(seller):
    server = ServerFactory(seller=seller, gpu_count=1)
    # 23:30 UTC on 2 December is 00:30 on 3 December in Paris: today there.
    RentalFactory(offer__server=server, gpus=1, started_at=datetime(2026, 12, 2, 23, 0, tzinfo=UTC),
                  ended_at=datetime(2026, 12, 3, 0, 0, tzinfo=UTC), state=RentalState.ENDED,
                  end_reason=EndReason.STOPPED_BY_BUYER)
    with timezone.override("Europe/Paris"):
        utilisation = seller_utilisation(seller_id=seller.pk, now=NOW, gpus=1)
        days = utilisation_by_day(utilisation)
    assert utilisation.start == datetime(2026, 11, 26, 23, tzinfo=UTC)  # midnight in Paris
    assert days[-1][0] == datetime(2026, 12, 3).date() and days[-1][1] != formatting.percent(0)
    assert len(days) == 7


def test_the_chart_draws_todays_bar_at_its_place(seller):
    server = ServerFactory(seller=seller, gpu_count=2)
    RentalFactory(offer__server=server, gpus=2, started_at=NOW.replace(hour=14, minute=0), state="running",
                  paid_through=NOW + timedelta(minutes=30))
    with translation.override("fr"):
        svg = str(utilisation_svg(seller_utilisation(seller_id=seller.pk, now=NOW, gpus=2)))
    [bar] = re.findall(r'<rect class="bar" x="([\d.]+)"', svg)
    # The 14:00 hour of the last of seven days, on a plot 644 units wide from x = 64.
    assert float(bar) == pytest.approx(64 + (6 * 24 + 14) * 644 / (7 * 24), abs=0.1)
    assert "03/12/2026" in svg


def test_the_dashboard_shows_its_figures_as_cards(client_a, seller):
    ServerFactory(seller=seller, gpu_count=8, status="retired")
    server = ServerFactory(seller=seller, gpu_count=4)
    RentalFactory(offer=OfferFactory(server=server), gpus=2)
    charge(seller, 1, net="90.00", fee="10.00")
    payout_request(seller_id=seller.pk, requested_by=member(seller), amount_text="60")
    html = client_a.get(url("sellers:portal", "pt")).content.decode()
    cards = {
        name: re.sub(r"<[^>]+>", "", body)
        for name, body in re.findall(r'<li class="card" data-testid="card-([a-z-]+)">(.*?)</li>', html, re.S)
    }
    assert list(cards) == ["servers", "gpus-rented", "earnings-month", "payouts-pending"]
    assert cards["servers"].startswith("1 ")
    assert cards["gpus-rented"].startswith("2 ") and "de 4 GPU no total" in cards["gpus-rented"]
    with translation.override("pt"):
        assert cards["earnings-month"].startswith(formatting.usd(Decimal("90.00")))
        assert cards["payouts-pending"].startswith(formatting.usd(Decimal("60.00")))
    assert 'href="/pt/seller/" aria-current="page"' in html


def test_a_server_page_marks_the_servers_tab(client_a, seller):
    server = ServerFactory(seller=seller)
    html = client_a.get(url("sellers:portal-server", "fr", server_id=server.pk)).content.decode()
    tabs = re.search(r'<nav class="tabs".*?</nav>', html, re.S).group(0)
    assert tabs.count("aria-current") == 1
    assert 'href="/fr/seller/servers/" aria-current="true"' in tabs


PAGES = ["sellers:portal", "sellers:portal-rentals", "sellers:portal-payouts", "sellers:portal-members",
         "sellers:portal-earnings"]


@pytest.mark.parametrize("name", PAGES)
def test_the_portal_pages_run_a_fixed_number_of_queries(
    client_a, seller, name, django_assert_max_num_queries
):
    owner = member(seller)

    def grow(count):
        for number in range(count):
            server = ServerFactory(seller=seller)
            RentalFactory(offer=OfferFactory(server=server), gpus=1)
            charge(seller, server.pk * 100 + number, net="60.00")
            payout_request(seller_id=seller.pk, requested_by=owner, amount_text="50")

    grow(1)
    with django_assert_max_num_queries(16) as small:
        assert client_a.get(url(name, "fr")).status_code == 200
    grow(6)
    with django_assert_max_num_queries(len(small.captured_queries)):
        assert client_a.get(url(name, "fr")).status_code == 200
