"""The catalog's operations of the API (issue 15): GPU models with their figures and what fits,
as the GPU pages state them, public and readable from any site."""

import pytest

from catalog.fit import Method, largest_model_billions
from tests.factories import GpuModelFactory

pytestmark = pytest.mark.django_db


def test_one_gpu_with_its_figures_and_fits(client, gpu_catalog):
    response = client.get("/api/v1/gpus/h100-sxm")
    assert response.status_code == 200 and response["Access-Control-Allow-Origin"] == "*"
    gpu = gpu_catalog["h100-sxm"]
    data = response.json()
    assert data["slug"] == "h100-sxm" and data["name"] == gpu.name and data["vendor"] == "NVIDIA"
    assert (data["memory_gb"], data["bandwidth"]) == (gpu.memory_gb, gpu.bandwidth_gb_s)
    assert data["figures"]["architecture"] == "Hopper"
    assert data["figures"]["bf16_dense_tflops"] == format(gpu.bf16_dense_tflops, "f")
    assert data["fits"] == {str(method): largest_model_billions(gpu.memory_gb, method) for method in Method}


def test_the_gpu_page_states_the_same_fits(client, gpu_catalog):
    page = client.get("/en/gpus/h100-sxm/")
    fits = client.get("/api/v1/gpus/h100-sxm").json()["fits"]
    assert [billions for _label, billions in page.context["fits"]] == [fits[str(m)] for m in Method]


def test_every_gpu_page_by_page(client, gpu_catalog):
    first = client.get("/api/v1/gpus?limit=4").json()
    slugs = [item["slug"] for item in first["items"]]
    cursor = first["next_cursor"]
    while cursor:
        page = client.get(f"/api/v1/gpus?limit=4&cursor={cursor}").json()
        slugs += [item["slug"] for item in page["items"]]
        cursor = page["next_cursor"]
    assert sorted(slugs) == sorted(gpu_catalog) and len(slugs) == len(set(slugs))


def test_an_unknown_gpu_is_a_404_problem(client, gpu_catalog):
    response = client.get("/api/v1/gpus/nope")
    assert response.status_code == 404 and response.json()["code"] == "gpu_model_not_found"


@pytest.mark.parametrize("query", ["limit=0", "limit=101", "limit=x", "cursor=%00", "cursor=LTE"])
def test_bad_list_parameters_are_4xx(client, gpu_catalog, query):
    assert 400 <= client.get(f"/api/v1/gpus?{query}").status_code < 500


def test_the_list_runs_one_query_for_few_or_many(client, django_assert_num_queries):
    GpuModelFactory()
    with django_assert_num_queries(1):
        client.get("/api/v1/gpus")
    for _ in range(30):
        GpuModelFactory()
    with django_assert_num_queries(1):
        assert len(client.get("/api/v1/gpus").json()["items"]) == 31


def test_an_architecture_we_have_not_named_has_no_vendor(client):
    GpuModelFactory(slug="mystery", architecture="Quantum")
    assert client.get("/api/v1/gpus/mystery").json()["vendor"] == ""
