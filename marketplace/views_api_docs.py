"""The API's pages on the site: the interactive reference at /<lang>/api/ and the quickstart at
/<lang>/api/quickstart/. Entry points only: what they show comes from settings and the URLconf."""

from django.conf import settings
from django.shortcuts import render
from django.urls import reverse
from django.utils import translation

# The defaults of the rate limits (docs/api.md), until a setting names others.
DEFAULT_RATE_LIMIT_PER_MINUTE = 120
DEFAULT_WRITE_RATE_LIMIT_PER_MINUTE = 30


def _site_url(request) -> str:
    return settings.SITE_URL or request.build_absolute_uri("/").rstrip("/")


def _context(request) -> dict:
    site = _site_url(request)
    language = translation.get_language()
    return {
        "site_url": site,
        "api_base": f"{site}/api/v1",
        "openapi_url": reverse("api:openapi-json"),
        "reference_url": reverse("apidocs:reference"),
        # The tokens page belongs to the account pages; linked by its address.
        "tokens_url": f"/{language}/account/api-tokens/",
        "rate_limit": getattr(settings, "API_RATE_LIMIT_PER_MINUTE", DEFAULT_RATE_LIMIT_PER_MINUTE),
        "write_rate_limit": getattr(
            settings, "API_WRITE_RATE_LIMIT_PER_MINUTE", DEFAULT_WRITE_RATE_LIMIT_PER_MINUTE
        ),
    }


# Swagger UI (django-ninja's bundle, from our static files) runs under the site's strict policy:
# it styles what it draws through the DOM, which style-src 'self' allows, and our init script is a
# file (static/js/api-reference.js). tests/browser/test_api_reference.py watches for refusals.
def api_reference(request):
    return render(request, "api_docs/reference.html", _context(request))


def api_quickstart(request):
    return render(request, "api_docs/quickstart.html", _context(request))
