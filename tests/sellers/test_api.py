"""The seller and its servers in the API: the same reads as the portal, and a server registered
through the same service with the same rules and messages (pending until an operator activates
it). Hostile bodies answer 4xx problem details and register nothing."""

from decimal import Decimal

import pytest
from django.utils import timezone, translation
from django.utils.translation import gettext

from exchange.services import seller_suspend, server_activate
from sellers.models import Server, ServerStatus
from tests.factories import GpuModelFactory, SellerFactory, ServerFactory, operator_make
from tests.sellers.support import Api, member, sell_token, url

pytestmark = pytest.mark.django_db


@pytest.fixture
def seller():
    return SellerFactory(name="Alpha GPU Lda", slug="alpha-gpu")


@pytest.fixture
def owner(seller):
    return member(seller)


@pytest.fixture
def api(client, seller, owner):
    return Api(client, sell_token(seller, user=owner))


@pytest.fixture
def gpu():
    return GpuModelFactory(slug="h100-sxm", name="H100 SXM")


def server_body(**overrides):
    body = {"gpu_model": "h100-sxm", "name": "lis-h100-01", "gpu_count": 8, "region": "europe",
            "host": "lis-h100-01.example.pt"}
    body.update(overrides)
    return body


def registry():
    return list(Server.objects.order_by("pk").values_list("pk", "name", "gpu_count", "host", "status"))


def test_the_seller_of_the_token(api, seller):
    assert api.get("/seller").json() == {
        "slug": "alpha-gpu", "name": "Alpha GPU Lda", "suspended": False, "reliability": None,
    }
    seller_suspend(seller_id=seller.pk, operator=operator_make(), reason="Unpaid fees")
    assert api.get("/seller").json()["suspended"] is True


def test_servers_newest_first_page_by_page(api, seller, gpu):
    servers = [ServerFactory(seller=seller, gpu_model=gpu, name=f"lis-{n}") for n in range(3)]
    first = api.get("/seller/servers", limit=2).json()
    assert [item["name"] for item in first["items"]] == ["lis-2", "lis-1"]
    second = api.get("/seller/servers", limit=2, cursor=first["next_cursor"]).json()
    assert ([item["name"] for item in second["items"]], second["next_cursor"]) == (["lis-0"], None)
    assert api.get(f"/seller/servers/{servers[0].pk}").json() == {
        "id": servers[0].pk, "name": "lis-0", "gpu_model": "h100-sxm", "gpu_count": 8, "gpus_rented": 0,
        "region": "europe", "status": "active", "host": "lis-0.example.test", "ssh_port": 22, "city": "",
        "cpu_cores": None, "ram_gb": None, "disk_gb": None, "network_gbps": None,
        "reliability": None, "reliability_uptime": None, "reliability_delivery": None,
    }


def test_the_seller_and_its_servers_carry_their_reliability(api, seller, gpu):
    Seller = type(seller)
    Seller.objects.filter(pk=seller.pk).update(reliability=Decimal("0.97"))
    server = ServerFactory(
        seller=seller, gpu_model=gpu, reliability=Decimal("0.995"), reliability_uptime=Decimal("0.999"),
        reliability_delivery=Decimal("0.9"),
    )
    assert api.get("/seller").json()["reliability"] == "0.970"
    data = api.get(f"/seller/servers/{server.pk}").json()
    assert (data["reliability"], data["reliability_uptime"], data["reliability_delivery"]) == (
        "0.995", "0.999", "0.900"
    )


@pytest.mark.parametrize("query", [{"limit": 0}, {"limit": 101}, {"limit": "x"}, {"cursor": "%%%"},
                                   {"cursor": "MA"}])
def test_a_bad_page_is_refused(api, query):
    response = api.get("/seller/servers", **query)
    assert response.status_code in (400, 422)
    assert response["Content-Type"].startswith("application/problem+json")


def test_unknown_server_answers_404(api):
    response = api.get("/seller/servers/999999")
    assert (response.status_code, response.json()["code"]) == (404, "server_not_found")


def test_register_a_server_starts_pending_and_shows_in_the_portal(client, api, seller, owner, gpu):
    response = api.post("/seller/servers", server_body(city="Lisbon", cpu_cores=64, ram_gb=512))
    assert response.status_code == 201
    body = response.json()
    assert (body["status"], body["gpu_model"], body["city"], body["cpu_cores"]) == ("pending", "h100-sxm",
                                                                                    "Lisbon", 64)
    server = Server.objects.get(pk=body["id"])
    assert (server.seller, server.status, server.ram_gb) == (seller, ServerStatus.PENDING, 512)
    client.force_login(owner)
    page = client.get(url("sellers:portal-servers")).content.decode()
    assert "lis-h100-01" in page and "Pending verification" in page
    server_activate(server_id=server.pk, operator=operator_make())
    assert api.get(f"/seller/servers/{server.pk}").json()["status"] == "active"


def test_the_portals_rules_and_messages(api, seller, gpu):
    """The service's errors, field by field, in the language asked for."""
    ServerFactory(seller=seller, gpu_model=gpu, name="lis-h100-01")
    before = registry()
    response = api.post("/seller/servers", server_body())
    assert (response.status_code, response.json()["code"]) == (422, "server_invalid")
    assert response.json()["errors"] == [{"field": "name", "code": "server_invalid",
                                          "detail": "You already have a server with this name."}]
    response = api.post("/seller/servers", server_body(name="other", host="-oProxyCommand=x", ssh_port=70000))
    assert response.status_code == 422
    response = api.post("/seller/servers", server_body(name="other", host="-oProxyCommand=x"))
    with translation.override("fr"):
        expected = gettext(
            "Enter a host name such as gpu1.example.com or an IP address such as 203.0.113.10, "
            "without a user, a port or spaces."
        )
    fields = {error["field"]: error["detail"] for error in response.json()["errors"]}
    assert list(fields) == ["host"]
    response = api.client.post(
        "/api/v1/seller/servers", data=server_body(name="other", host="-oProxyCommand=x"),
        content_type="application/json", headers={**api.headers, "Accept-Language": "fr"},
    )
    assert response.json()["errors"][0]["detail"] == expected
    response = api.post("/seller/servers", server_body(gpu_model="b300"))
    assert response.json()["errors"] == [{"field": "gpu_model", "code": "gpu_model_unknown",
                                          "detail": "We do not list this GPU."}]
    assert registry() == before


HOSTILE_SERVERS = [
    {"gpu_count": 0}, {"gpu_count": 17}, {"gpu_count": 10000}, {"gpu_count": "8"}, {"gpu_count": True},
    {"gpu_count": 8.0}, {"gpu_count": None}, {"gpu_count": -1}, {"gpu_count": 2**70},
    {"ssh_port": 0}, {"ssh_port": 65536}, {"ssh_port": "22"}, {"cpu_cores": 0}, {"ram_gb": 2**40},
    {"disk_gb": -5}, {"network_gbps": "fast"}, {"region": "mars"}, {"region": 1}, {"name": ""},
    {"name": "x" * 101}, {"name": "x" * 5000}, {"name": "a\x00b"}, {"name": ["a"]}, {"host": "a b"},
    {"host": "root@h.example.com"}, {"host": "h.example.com:22"}, {"host": "1.2.3"}, {"host": ""},
    {"city": "Lis\nbon"}, {"city": "x" * 101}, {"gpu_model": ""}, {"gpu_model": {"slug": "h100-sxm"}},
    {"status": "active"}, {"seller": 1}, {"gpus_rented": 0},
]


@pytest.mark.parametrize("overrides", HOSTILE_SERVERS)
def test_hostile_servers_are_refused_and_register_nothing(api, gpu, overrides):
    before = registry()
    response = api.post("/seller/servers", server_body(**overrides))
    assert 400 <= response.status_code < 500, response.content
    assert response["Content-Type"].startswith("application/problem+json")
    assert registry() == before


@pytest.mark.parametrize("raw", [
    "", "null", "[]", '"server"', "{", '{"gpu_count": NaN}', '{"gpu_count": 1e999}',
    '{"name": "\\ud800"}', b"\xff\xfe{}".decode("latin-1"),
])
def test_bodies_that_are_no_server_are_refused(api, gpu, raw):
    before = registry()
    response = api.post("/seller/servers", raw=raw)
    assert 400 <= response.status_code < 500
    assert registry() == before


def test_a_suspended_seller_still_sees_its_servers(api, seller, gpu):
    """Suspension stops offers, not reading: the portal shows the servers too."""
    ServerFactory(seller=seller, gpu_model=gpu)
    seller.suspended_at = timezone.now()
    seller.save()
    assert len(api.get("/seller/servers").json()["items"]) == 1


def test_the_servers_list_runs_a_fixed_number_of_queries(api, seller, gpu, django_assert_max_num_queries):
    ServerFactory(seller=seller, gpu_model=gpu)
    with django_assert_max_num_queries(8) as small:
        assert api.get("/seller/servers").status_code == 200
    for n in range(20):
        ServerFactory(seller=seller, gpu_model=GpuModelFactory(), name=f"many-{n}")
    with django_assert_max_num_queries(len(small.captured_queries)):
        assert len(api.get("/seller/servers").json()["items"]) == 21


SELLER_OPERATIONS = {
    ("get", "/api/v1/seller"), ("get", "/api/v1/seller/servers"), ("post", "/api/v1/seller/servers"),
    ("get", "/api/v1/seller/servers/{server_id}"), ("get", "/api/v1/seller/offers"),
    ("post", "/api/v1/seller/offers"), ("get", "/api/v1/seller/offers/{offer_id}"),
    ("patch", "/api/v1/seller/offers/{offer_id}"), ("post", "/api/v1/seller/offers/{offer_id}/withdraw"),
    ("get", "/api/v1/seller/rentals"), ("get", "/api/v1/seller/earnings"), ("get", "/api/v1/seller/payouts"),
}


def test_the_openapi_document_describes_every_seller_operation(client):
    document = client.get("/api/v1/openapi.json").json()
    found = {
        (method, path): operation for path, methods in document["paths"].items()
        for method, operation in methods.items() if operation.get("tags") == ["seller"]
    }
    assert set(found) == SELLER_OPERATIONS
    for operation in found.values():
        assert operation["operationId"] and operation["summary"] and operation["description"]
        assert operation["security"] == [{"token": ["sell"]}]
        assert {"401", "403"} <= set(operation["responses"])
        assert any(code.startswith("2") for code in operation["responses"])
    assert found[("post", "/api/v1/seller/offers")]["requestBody"]["required"] is True
    offer_in = document["components"]["schemas"]["OfferIn"]
    assert offer_in["additionalProperties"] is False
    assert offer_in["properties"]["price"]["examples"] == ["2.49"]
