"""Idempotency keys (docs/api.md): the same write sent again with its key is done once and answered
the same; the key on another request is refused; a request while the first still runs waits for
it; a first request that fails on our side leaves nothing behind, so a retry runs. Proven on a
test-only operation that writes one row per call."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from marketplace import idempotency
from marketplace.idempotency import idempotency_claim, idempotency_complete, idempotency_records_prune
from marketplace.models import IdempotencyRecord, OutboxEmail
from marketplace.tasks import idempotency_records_prune as prune_task
from tests.marketplace import api_test_urls
from tests.marketplace.support import assert_problem, post_json, token_for
from tests.threads import run_together

NOTES = "/api/v1/test/notes"
URLS = pytest.mark.urls("tests.marketplace.api_test_urls")


def post_note(client, secret, key, text="a note", path=NOTES, **headers):
    return post_json(client, path, {"text": text}, secret=secret, **{"Idempotency-Key": key, **headers})


@pytest.fixture
def secret(db):
    return token_for()[2]


@URLS
@pytest.mark.django_db
def test_the_same_request_again_gets_the_first_answer_and_does_nothing(client, secret):
    first = post_note(client, secret, "order-1")
    again = post_note(client, secret, "order-1", **{"Accept-Language": "fr"})
    assert first.status_code == again.status_code == 201
    assert again.content == first.content
    assert again["Content-Type"] == first["Content-Type"]
    assert again["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first
    assert OutboxEmail.objects.count() == 1


@URLS
@pytest.mark.django_db
def test_a_refusal_is_kept_and_replayed_too(client, secret):
    first = post_json(client, NOTES, {"colour": "red"}, secret=secret, **{"Idempotency-Key": "k"})
    again = post_json(client, NOTES, {"colour": "red"}, secret=secret, **{"Idempotency-Key": "k"})
    assert first.status_code == again.status_code == 422
    assert again.content == first.content and again["Idempotent-Replayed"] == "true"


@URLS
@pytest.mark.django_db
@pytest.mark.parametrize("change", ["body", "path"])
def test_the_same_key_on_another_request_is_refused(client, secret, change):
    post_note(client, secret, "order-1")
    if change == "body":
        response = post_note(client, secret, "order-1", text="another note")
    else:
        response = post_note(client, secret, "order-1", path=NOTES + "?again=1")
    body = assert_problem(response, 422, "idempotency_key_reused")
    assert "Idempotency-Key" in body["detail"]
    assert OutboxEmail.objects.count() == 1


@URLS
@pytest.mark.django_db
def test_keys_belong_to_one_token(client, secret):
    other = token_for()[2]
    post_note(client, secret, "shared-key")
    response = post_note(client, other, "shared-key")
    assert response.status_code == 201 and "Idempotent-Replayed" not in response
    assert OutboxEmail.objects.count() == 2


@URLS
@pytest.mark.django_db
@pytest.mark.parametrize("key", ["", "x" * 256, "clé", "tab\there"])
def test_a_key_that_is_not_1_to_255_printable_ascii_is_refused(client, secret, key):
    response = post_json(client, NOTES, {"text": "a"}, secret=secret, **{"Idempotency-Key": key})
    assert_problem(response, 400, "idempotency_key_invalid")
    assert OutboxEmail.objects.count() == 0


@URLS
@pytest.mark.django_db
def test_a_key_of_255_characters_is_accepted(client, secret):
    assert post_note(client, secret, "k" * 255).status_code == 201


@URLS
@pytest.mark.django_db
def test_without_a_usable_token_the_key_is_ignored(client):
    response = post_json(client, NOTES, {"text": "a"}, **{"Idempotency-Key": "anonymous"})
    assert_problem(response, 401, "token_invalid")
    assert IdempotencyRecord.objects.count() == 0


@URLS
@pytest.mark.django_db
def test_a_crash_leaves_no_record_and_a_retry_runs(secret):
    client = Client(raise_request_exception=False)
    crash = "/api/v1/test/crash"
    response = post_json(client, crash, {"text": "a"}, secret=secret, **{"Idempotency-Key": "c"})
    assert_problem(response, 500, "server_error")
    assert IdempotencyRecord.objects.count() == 0
    again = post_json(client, crash, {"text": "a"}, secret=secret, **{"Idempotency-Key": "c"})
    assert again.status_code == 500 and "Idempotent-Replayed" not in again


@URLS
@pytest.mark.django_db
def test_an_answer_is_replayed_for_24_hours_only(client, secret):
    post_note(client, secret, "day-old")
    IdempotencyRecord.objects.update(created_at=timezone.now() - timedelta(hours=24, seconds=1))
    response = post_note(client, secret, "day-old")
    assert response.status_code == 201 and "Idempotent-Replayed" not in response
    assert OutboxEmail.objects.count() == 2


@pytest.mark.django_db
def test_a_record_its_request_abandoned_is_taken_over():
    first = idempotency_claim(token_id=1, key="k", method="POST", path="/p", body=b"{}")
    long_ago = timezone.now() - timedelta(minutes=5)
    IdempotencyRecord.objects.filter(pk=first.record.pk).update(created_at=long_ago)
    claim = idempotency_claim(token_id=1, key="k", method="POST", path="/p", body=b"{}", wait_seconds=1)
    assert claim.outcome == "run" and claim.record.pk != first.record.pk


@pytest.mark.django_db
def test_a_second_request_gives_up_waiting_after_the_wait():
    idempotency_claim(token_id=1, key="k", method="POST", path="/p", body=b"{}")
    claim = idempotency_claim(token_id=1, key="k", method="POST", path="/p", body=b"{}", wait_seconds=0.1)
    assert claim.outcome == "busy"


@pytest.mark.django_db
def test_the_daily_prune_deletes_records_older_than_a_day():
    now = timezone.now()
    for number, age in enumerate((timedelta(hours=25), timedelta(hours=23))):
        claim = idempotency_claim(token_id=1, key=f"k{number}", method="POST", path="/p", body=b"")
        idempotency_complete(record=claim.record, status=201, content_type="application/json", body=b"{}")
        IdempotencyRecord.objects.filter(pk=claim.record.pk).update(created_at=now - age)
    assert idempotency_records_prune(now=now) == 1
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["k1"]
    assert prune_task() == 0


def test_the_prune_runs_daily_from_the_beat():
    from marketplace.celery import app

    tasks = {entry["task"] for entry in app.conf.beat_schedule.values()}
    assert "marketplace.idempotency_records_prune" in tasks


@URLS
@pytest.mark.django_db(transaction=True)
def test_ten_concurrent_requests_with_one_key_write_one_row_and_get_ten_identical_answers(monkeypatch):
    secret = token_for()[2]
    # The first request holds its key a while, so that the nine others arrive while it runs.
    monkeypatch.setitem(api_test_urls.SLOW, "seconds", 0.5)
    monkeypatch.setattr(idempotency, "IDEMPOTENCY_POLL_SECONDS", 0.02)

    def send(_index):
        response = post_note(Client(), secret, "ten-at-once", text="once")
        return response.status_code, response.content, response.get("Idempotent-Replayed")

    results, errors = run_together(10, send)
    assert errors == []
    assert OutboxEmail.objects.filter(subject="once").count() == 1
    assert {(status, content) for status, content, _replayed in results} == {(results[0][0], results[0][1])}
    assert results[0][0] == 201
    assert sorted(replayed or "" for _s, _c, replayed in results) == [""] + ["true"] * 9
    assert IdempotencyRecord.objects.get().completed


@URLS
@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_with_one_key_and_different_bodies_write_one_row(monkeypatch):
    secret = token_for()[2]
    monkeypatch.setitem(api_test_urls.SLOW, "seconds", 0.3)

    def send(index):
        return post_note(Client(), secret, "one-key", text=f"note {index}").status_code

    results, errors = run_together(5, send)
    assert errors == []
    assert sorted(results) == [201, 422, 422, 422, 422]
    assert OutboxEmail.objects.count() == 1


@URLS
@pytest.mark.django_db
def test_a_long_address_is_kept_whole(client, secret):
    path = NOTES + "?" + "q=" + "x" * 5000
    first = post_note(client, secret, "long", path=path)
    assert first.status_code == 201
    assert post_note(client, secret, "long", path=path)["Idempotent-Replayed"] == "true"
    assert_problem(post_note(client, secret, "long", path=path + "y"), 422, "idempotency_key_reused")
