"""Site-wide endpoints outside the language prefix: health, robots, the favicon, and the error pages
that Django renders itself (CSRF failure, server error)."""

import logging

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.http import FileResponse, HttpResponse, HttpResponseServerError, JsonResponse
from django.shortcuts import render
from django.template import loader
from django.urls import reverse
from django.utils import translation
from django.views.decorators.cache import cache_control, never_cache
from django.views.decorators.http import require_GET

from marketplace.celery import app as celery_app

logger = logging.getLogger(__name__)


def _database_ok() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        return cursor.fetchone() == (1,)


def _cache_ok() -> bool:
    cache.set("healthz", "ok", timeout=10)
    return cache.get("healthz") == "ok"


def _broker_ok() -> bool:
    with celery_app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=2)
    return True


CHECKS = {"database": _database_ok, "cache": _cache_ok, "broker": _broker_ok}


@never_cache
@require_GET
def healthz(request):
    results = {}
    for name, check in CHECKS.items():
        try:
            results[name] = "ok" if check() else "failing"
        except Exception:  # a health probe reports every failure instead of raising
            logger.exception("Health check %s failed", name)
            results[name] = "failing"
    healthy = all(state == "ok" for state in results.values())
    return JsonResponse(
        {"status": "ok" if healthy else "failing", "checks": results},
        status=200 if healthy else 503,
    )


@require_GET
def robots_txt(request):
    sitemap_url = request.build_absolute_uri(reverse("sitemap"))
    lines = [
        "User-agent: *",
        "Disallow: /en/admin/",
        "Disallow: /pt/admin/",
        "Disallow: /fr/admin/",
        "Allow: /",
        f"Sitemap: {sitemap_url}",
    ]
    return HttpResponse("\n".join(lines) + "\n", content_type="text/plain; charset=utf-8")


FAVICON = settings.BASE_DIR / "static" / "favicon.ico"


@require_GET
@cache_control(public=True, max_age=86400)
def favicon(request):
    """`/favicon.ico`, which browsers ask for on every site (the admin's pages link no icon)."""
    return FileResponse(FAVICON.open("rb"), content_type="image/vnd.microsoft.icon")


def csrf_failure(request, reason: str = ""):
    """`CSRF_FAILURE_VIEW`: a form sent without its token, or from elsewhere, gets a page of the
    site in its language (Django's own is English, with an inline style the CSP refuses)."""
    return render(request, "403_csrf.html", status=403)


def server_error(request):
    """`handler500`: the page of a crash, in the language of the address it happened on.

    It runs when something is already broken (possibly the database), so it renders a page
    that needs no request context, no context processor and no query: only the language,
    taken from the URL prefix (the middleware that sets it may not have run)."""
    language = translation.get_language_from_path(request.path_info) or settings.LANGUAGE_CODE
    try:
        with translation.override(language):
            body = loader.get_template("500.html").render({})
    except Exception:  # the last page of all must not fail in turn
        logger.exception("The 500 page failed to render")
        body = "<!DOCTYPE html><title>EverXCloud</title><h1>Server Error (500)</h1>"
    return HttpResponseServerError(body)
