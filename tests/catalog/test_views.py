import json
import re
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import translation

from catalog.models import GpuModel
from catalog.workloads import WORKLOADS
from exchange.services import market_open
from tests.factories import OfferFactory, SellerFactory, ServerFactory

pytestmark = pytest.mark.django_db

LANGUAGES = ("en", "pt", "fr")
NBSP, NNBSP = "\u00a0", "\u202f"

# The H200 row of the fine-tuning table in each language: memory, bandwidth, QLoRA, LoRA, price.
H200_ROW = {
    "en": ["141 GB", "4,800 GB/s", "≈ 110B", "≈ 45B", "from $4.19"],
    "pt": ["141 GB", "4.800 GB/s", f"≈ 110{NBSP}mil{NBSP}M", f"≈ 45{NBSP}mil{NBSP}M",
           f"a partir de US${NBSP}4,19"],
    "fr": [f"141{NNBSP}Go", f"4{NNBSP}800{NNBSP}Go/s", f"≈ 110{NBSP}Md", f"≈ 45{NBSP}Md",
           f"dès 4,19{NBSP}$US"],
}


def url(name: str, language: str, **kwargs) -> str:
    with translation.override(language):
        return reverse(name, kwargs=kwargs or None)


def row_cells(html: str, slug: str) -> list[str]:
    row = re.search(rf'<tr data-gpu="{slug}">(.*?)</tr>', html, re.S).group(1)
    return re.findall(r'<td[^>]*>(.*?)</td>', row, re.S)


def public_urls(language: str) -> list[str]:
    urls = [url("catalog:home", language), url("catalog:gpu-list", language),
            url("catalog:compare", language)]
    urls += [url("catalog:workload-detail", language, slug=w.slug) for w in WORKLOADS]
    urls += [url("catalog:gpu-detail", language, slug=slug) for slug in ("rtx-4090", "h200")]
    return urls


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_page_renders_in_every_language(client, demo_book, language):
    for address in public_urls(language):
        response = client.get(address)
        assert response.status_code == 200, address
        html = response.content.decode()
        assert f'<html lang="{language}">' in html
        assert "<title>" in html and 'name="description"' in html


@pytest.mark.parametrize("language", LANGUAGES)
def test_fine_tuning_table_has_the_right_figures(client, demo_book, language):
    html = client.get(url("catalog:workload-detail", language, slug="fine-tuning")).content.decode()
    assert row_cells(html, "h200") == H200_ROW[language]
    # Every GPU of the catalog is listed, each at the demo book's lowest price.
    assert len(re.findall(r'<tr data-gpu="', html)) == 9


def test_titles_and_descriptions_are_translated(client, demo_book):
    titles = set()
    for language in LANGUAGES:
        html = client.get(url("catalog:workload-detail", language, slug="fine-tuning")).content.decode()
        titles.add(re.search(r"<title>(.*?)</title>", html, re.S).group(1))
    assert len(titles) == 3


def test_workload_pages_list_only_suitable_gpus(client, demo_book):
    html = client.get(url("catalog:workload-detail", "en", slug="scientific")).content.decode()
    listed = set(re.findall(r'<tr data-gpu="([^"]+)"', html))
    assert listed == {"a100-sxm", "h100-sxm", "h200"}
    html = client.get(url("catalog:workload-detail", "en", slug="rendering")).content.decode()
    assert "h100-sxm" not in set(re.findall(r'<tr data-gpu="([^"]+)"', html))


def test_workload_page_has_faq_json_ld(client, demo_book):
    html = client.get(url("catalog:workload-detail", "fr", slug="fine-tuning")).content.decode()
    block = re.search(r'<script type="application/ld\+json">(.*?)</script>', html, re.S).group(1)
    data = json.loads(block)
    assert data["@type"] == "FAQPage"
    assert len(data["mainEntity"]) == 4
    assert all(q["acceptedAnswer"]["text"] for q in data["mainEntity"])


def test_call_to_action_follows_the_market_state(client, demo_book):
    page = url("catalog:workload-detail", "en", slug="fine-tuning")
    assert "Be ready on launch day" in client.get(page).content.decode()
    market_open()  # the service: the page cached a moment ago is of the closed market
    html = client.get(page).content.decode()
    assert "Rent now" in html and "Be ready on launch day" not in html


def test_gpu_without_offers_says_so(client, gpu_catalog):
    html = client.get(url("catalog:gpu-detail", "en", slug="h200")).content.decode()
    assert "no offers yet" in html


def test_gpu_page_shows_specs_fits_price_and_workloads(client, demo_book):
    html = client.get(url("catalog:gpu-detail", "fr", slug="h200")).content.decode()
    assert f"dès 4,19{NBSP}$US" in html
    assert f"4{NNBSP}800{NNBSP}Go/s" in html
    assert f"989,5{NBSP}TFLOPS" in html
    assert f"≈ 110{NBSP}Md" in html  # QLoRA
    assert url("catalog:workload-detail", "fr", slug="training") in html
    assert url("catalog:workload-detail", "fr", slug="rendering") not in html


def test_gpu_page_counts_free_gpus_on_offer(client, gpu_catalog):
    server = ServerFactory(gpu_model=gpu_catalog["h200"], gpu_count=8, gpus_rented=5)
    OfferFactory(server=server, gpus_offered=8, price_usd=Decimal("4.00"))
    html = client.get(url("catalog:gpu-detail", "en", slug="h200")).content.decode()
    assert "3 GPUs on offer right now." in html


def test_gpu_list_sorts_by_price_memory_and_bandwidth(client, demo_book):
    base = url("catalog:gpu-list", "en")

    def order(sort):
        html = client.get(base, {"sort": sort}).content.decode()
        return re.findall(r'<tr data-gpu="([^"]+)"', html)

    assert order("-memory")[:2] == ["h200", "rtx-pro-6000-blackwell"]
    assert order("memory")[0] == "rtx-4090"
    assert order("-bandwidth")[:2] == ["h200", "h100-sxm"]
    assert order("price")[-1] == "h200"
    assert order("price")[:2] in (["rtx-4090", "rtx-a6000"], ["rtx-a6000", "rtx-4090"])
    assert len(order("nonsense")) == 9


def test_gpu_list_puts_gpus_without_offers_last_when_sorting_by_price(client, gpu_catalog):
    OfferFactory(server__gpu_model=gpu_catalog["l40s"], price_usd=Decimal("9.00"))
    html = client.get(url("catalog:gpu-list", "en"), {"sort": "price"}).content.decode()
    assert re.findall(r'<tr data-gpu="([^"]+)"', html)[0] == "l40s"


class TestCompare:
    def get(self, client, language="en", **params):
        return client.get(url("catalog:compare", language), params)

    def test_side_by_side_with_price_per_gb(self, client, demo_book):
        response = self.get(client, workload="fine-tuning", gpu=["h200", "rtx-4090"])
        html = response.content.decode()
        assert response.status_code == 200
        assert "compare-table" in html
        assert "$0.0297" in html  # 4.19 / 141
        assert "$0.0138" in html  # 0.33 / 24

    def test_unknown_gpu_is_a_clear_message(self, client, demo_book):
        response = self.get(client, "fr", workload="fine-tuning", gpu=["h200", "nope-9000"])
        html = response.content.decode()
        assert response.status_code == 200
        assert "nope-9000" in html and 'role="alert"' in html
        assert "compare-table" not in html

    def test_more_than_four_gpus(self, client, demo_book):
        gpus = ["h200", "h100-sxm", "a100-sxm", "l40s", "rtx-4090"]
        html = self.get(client, workload="training", gpu=gpus).content.decode()
        assert "at most four GPUs" in html and "compare-table" not in html

    def test_one_gpu_is_not_a_comparison(self, client, demo_book):
        html = self.get(client, workload="training", gpu=["h200"]).content.decode()
        assert "at least two GPUs" in html

    def test_unknown_workload(self, client, demo_book):
        html = self.get(client, workload="mining", gpu=["h200", "l40s"]).content.decode()
        assert "mining" in html and 'role="alert"' in html

    def test_empty_form_shows_no_errors(self, client, demo_book):
        html = self.get(client).content.decode()
        assert 'role="alert"' not in html


@pytest.mark.parametrize("language", LANGUAGES)
def test_unknown_gpu_is_a_translated_404(client, gpu_catalog, language):
    response = client.get(f"/{language}/gpus/no-such-gpu/")
    assert response.status_code == 404
    html = response.content.decode()
    assert f'<html lang="{language}">' in html
    expected = {"en": "Page not found"}.get(language)
    if expected:
        assert expected in html
    else:
        assert "Page not found" not in html


def test_unknown_workload_is_a_404(client, gpu_catalog):
    assert client.get("/pt/workloads/mining/").status_code == 404


def test_unknown_language_is_a_404_in_the_visitors_language(client, gpu_catalog):
    response = client.get("/de/gpus/", HTTP_ACCEPT_LANGUAGE="fr")
    assert response.status_code == 404
    assert '<html lang="fr">' in response.content.decode()


def _grow_book(gpu_catalog, offers: int) -> None:
    """`offers` servers, each with its one active ask, spread over every GPU model."""
    from exchange.models import Offer
    from sellers.models import Server

    seller = SellerFactory()
    gpus = list(gpu_catalog.values())
    servers = Server.objects.bulk_create(
        Server(seller=seller, gpu_model=gpus[i % len(gpus)], name=f"bulk-{i}", gpu_count=8,
               region="europe", status="active")
        for i in range(offers)
    )
    Offer.objects.bulk_create(
        Offer(server=server, gpus_offered=1 + i % 8, price_usd=Decimal("1.00") + i % 50)
        for i, server in enumerate(servers)
    )


PAGE_QUERY_LIMIT = 4


@pytest.mark.parametrize("offers", [10, 1000])
def test_pages_run_a_fixed_number_of_queries(client, gpu_catalog, django_assert_max_num_queries, offers):
    _grow_book(gpu_catalog, offers)
    pages = public_urls("fr") + [url("catalog:gpu-list", "en") + "?sort=price"]
    pages.append(url("catalog:compare", "pt") + "?workload=training&gpu=h200&gpu=h100-sxm")
    for address in pages:
        with django_assert_max_num_queries(PAGE_QUERY_LIMIT):
            assert client.get(address).status_code == 200


@pytest.mark.parametrize("slug", [workload.slug for workload in WORKLOADS])
def test_portuguese_workload_pages_write_model_sizes_in_the_tables_words(client, demo_book, slug):
    """The table says "≈ 15 mil M"; the prose around it says "15 mil milhões", never "15B"."""
    html = client.get(url("catalog:workload-detail", "pt", slug=slug)).content.decode()
    main = html[html.index("<main"):]
    assert not re.findall(r"\b\d+B\b", re.sub(r"<[^>]+>", " ", main))


@pytest.mark.parametrize(("language", "sentence", "not_english"), [
    ("pt", "Fonte: NVIDIA H100 Tensor Core GPU datasheet, coluna SXM. O documento indica", "sparsity"),
    ("fr", "Source\u00a0: NVIDIA H100 Tensor Core GPU datasheet, colonne SXM. Le document indique",
     "sparsity"),
])
def test_the_source_of_the_figures_is_written_in_the_page_language(language, sentence, not_english):
    """The document keeps its title; the sentence around it follows the page's language."""
    gpu = GpuModel(name="H100 SXM", source="NVIDIA H100 Tensor Core GPU datasheet", source_column="SXM",
                   bf16_sparse_tflops=Decimal("1979"))
    with translation.override(language):
        note = gpu.source_note
    assert note.startswith(sentence) and not_english not in note and "1,979" not in note
