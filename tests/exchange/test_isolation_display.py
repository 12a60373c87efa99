"""Every offer shows its isolation level and what a rental gets with each GPU (the trade page's
book, the API's book, the buyer's rental page, the seller portal), in the page's number format; the
trade page and the API filter the book by level, and answer hostile filters without a 500."""

from decimal import Decimal

import pytest
from django.utils import translation
from django.utils.html import escape
from django.utils.translation import gettext

from exchange.views import CONTAINER_CONDITIONS
from sellers.isolation import FACTS, LEVELS_BY_STRENGTH, SHARED_FACTS, Reserves, isolation_level_of
from sellers.models import PerGpu
from tests.factories import GpuModelFactory, OfferFactory, RentalFactory, ServerFactory
from tests.sellers.support import member, url

from .support import signed_in

pytestmark = pytest.mark.django_db

D = Decimal
NNBSP = "\u202f"  # French thousands
MESSAGE = "Choose at least one isolation level: container, shared server or whole server."


def shares(**fields):
    known = {"gpu_count": 8, "sellable_cpu_cores": None, "sellable_memory_mib": None,
             "sellable_disk_gb": None, "cpu_cores": None, "ram_gb": None, "disk_gb": None}
    return PerGpu.of(**known | fields)


# --- the share of each GPU ------------------------------------------------------------------------


def test_a_gpu_gets_its_part_of_the_sellable_hardware_rounded_down():
    assert shares(sellable_cpu_cores=62, sellable_memory_mib=500_000, sellable_disk_gb=3950) == PerGpu(
        cpu_cores=7, memory_gib=61, disk_gb=493
    )


def test_without_a_report_the_registered_hardware_counts_and_the_report_wins():
    assert shares(cpu_cores=64, ram_gb=512, disk_gb=4000) == PerGpu(8, 64, 500)
    assert shares(sellable_cpu_cores=32, cpu_cores=64, ram_gb=512) == PerGpu(4, 64, None)


def test_nothing_known_is_nothing_shown():
    assert shares() is None
    assert shares(gpu_count=0, cpu_cores=64) is None


@pytest.mark.parametrize("language, expected", [
    ("en", "16 vCPU, 128 GiB RAM, 2,000 GB disk per GPU"),
    ("fr", f"16 vCPU, 128 Gio de RAM, 2{NNBSP}000 Go de disque par GPU"),
    ("pt", "16 vCPU, 128 GiB de RAM, 2.000 GB de disco por GPU"),
])
def test_the_share_is_written_in_the_page_language(language, expected):
    with translation.override(language):
        assert PerGpu(16, 128, 2000).text() == expected


def test_only_the_parts_known_are_written():
    with translation.override("en"):
        assert PerGpu(None, 128, None).text() == "128 GiB RAM per GPU"
        assert PerGpu(16, None, 500).text() == "16 vCPU, 500 GB disk per GPU"


# --- the trade page and the API ---------------------------------------------------------------------


@pytest.fixture
def book():
    gpu = GpuModelFactory(slug="h200")

    def ask(price, level, **fields):
        server = ServerFactory(gpu_model=gpu, gpu_count=8, isolation_level=level, **fields)
        return OfferFactory(server=server, gpus_offered=8, price_usd=D(price))

    return {
        "shared": ask("2.00", "shared"),
        "container": ask("2.50", "container", sellable_disk_gb=16_000),
        "whole": ask("3.00", "whole", sellable_cpu_cores=None, sellable_memory_mib=None,
                     sellable_disk_gb=None),
    }


def test_the_french_book_shows_each_offers_level_and_share(client, book):
    html = client.get("/fr/trade/h200/").content.decode()
    assert (
        '<span data-testid="ask-isolation">Serveur partagé</span> · <span data-testid="ask-resources">'
        "8 vCPU, 64 Gio de RAM, 500 Go de disque par GPU</span>"
    ) in html
    assert (
        '<span data-testid="ask-isolation">Conteneur</span> · <span data-testid="ask-resources">'
        f"8 vCPU, 64 Gio de RAM, 2{NNBSP}000 Go de disque par GPU</span>"
    ) in html
    assert '<span data-testid="ask-isolation">Serveur entier</span></li>' in html


def test_the_filter_offers_checkboxes_all_ticked(client, book):
    html = client.get("/fr/trade/h200/").content.decode()
    for position, value in enumerate(["container", "shared", "whole"]):
        assert (
            f'<input type="checkbox" name="isolation" value="{value}" id="filter_isolation_{position}" '
            "checked>"
        ) in html


@pytest.mark.parametrize("query", ["isolation=container&isolation=whole", "isolation=container,whole"])
def test_the_filter_narrows_the_book_and_keeps_the_other_filters(client, book, query):
    html = client.get(f"/fr/trade/h200/?{query}&min_reliability=").content.decode()
    assert html.count('data-testid="ask-isolation"') == 2
    assert "Serveur partagé</span>" not in html
    assert "Offres des serveurs vendus en\u00a0: Conteneur, Serveur entier." in html
    assert 'data-hx-get="/fr/trade/h200/book/?isolation=container%2Cwhole"' in html
    assert '<input type="checkbox" name="isolation" value="shared" id="filter_isolation_1">' in html
    assert '<input type="checkbox" name="isolation" value="whole" id="filter_isolation_2" checked>' in html
    # The order forms start from the levels the page shows.
    assert '<input type="checkbox" name="isolation" value="shared" id="bid_isolation_1">' in html
    book_part = client.get(f"/fr/trade/h200/book/?{query}").content.decode()
    assert book_part.count('data-testid="ask-isolation"') == 2


@pytest.mark.parametrize("query", [
    "isolation=", "isolation=everything", "isolation=shared,", "isolation=" + "shared," * 100,
    "isolation=%C3%A9", "isolation=Shared",
])
def test_a_hostile_filter_says_so_and_shows_every_level(client, book, query):
    for path in ("/fr/trade/h200/", "/fr/trade/h200/book/"):
        response = client.get(f"{path}?{query}")
        assert response.status_code == 200
        html = response.content.decode()
        with translation.override("fr"):
            assert escape(gettext(MESSAGE)) in html
        assert html.count('data-testid="ask-isolation"') == 3


def test_a_nul_in_the_filter_is_refused_without_a_500(client, book):
    assert client.get("/fr/trade/h200/?isolation=shared%00").status_code == 400
    assert client.get("/api/v1/markets/h200/book?isolation=shared%00").status_code == 400


def test_the_api_book_shows_levels_and_shares_and_filters(client, book):
    data = client.get("/api/v1/markets/h200/book").json()
    assert data["isolation"] is None
    assert [offer["isolation"] for ask in data["asks"] for offer in ask["offers"]] == [
        "shared", "container", "whole",
    ]
    assert [offer["per_gpu"] for ask in data["asks"] for offer in ask["offers"]] == [
        {"cpu_cores": 8, "memory_gib": 64, "disk_gb": 500},
        {"cpu_cores": 8, "memory_gib": 64, "disk_gb": 2000},
        None,
    ]
    filtered = client.get("/api/v1/markets/h200/book", {"isolation": "whole,container"}).json()
    assert filtered["isolation"] == ["container", "whole"]
    assert [ask["price"]["amount"] for ask in filtered["asks"]] == ["2.50", "3.00"]


@pytest.mark.parametrize("value", ["", "everything", "shared,", "Whole", "shared," * 100, "é"])
def test_a_hostile_api_filter_is_a_400_problem(client, book, value):
    response = client.get(
        "/api/v1/markets/h200/book", {"isolation": value}, headers={"Accept-Language": "fr"}
    )
    assert (response.status_code, response.json()["code"]) == (400, "isolation_filter_invalid")
    assert response["Content-Type"].startswith("application/problem+json")
    with translation.override("fr"):
        assert response.json()["detail"] == gettext(MESSAGE)


# --- the buyer's rental and the seller's portal -------------------------------------------------------


def test_the_rental_page_shows_the_level_it_was_sold_with(book):
    rental = RentalFactory(offer=book["container"], isolation_level="container")
    html = signed_in(rental.buyer).get(f"/pt/account/rentals/{rental.pk}/").content.decode()
    assert (
        '<dd data-testid="rental-isolation">Contentor · 8 vCPU, 64 GiB de RAM, 2.000 GB de disco por GPU</dd>'
    ) in html


def test_the_seller_portal_shows_each_servers_level_and_share(client, book):
    server = book["whole"].server
    client.force_login(member(server.seller))
    page = client.get(url("sellers:portal-server", "fr", server_id=server.pk)).content.decode()
    servers = client.get(url("sellers:portal-servers", "fr")).content.decode()
    assert (
        '<p data-testid="offer-isolation">Les acheteurs voient ce serveur vendu en\u00a0: Serveur entier. '
        "Un serveur entier propose tous ses GPU, à une seule location à la fois.</p>"
    ) in page
    assert '<span data-testid="server-isolation">Serveur entier</span>' in servers


# --- the market rules page --------------------------------------------------------------------------


def reaching_report(**container) -> dict:
    facts = dict.fromkeys(FACTS, True) | {"mig_enabled": False}
    return {
        "version": 1, "server_id": 1, "hardware": {"cpu_cores": 64, "memory_mib": 524288, "disk_gb": 4000},
        "backend": "v1", "facts": facts,
        "container": {"runtime": "podman", "runtime_version": "4.3.1", "toolkit_version": "1.17.8",
                      "gpus_by_uuid": True, "self_test": True, "disk_limited": True, "templates": []}
        | container,
    }


def level_of(report) -> str:
    return isolation_level_of(report, server_id=1, gpu_count=8, reserves=Reserves.of_settings(),
                              toolkit_minimum="1.17.8")


@pytest.mark.parametrize("condition", list(CONTAINER_CONDITIONS))
def test_each_container_condition_the_page_lists_is_one_the_rule_needs(condition):
    assert level_of(reaching_report()) == "container"
    assert level_of(reaching_report(**{condition: False})) == "shared"


@pytest.mark.parametrize("language", ["en", "pt", "fr"])
def test_the_market_rules_publish_the_isolation_rule_from_its_data(client, language):
    html = client.get(f"/{language}/market-rules/").content.decode()
    with translation.override(language):
        shared = [escape(str(FACTS[name])) for name in SHARED_FACTS]
        shown = [escape(str(FACTS[name])) for name in ("device_cgroup", "processes_hidden")]
        conditions = [escape(str(text)) for text in CONTAINER_CONDITIONS.values()]
        labels = [str(level.label) for level in LEVELS_BY_STRENGTH]
    listed = html.split('data-testid="shared-facts">')[1].split("</ul>")[0]
    assert listed == "".join(f"<li>{fact}</li>" for fact in shared)
    assert html.split('data-testid="shown-facts">')[1].split("</ul>")[0] == "".join(
        f"<li>{fact}</li>" for fact in shown
    )
    assert html.split('data-testid="container-conditions">')[1].split("</ul>")[0] == "".join(
        f"<li>{condition}</li>" for condition in conditions
    )
    levels = html.split('data-testid="isolation-levels">')[1].split("</dl>")[0]
    assert [part.split("</dt>")[0] for part in levels.split("<dt>")[1:]] == labels
    assert "1.17.8" in html


def test_the_french_rules_keep_french_typography(client):
    html = client.get("/fr/market-rules/").content.decode()
    assert "protégez vos services par un mot de passe" in html
    assert "Serveur entier</strong> sinon\u00a0: quand l'agent" in html.replace("&#x27;", "'")
    assert "2 cœurs, 8 Gio de mémoire et 50 Go de disque" in html
