"""The OpenAPI document: served at /api/v1/openapi.json, committed as docs/openapi.json, valid
OpenAPI 3.1, and complete for every operation (docs/api.md)."""

import json
from pathlib import Path

import pytest
import schemathesis

from marketplace.api import api
from marketplace.api_support import openapi_document_complete

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
METHODS = {"get", "post", "put", "patch", "delete"}
REEXPORT = "docs/openapi.json differs from the served document: run `python manage.py api_schema_export`."


@pytest.fixture(scope="module")
def document() -> dict:
    return api.get_openapi_schema(path_params={})


def operations(document: dict):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield path, method, operation


@pytest.mark.django_db
def test_the_committed_document_is_the_served_one(client):
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    assert response.json() == json.loads(COMMITTED.read_text(encoding="utf-8")), REEXPORT


def test_the_committed_file_is_written_as_the_command_writes_it():
    from marketplace.management.commands.api_schema_export import openapi_text

    assert COMMITTED.read_text(encoding="utf-8") == openapi_text(), REEXPORT


def test_the_document_is_valid_openapi_3_1(document):
    assert document["openapi"].startswith("3.1.")
    schemathesis.openapi.from_dict(json.loads(json.dumps(document))).validate()


def test_every_operation_is_described(document):
    found = list(operations(document))
    assert found
    incomplete = {
        f"{method.upper()} {path}": missing
        for path, method, operation in found
        if (missing := [key for key in ("operationId", "summary", "tags") if not operation.get(key)])
    }
    assert incomplete == {}
    ids = [operation["operationId"] for _path, _method, operation in found]
    assert len(ids) == len(set(ids))


def test_every_operation_documents_its_errors_as_problem_details(document):
    for path, method, operation in operations(document):
        errors = {status: answer for status, answer in operation["responses"].items()
                  if status.startswith("4")}
        assert errors, f"{method.upper()} {path} documents no 4xx answer"
        assert "429" in errors, f"{method.upper()} {path}"
        for status, answer in errors.items():
            media = answer.get("content", {}).get("application/problem+json")
            assert media is not None, f"{method.upper()} {path} {status}"
            assert "example" in media or "examples" in media, f"{method.upper()} {path} {status}"


def test_operations_with_a_token_say_so_and_answer_401(document):
    schemes = document["components"]["securitySchemes"]
    assert schemes["token"] == {**schemes["token"], "type": "http", "scheme": "bearer"}
    for path, method, operation in operations(document):
        if operation.get("security"):
            assert all(set(requirement) <= set(schemes) for requirement in operation["security"])
            assert "401" in operation["responses"], f"{method.upper()} {path}"


def test_the_market_data_is_public(document):
    operation = document["paths"]["/api/v1/markets/{slug}"]["get"]
    assert "security" not in operation
    assert {"404", "429"} <= set(operation["responses"])
    assert "401" not in operation["responses"]


def test_success_answers_carry_an_example(document):
    for path, method, operation in operations(document):
        for status, answer in operation["responses"].items():
            for media in answer.get("content", {}).values():
                assert "example" in media or "examples" in media, f"{method.upper()} {path} {status}"


def test_the_completion_adds_scopes_and_keeps_what_a_router_declared():
    """A made-up operation with a `trade` token and its own 409: it gains 401, 403, 404, 422 and 429
    with examples, keeps its 409, and names the scope on the `token` scheme."""
    body = {"content": {"application/json": {"schema": {"type": "object", "properties": {
        "gpus": {"type": "integer"}, "max_price": {"type": "string", "pattern": "^[0-9.]+$"}}}}}}
    schema = {
        "paths": {"/api/v1/bids/{id}/cancel": {"post": {
            "operationId": "bid_cancel", "parameters": [{"in": "path", "name": "id", "required": True}],
            "requestBody": body, "security": [{"TokenAuth": []}],
            "responses": {200: {"description": "OK", "content": {"application/problem+json": {
                "schema": {"type": "object"}}}},
                409: {"description": "Not open", "content": {"application/json": {"schema": {}}}}},
        }}},
        "components": {"schemas": {}, "securitySchemes": {"TokenAuth": {"type": "http", "scheme": "bearer"}}},
    }
    operation = openapi_document_complete(schema, scopes={"bid_cancel": "trade"})["paths"][
        "/api/v1/bids/{id}/cancel"]["post"]
    assert set(operation["responses"]) == {"200", "400", "401", "403", "404", "409", "413", "422", "429"}
    assert operation["responses"]["409"]["description"] == "Not open"
    assert list(operation["responses"]["409"]["content"]) == ["application/problem+json"]
    assert list(operation["responses"]["200"]["content"]) == ["application/json"]
    assert operation["security"] == [{"token": ["trade"]}]
    assert "TokenAuth" not in schema["components"]["securitySchemes"]
    example = operation["requestBody"]["content"]["application/json"]["example"]
    assert example == {"gpus": 1, "max_price": "2.90"}
    assert operation["responses"]["401"]["headers"]["WWW-Authenticate"]


@pytest.mark.django_db
def test_each_answer_names_its_own_media_type(client, gpu_catalog):
    """The renderer is shared by every request: an error answer must not leave its media type to
    the next success."""
    problem, data = "application/problem+json; charset=utf-8", "application/json; charset=utf-8"
    assert client.get("/api/v1/markets/no-such-gpu")["Content-Type"] == problem
    assert client.get("/api/v1/markets/h100-sxm")["Content-Type"] == data
    assert client.get("/api/v1/markets/no-such-gpu")["Content-Type"] == problem


def test_no_two_schemas_of_the_routers_share_a_name():
    """The document names each schema by its class: two classes of one name would make one
    operation describe the other's answer (a buyer's and a seller's RentalOut did)."""
    import importlib
    import inspect
    from pathlib import Path

    from ninja import Schema

    root = Path(__file__).resolve().parents[2]
    seen: dict[str, str] = {}
    clashes = []
    for path in sorted(root.glob("*/api*.py")):
        module = importlib.import_module(f"{path.parent.name}.{path.stem}")
        for name, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, Schema) and value.__module__ == module.__name__:
                if name in seen:
                    clashes.append(f"{name}: {seen[name]} and {module.__name__}")
                seen[name] = module.__name__
    assert clashes == []
