"""The fit calculator (issue 18): the page, its htmx fragment, its API, and the trade page's link."""

from decimal import Decimal

import pytest

from catalog.fit import Method, largest_model_billions
from catalog.services import gpu_catalog_read
from catalog.workloads import WORKLOADS, Column
from exchange.selectors import best_asks_by_size_all, fit_configurations
from marketplace import formatting
from tests.factories import GpuModelFactory, OfferFactory, ServerFactory

from .test_fit import REFERENCE

pytestmark = pytest.mark.django_db

D = Decimal


def _offer(gpu, price, *, count=8, offered=8, rented=0):
    server = ServerFactory(gpu_model=gpu, gpu_count=count, gpus_rented=rented)
    return OfferFactory(server=server, gpus_offered=offered, price_usd=D(price))


def test_best_asks_of_every_model_and_size_in_one_query(django_assert_num_queries):
    small, big, empty = (GpuModelFactory(memory_gb=24), GpuModelFactory(memory_gb=80), GpuModelFactory())
    _offer(small, "0.40", offered=1)
    _offer(small, "0.50", offered=4)
    _offer(big, "2.00", count=8, rented=2)  # 6 free
    with django_assert_num_queries(1):
        prices = best_asks_by_size_all()
    assert prices == {
        small.pk: {1: D("0.40"), 2: D("0.50"), 4: D("0.50")},
        big.pk: {1: D("2.00"), 2: D("2.00"), 4: D("2.00")},
    }
    assert empty.pk not in prices


def test_cheapest_fitting_first_then_unpriced_then_not_fitting():
    small, big = GpuModelFactory(name="Small", memory_gb=24), GpuModelFactory(name="Big", memory_gb=80)
    _offer(small, "0.40")
    _offer(big, "2.00", offered=1)
    # QLoRA 30B: 24 GB fits from 2 GPUs (35B), 80 GB from 1 (60B).
    rows = fit_configurations(params_billions=D("30"), method=Method.QLORA, hours=10)
    order = [(row.gpu.name, row.gpus, row.fits, row.total_usd) for row in rows]
    assert order == [
        ("Small", 2, True, D("8.00")), ("Small", 4, True, D("16.00")), ("Big", 1, True, D("20.00")),
        ("Small", 8, True, D("32.00")), ("Big", 2, True, None), ("Big", 4, True, None),
        ("Big", 8, True, None), ("Small", 1, False, D("4.00")),
    ]


@pytest.mark.parametrize("language", ["en", "pt", "fr"])
def test_the_calculator_and_the_workload_tables_agree_on_the_reference_figures(client, gpu_catalog, language):
    """For the 18 reference figures (every GPU, QLoRA and LoRA 16-bit): the workload page's table
    shows the figure, the calculator's page says it fits on one GPU, and a billion more does not."""
    workload = next(w for w in WORKLOADS if Method.QLORA in w.methods)
    page = client.get(f"/{language}/workloads/{workload.slug}/")
    assert page.status_code == 200
    cells = {row.gpu.slug: row for row in page.context["rows"]}
    for index, method in enumerate((Method.QLORA, Method.LORA16)):
        for figure in sorted({figures[index] for figures in REFERENCE.values()}):
            query = {"params_b": figure, "method": method.value}
            rows = client.get(f"/{language}/fit/", query).context["rows"]
            shown = {row["gpu"].slug: row["fits"] for row in rows if row["gpus"] == 1}
            beyond = {
                row.gpu.slug: row.fits
                for row in fit_configurations(params_billions=D(figure + 1), method=method) if row.gpus == 1
            }
            for slug, figures in REFERENCE.items():
                if figures[index] == figure:
                    assert shown[slug] and not beyond[slug], (slug, method)
                    column = workload.columns.index(Column(method.value))
                    assert cells[slug].cells[column].text == formatting.parameters(figure, language=language)
    for entry in gpu_catalog_read():
        for method, figure in zip((Method.QLORA, Method.LORA16), REFERENCE[entry["slug"]], strict=True):
            assert largest_model_billions(entry["memory"]["gb"], method) == figure


def test_the_page_without_a_question(client, gpu_catalog):
    response = client.get("/fr/fit/")
    assert response.status_code == 200 and response.context["rows"] is None
    body = response.content.decode()
    assert "Calculateur" in body and 'href="/fr/fit/"' in body


def test_the_answer_in_portuguese_with_a_rent_link(client, gpu_catalog, django_assert_max_num_queries):
    _offer(gpu_catalog["rtx-4090"], "0.33")
    with django_assert_max_num_queries(12):
        response = client.get("/pt/fit/", {"params_b": "7", "method": "qlora", "hours": "10"})
    assert response.status_code == 200
    first = response.context["rows"][0]
    assert first["gpu"].slug == "rtx-4090" and first["gpus"] == 1 and first["fits"]
    assert first["price_text"] == "US$\xa00,33" and first["total_text"] == "US$\xa03,30"
    assert first["rent_url"] == "/pt/trade/rtx-4090/?gpus=1&hours=10"
    assert "US$\xa00,33" in response.content.decode()


def test_money_in_french(client, gpu_catalog):
    _offer(gpu_catalog["h100-sxm"], "2.50")
    response = client.get("/fr/fit/", {"params_b": "70", "method": "inference4"})
    first = response.context["rows"][0]
    assert first["gpu"].slug == "h100-sxm" and first["price_text"] == "2,50\xa0$US"


def test_a_decimal_size_in_the_page_language(client, gpu_catalog):
    response = client.get("/fr/fit/", {"params_b": "7,5", "method": "qlora"})
    assert response.status_code == 200 and response.context["form"].is_valid()


def test_the_query_count_does_not_grow(client, gpu_catalog, django_assert_max_num_queries):
    def count():
        with django_assert_max_num_queries(12) as captured:
            client.get("/en/fit/", {"params_b": "13", "method": "lora16", "hours": "5"})
        return len(captured)

    before = count()
    for _ in range(5):
        gpu = GpuModelFactory()
        for price in ("1.00", "1.10", "1.20"):
            _offer(gpu, price)
    assert count() == before


@pytest.mark.parametrize("query", [
    {"params_b": "1e400", "method": "qlora"},
    {"params_b": "99999999999999999999999", "method": "qlora"},
    {"params_b": "-7", "method": "qlora"},
    {"params_b": "0", "method": "qlora"},
    {"params_b": "seven", "method": "qlora"},
    {"params_b": "NaN", "method": "qlora"},
    {"params_b": "inf", "method": "qlora"},
    {"params_b": "7", "method": "bogus"},
    {"params_b": "7", "method": "qlora", "hours": "-1"},
    {"params_b": "7", "method": "qlora", "hours": "1.5"},
    {"params_b": "7", "method": "qlora", "hours": "NaN"},
    {"params_b": "7", "method": "qlora", "hours": "10000000000000000000000"},
    {"params_b": "", "method": "qlora"},
    {"method": "qlora"},
])
def test_hostile_values_give_translated_errors(client, gpu_catalog, query):
    response = client.get("/pt/fit/", query)
    assert response.status_code == 200
    assert response.context["rows"] is None and response.context["form"].errors
    body = response.content.decode()
    assert 'class="errors"' in body and "Corrija" in body


def test_htmx_gets_the_results_alone(client, gpu_catalog):
    response = client.get("/fr/fit/", {"params_b": "70", "method": "full"}, headers={"HX-Request": "true"})
    body = response.content.decode()
    assert response.status_code == 200 and body.lstrip().startswith('<section id="fit-results"')
    assert "<html" not in body
    errors = client.get("/fr/fit/", {"params_b": "NaN", "method": "full"}, headers={"HX-Request": "true"})
    assert errors.status_code == 200 and 'class="errors"' in errors.content.decode()


def test_linked_from_workload_and_gpu_pages_and_in_the_sitemap(client, gpu_catalog):
    workload = next(w for w in WORKLOADS if w.methods)
    assert f'href="/en/fit/?method={workload.methods[0]}"' in client.get(
        f"/en/workloads/{workload.slug}/"
    ).content.decode()
    assert 'href="/en/fit/"' in client.get("/en/gpus/h100-sxm/").content.decode()
    sitemap = client.get("/sitemap.xml").content.decode()
    assert "/en/fit/" in sitemap and "/fr/fit/" in sitemap


def test_the_trade_page_takes_gpus_and_hours_from_a_link(client, gpu_catalog):
    response = client.get("/en/trade/h100-sxm/", {"gpus": "4", "hours": "12", "max_price_usd": "0.01"})
    form = response.context["buy_form"]
    assert form.initial["gpus"] == 4 and form.initial["hours"] == 12
    assert "price" not in "".join(key for key in form.initial if key.startswith("max_price"))


@pytest.mark.parametrize("query", [
    {"gpus": "3"}, {"gpus": "-1"}, {"gpus": "x"}, {"gpus": "99999999999999999999"},
    {"hours": "0"}, {"hours": "-5"}, {"hours": "NaN"}, {"hours": "99999999999999999"}, {"hours": "1.5"},
])
def test_the_trade_page_ignores_bad_gpus_and_hours(client, gpu_catalog, query):
    response = client.get("/en/trade/h100-sxm/", query)
    assert response.status_code == 200
    form = response.context["buy_form"]
    assert "gpus" not in form.initial and "hours" not in form.initial


def test_the_api(client, gpu_catalog):
    _offer(gpu_catalog["rtx-4090"], "0.33")
    response = client.get("/api/v1/fit", {"params_b": "7", "method": "qlora", "hours": "10"})
    assert response.status_code == 200
    data = response.json()
    assert data["params_b"] == "7" and data["method"] == "qlora" and data["hours"] == 10
    first = data["configurations"][0]
    assert first == {
        "gpu_model": "rtx-4090", "gpus": 1, "memory_gb": 24, "fits": True,
        "price": {"amount": "0.33", "currency": "USD"}, "per_hour": {"amount": "0.33", "currency": "USD"},
        "total": {"amount": "3.30", "currency": "USD"},
    }
    assert len(data["configurations"]) == 4 * len(gpu_catalog)


def test_the_api_and_the_page_agree(client, gpu_catalog):
    api = client.get("/api/v1/fit", {"params_b": "70", "method": "inference16"}).json()["configurations"]
    page = client.get("/en/fit/", {"params_b": "70", "method": "inference16"}).context["rows"]
    assert [(c["gpu_model"], c["gpus"], c["fits"]) for c in api] == [
        (r["gpu"].slug, r["gpus"], r["fits"]) for r in page
    ]


@pytest.mark.parametrize("query", [
    {"params_b": "NaN", "method": "qlora"}, {"params_b": "inf", "method": "qlora"},
    {"params_b": "-1", "method": "qlora"}, {"params_b": "1e400", "method": "qlora"},
    {"params_b": "7.55", "method": "qlora"}, {"params_b": "seven", "method": "qlora"},
    {"params_b": "7", "method": "bogus"}, {"params_b": "7", "method": "qlora", "hours": "0"},
    {"params_b": "7", "method": "qlora", "hours": "99999999999999999999999"}, {"method": "qlora"},
])
def test_the_api_refuses_bad_values_as_problem_details(client, gpu_catalog, query):
    response = client.get("/api/v1/fit", query)
    assert response.status_code == 422
    assert response["Content-Type"].startswith("application/problem+json")
    assert response.json()["errors"]
