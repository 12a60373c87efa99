"""A URLconf for the tests of the API's shared machinery: the site's own addresses plus, under
/api/v1/test/, a few operations of a test-only NinjaAPI built like the site's (same problem
details), behind the same middleware. One of them writes a row, so that "sent ten times, done
once" can be counted."""

import time
from datetime import datetime

from django.http import JsonResponse
from django.urls import path
from ninja import Router, Schema
from ninja.responses import Status

from marketplace.api import api_build
from marketplace.api_support import READ, SELL, TRADE, DecimalText, Id, InputSchema, public_read, token_of
from marketplace.models import OutboxEmail
from marketplace.urls import urlpatterns as site_urlpatterns

router = Router()


class NoteIn(InputSchema):
    text: str
    count: int = 1
    price: DecimalText | None = None
    at: datetime | None = None
    ref: Id | None = None


class NoteOut(Schema):
    id: int
    text: str


# Seconds the note operation waits before it answers: long enough that concurrent requests with
# the same key meet while the first runs (a test sets it).
SLOW = {"seconds": 0.0}


@router.post("/notes", response={201: NoteOut}, auth=TRADE)
def note_create(request, payload: NoteIn):
    """Writes one outbox row per call (the simplest row with a unique key)."""
    time.sleep(SLOW["seconds"])
    token = token_of(request)
    email = OutboxEmail.objects.create(
        key=f"note:{time.monotonic_ns()}", recipient=token.user.email, language="en",
        subject=payload.text, body=payload.text,
    )
    return Status(201, {"id": email.pk, "text": payload.text})


@router.post("/crash", auth=TRADE)
def crash(request, payload: NoteIn):
    OutboxEmail.objects.create(key=f"crash:{time.monotonic_ns()}", recipient="x@example.com",
                               language="en", subject="x", body="x")
    raise RuntimeError("a bug")


@router.get("/things/{thing_id}", auth=READ)
def thing_get(request, thing_id: int):
    # No selector: the raw id goes to the database, as a careless router would send it.
    return {"count": OutboxEmail.objects.filter(pk=thing_id).count()}


@router.get("/seller", auth=SELL)
def seller_get(request):
    return {"seller": token_of(request).seller.slug}


@router.get("/public", auth=None)
def public(request):
    response = JsonResponse({"ok": True})
    public_read(response)
    return response


test_api = api_build(title="Tests", version="test", urls_namespace="api-tests")
test_api.add_router("/test/", router)

urlpatterns = [path("api/v1/", test_api.urls), *site_urlpatterns]
