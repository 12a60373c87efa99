"""Public pages cached whole, as live as the book: each is stored under the versions of the markets
it shows (`exchange.selectors.market_versions`), its address, host and language, so a change of the
book changes the key and the next request renders afresh. No time decides whether prices are
fresh; the time to live only bounds how long an edit of the catalog or a deploy may take to show.

Only what is the same for every visitor is stored: an anonymous GET without a query string and
without messages waiting, answered 200 with no cookie set and no CSRF token used. Anyone signed in
is served the page rendered for them, never the shared copy, and their page is never stored.
"""

import hashlib
from collections.abc import Callable
from datetime import datetime
from typing import Protocol, TypeVar

from django.conf import settings
from django.contrib.messages import get_messages
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.utils import timezone, translation

DEFAULT_SECONDS = 600


def _shareable_request(request: HttpRequest) -> bool:
    if request.method not in ("GET", "HEAD") or request.META.get("QUERY_STRING"):
        return False
    user = getattr(request, "user", None)
    if settings.SESSION_COOKIE_NAME in request.COOKIES and user is not None and user.is_authenticated:
        return False
    # A message waiting for this visitor (a sign-out, a refusal) is theirs alone.
    return not len(get_messages(request))


def _shareable_response(request: HttpRequest, response: HttpResponse) -> bool:
    return (
        response.status_code == 200
        and not response.streaming
        and not response.cookies
        # A page that used a CSRF token carries a secret tied to this visitor's cookie.
        and not request.META.get("CSRF_COOKIE_NEEDS_UPDATE")
    )


def page_key(request: HttpRequest, *, name: str, versions: str) -> str:
    parts = "\n".join((name, request.get_host(), translation.get_language() or "", request.path, versions))
    return "page:" + hashlib.blake2b(parts.encode(), digest_size=16).hexdigest()


class Versions(Protocol):
    key: str  # changes with any committed change of what the page shows


V = TypeVar("V", bound=Versions)


def page_cached(
    request: HttpRequest,
    *,
    name: str,
    versions: Callable[[], V],
    render: Callable[[V | None], HttpResponse],
    valid_until: Callable[[], datetime | None] = lambda: None,
) -> HttpResponse:
    """The page from the shared cache when it holds one for the current `versions()`, else
    `render(versions)`'s answer, stored when it is the same for everyone. A request that may not
    share (someone signed in) is rendered with `render(None)`, without reading the versions.
    `valid_until`, asked after a render, is when the page changes by the clock alone (a bid
    expiring), if ever: the copy is not served after it."""
    if not _shareable_request(request):
        return render(None)
    current = versions()
    key = page_key(request, name=name, versions=current.key)
    stored = cache.get(key)
    if stored is not None:
        content, content_type, until = stored
        if until is None or timezone.now() < until:
            return HttpResponse(content, content_type=content_type)
    response = render(current)
    if _shareable_response(request, response):
        seconds = getattr(settings, "PAGE_CACHE_SECONDS", DEFAULT_SECONDS)
        cache.set(key, (response.content, response["Content-Type"], valid_until()), seconds)
    return response
