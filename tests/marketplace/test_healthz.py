import pytest
from django.core.cache.backends.redis import RedisCache

from marketplace import views

pytestmark = pytest.mark.django_db


def test_healthy(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "checks": {"database": "ok", "cache": "ok", "broker": "ok"},
    }


def test_cache_down_answers_503(client, monkeypatch):
    # A Redis address where nothing listens, on this machine.
    monkeypatch.setattr(views, "cache", RedisCache("redis://127.0.0.1:1/0", {}))
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["checks"]["cache"] == "failing"
    assert response.json()["checks"]["database"] == "ok"


def test_broker_down_answers_503(client, settings, monkeypatch):
    monkeypatch.setattr(views.celery_app.conf, "broker_url", "redis://127.0.0.1:1/0")
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["checks"]["broker"] == "failing"


def test_database_down_answers_503(client, monkeypatch):
    def broken():
        raise OSError("database unreachable")

    monkeypatch.setitem(views.CHECKS, "database", broken)
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == "failing"
