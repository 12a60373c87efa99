"""The API's errors are problem details (RFC 9457) in the language of Accept-Language, whatever
went wrong and wherever: a router's refusal, a field pydantic refuses, an address that does not
exist, a method not allowed, a body too large or not UTF-8 JSON, a crash. Hostile input answers
4xx and writes nothing."""

import logging

import pytest
from django.test import Client

from marketplace.models import OutboxEmail
from tests.marketplace.support import JSON, PROBLEM, assert_problem, bearer, post_json, token_for

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.marketplace.api_test_urls")]

NOTES = "/api/v1/test/notes"
NBSP = "\u00a0"


@pytest.fixture
def secret():
    return token_for()[2]


def test_a_problem_has_its_media_type_and_every_member(client):
    response = client.get("/api/v1/me")
    body = assert_problem(response, 401, "token_invalid")
    assert set(body) == {"type", "title", "status", "code", "detail"}
    assert body["title"] == "Authentication required"
    assert response["WWW-Authenticate"] == "Bearer"
    assert response["Cache-Control"] == "private, no-store"


@pytest.mark.parametrize(("language", "title", "detail"), [
    ("pt-PT,pt;q=0.9,en;q=0.5", "Autenticação necessária", "Envie um token da API válido"),
    ("fr-CA", "Authentification requise", "Envoyez un jeton d'API valide"),
    ("de-DE,de;q=0.9", "Authentication required", "Send a valid API token"),
    ("", "Authentication required", "Send a valid API token"),
])
def test_title_and_detail_speak_the_language_of_accept_language(client, language, title, detail):
    response = client.get("/api/v1/me", headers={"Accept-Language": language})
    body = assert_problem(response, 401, "token_invalid")
    assert body["title"] == title
    assert body["detail"].startswith(detail)


def test_the_site_language_cookie_does_not_change_the_api_language(client):
    client.cookies["django_language"] = "fr"
    response = client.get("/api/v1/me", headers={"Accept-Language": "pt"})
    assert response.json()["title"] == "Autenticação necessária"
    assert response["Content-Language"] == "pt"


def test_an_unknown_address_is_a_problem_not_a_page(client):
    response = client.get("/api/v1/xyz", headers={"Accept-Language": "fr"})
    body = assert_problem(response, 404, "not_found")
    assert body["detail"] == "Il n'y a rien à cette adresse."
    assert_problem(client.get("/api/v1/markets/h100-sxm/book/nope"), 404, "not_found")


def test_a_method_not_allowed_is_a_problem_with_allow(client, secret):
    response = client.delete("/api/v1/me", headers=bearer(secret))
    assert_problem(response, 405, "method_not_allowed")
    assert response["Allow"] == "GET"


def test_a_crash_is_a_500_problem_without_details_and_logged(secret, caplog):
    client = Client(raise_request_exception=False)
    with caplog.at_level(logging.ERROR):
        response = post_json(client, "/api/v1/test/crash", {"text": "x"}, secret=secret)
    body = assert_problem(response, 500, "server_error")
    assert "a bug" not in response.content.decode() and "Traceback" not in response.content.decode()
    assert set(body) == {"type", "title", "status", "code", "detail"}
    assert any("a bug" in str(record.exc_info) for record in caplog.records if record.exc_info)


def test_control_characters_are_refused_as_a_problem(client):
    assert_problem(client.get("/api/v1/markets/h100-sxm?depth=%00"), 400, "control_characters")


# --- validation errors: our own sentences, per field --------------------------------------------

def _errors(response) -> dict:
    body = assert_problem(response, 422, "validation_failed")
    return {error["field"]: error for error in body["errors"]}


def test_each_invalid_field_is_named_with_a_code_and_a_translated_sentence(client, secret):
    response = post_json(client, NOTES, {
        "count": "many", "price": "1e5", "at": "yesterday", "ref": 2**70, "colour": "red",
    }, secret=secret, **{"Accept-Language": "fr"})
    errors = _errors(response)
    assert set(errors) == {"text", "count", "price", "at", "ref", "colour"}
    assert errors["text"]["code"] == "missing"
    assert errors["text"]["detail"] == "Ce champ est obligatoire."
    assert errors["colour"]["code"] == "extra_forbidden"
    assert errors["colour"]["detail"] == "Ce champ ne fait pas partie de cette requête."
    assert errors["count"]["detail"] == "Envoyez ici un nombre entier."
    assert errors["price"]["code"] == "string_pattern_mismatch"
    assert "2.49" in errors["price"]["detail"] and "nombre décimal" in errors["price"]["detail"]
    assert errors["at"]["detail"].startswith("Envoyez une heure au format RFC 3339")
    assert errors["ref"]["code"] == "less_than_equal"
    assert OutboxEmail.objects.count() == 0


def test_validation_errors_in_portuguese(client, secret):
    errors = _errors(post_json(client, NOTES, {"text": 5}, secret=secret, **{"Accept-Language": "pt"}))
    assert errors["text"] == {
        "field": "text", "code": "string_type", "detail": "Este valor tem o tipo errado.",
    }


def test_an_invalid_query_parameter_is_named(client, secret):
    errors = _errors(client.get("/api/v1/test/things/0x10", headers=bearer(secret)))
    assert list(errors) == ["thing_id"]


# --- hostile bodies --------------------------------------------------------------------------

HOSTILE = [
    ("not json", "{text: 1}", 400, "body_not_json"),
    ("NaN", '{"text": "a", "count": NaN}', 400, "body_not_json"),
    ("Infinity", '{"text": "a", "count": -Infinity}', 400, "body_not_json"),
    ("nested deep", "[" * 20000 + "]" * 20000, 400, "body_not_json"),
    ("a number of 5000 digits", '{"text": "a", "count": ' + "9" * 5000 + "}", 400, "body_not_json"),
    ("huge exponent", '{"text": "a", "count": 1e999999}', 422, "validation_failed"),
    ("negative", '{"text": "a", "price": "-1.00"}', 422, "validation_failed"),
    ("float price", '{"text": "a", "price": 2.49}', 422, "validation_failed"),
    ("a list", "[1, 2]", 422, "validation_failed"),
    ("null", "null", 422, "validation_failed"),
    ("a string", '"text"', 422, "validation_failed"),
    ("float for a number", '{"text": "a", "count": 1.5}', 422, "validation_failed"),
    ("a BOM", '\ufeff{"text": "a"}', 400, "body_not_json"),
]


@pytest.mark.parametrize(("body", "status", "code"), [case[1:] for case in HOSTILE],
                         ids=[case[0] for case in HOSTILE])
def test_hostile_json_answers_4xx_and_writes_nothing(client, secret, body, status, code):
    assert_problem(post_json(client, NOTES, body, secret=secret), status, code)
    assert OutboxEmail.objects.count() == 0


def test_a_body_that_is_not_utf8_is_refused(client, secret):
    response = client.post(NOTES, b'{"text": "\xff\xfe caf\xe9"}', content_type=JSON, headers=bearer(secret))
    assert_problem(response, 400, "body_not_utf8")
    assert OutboxEmail.objects.count() == 0


@pytest.mark.parametrize("content_type", [
    "text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin-1", "application/xml",
])
def test_a_body_of_another_media_type_is_refused(client, secret, content_type):
    response = client.post(NOTES, '{"text": "a"}', content_type=content_type, headers=bearer(secret))
    assert_problem(response, 415, "unsupported_media_type")
    assert OutboxEmail.objects.count() == 0


def test_json_with_its_charset_is_accepted(client, secret):
    response = client.post(NOTES, '{"text": "olá"}', content_type="application/json; charset=UTF-8",
                           headers=bearer(secret))
    assert response.status_code == 201


def test_a_body_over_64_kib_is_refused(client, secret):
    text = "x" * (64 * 1024)
    response = post_json(client, NOTES, {"text": text}, secret=secret, **{"Accept-Language": "fr"})
    body = assert_problem(response, 413, "body_too_large")
    assert body["title"] == "Requête trop volumineuse"
    assert OutboxEmail.objects.count() == 0


def test_a_body_announced_over_64_kib_is_refused_before_it_is_read(client, secret):
    response = client.generic("POST", NOTES, b"{}", content_type=JSON, headers=bearer(secret),
                              CONTENT_LENGTH=str(10 * 1024 * 1024))
    assert_problem(response, 413, "body_too_large")


def test_a_body_just_under_the_limit_is_read(client, secret):
    text = "x" * (64 * 1024 - 20)
    response = post_json(client, NOTES, {"text": text}, secret=secret)
    assert response.status_code == 201
    assert len(OutboxEmail.objects.get().body) == len(text)


def test_a_huge_id_in_the_path_answers_without_a_database_error(client, secret):
    response = client.get(f"/api/v1/test/things/{10**30}", headers=bearer(secret))
    assert response.status_code in (200, 404, 422)


# --- CORS: public reads only -------------------------------------------------------------------

def test_a_public_read_allows_every_origin(client):
    response = client.get("/api/v1/test/public", headers={"Origin": "https://elsewhere.example"})
    assert response.status_code == 200
    assert response["Access-Control-Allow-Origin"] == "*"
    assert response["Cache-Control"] == "public, max-age=5"


def test_an_authenticated_operation_sends_no_cors_header(client, secret):
    response = client.get("/api/v1/me", headers=bearer(secret, Origin="https://elsewhere.example"))
    assert response.status_code == 200
    assert "Access-Control-Allow-Origin" not in response
    assert response["Cache-Control"] == "private, no-store"


def test_a_preflight_on_an_authenticated_operation_gets_no_allowance(client):
    response = client.options("/api/v1/me", headers={
        "Origin": "https://elsewhere.example", "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "authorization",
    })
    assert response.status_code == 405
    assert not [name for name in response.headers if name.lower().startswith("access-control-")]
    assert response["Content-Type"].split(";")[0] == PROBLEM
