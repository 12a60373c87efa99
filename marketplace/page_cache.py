"""Public pages cached whole, as live as the book: each is stored under the versions of the markets
it shows (`exchange.selectors.market_versions`), its address, host and language, so a change of the
book changes the key and the next request renders afresh. No time decides whether prices are
fresh; the time to live only bounds how long an edit of the catalog or a deploy may take to show.

Only what is the same for every visitor is stored: an anonymous GET without a query string and
without messages waiting, answered 200 with no cookie set and no CSRF token used. Anyone signed in
is served the page rendered for them, never the shared copy, and their page is never stored.

Two ways in. A view calls `page_cached`, which renders on a miss and marks the page as shareable;
`SharedPagesMiddleware`, placed right after the static files and the security policy, stores what
the rest of the stack answered (with its headers) and learns the address. The next visitor without
a session or a message cookie at that address is then answered by the middleware alone: one read of
the versions and one cache read, without sessions, users, messages or URL resolution.
"""

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeVar

from django.conf import settings
from django.contrib.messages import get_messages
from django.contrib.messages.storage.cookie import CookieStorage
from django.core.cache import cache
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse
from django.utils import timezone, translation

DEFAULT_SECONDS = 600
MAX_ROUTES = 10_000  # addresses learned per process: the catalog's pages in three languages are ~200
# Added again on every answer by the middleware outside this one (the security policy), or by the
# server: never stored with a page.
UNSTORED_HEADERS = frozenset({"content-security-policy", "content-security-policy-report-only", "date"})


class Versions(Protocol):
    key: str  # changes with any committed change of what the page shows


V = TypeVar("V", bound=Versions)


@dataclass(frozen=True)
class _Route:
    """How to find an address's page: its name and the versions of what it shows. The versions'
    function depends on the address alone, so the one a view gave for it serves every request."""

    name: str
    versions: Callable[[], Versions]


@dataclass(frozen=True)
class _Shareable:
    """Set on a request whose page is the same for everyone: the middleware learns its address, and
    stores it unless it came from the cache."""

    key: str
    route: _Route
    valid_until: datetime | None
    stored: bool = False


_routes: dict[tuple[str, str], _Route] = {}  # (host, path) -> route, learned from the views


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


def page_key(*, host: str, language: str, path: str, name: str, versions: str) -> str:
    parts = "\n".join((name, host, language, path, versions))
    return "page:" + hashlib.blake2b(parts.encode(), digest_size=16).hexdigest()


def _stored_response(key: str) -> HttpResponse | None:
    stored = cache.get(key)
    if stored is None:
        return None
    content, headers, until = stored
    if until is not None and timezone.now() >= until:
        return None
    return HttpResponse(content, headers=headers)


def page_cached(
    request: HttpRequest,
    *,
    name: str,
    versions: Callable[[], V],
    render: Callable[[V | None], HttpResponse],
    valid_until: Callable[[], datetime | None] = lambda: None,
) -> HttpResponse:
    """The page from the shared cache when it holds one for the current `versions()`, else
    `render(versions)`'s answer, marked for `SharedPagesMiddleware` to store when it is the same
    for everyone. A request that may not share (someone signed in) is rendered with
    `render(None)`, without reading the versions. `versions` must depend on the address alone.
    `valid_until`, asked after a render, is when the page changes by the clock alone (a bid
    expiring), if ever: the copy is not served after it."""
    if not _shareable_request(request):
        return render(None)
    # Read already when the middleware knew the address but found no copy.
    current = getattr(request, "_shared_versions", None) or versions()
    key = page_key(host=request.get_host(), language=translation.get_language() or "", path=request.path,
                   name=name, versions=current.key)
    route = _Route(name, versions)
    stored = _stored_response(key)
    if stored is not None:
        # Another process stored it: this one learns the address too.
        request._shared_page = _Shareable(key=key, route=route, valid_until=None, stored=True)
        return stored
    response = render(current)
    request._shared_page = _Shareable(key=key, route=route, valid_until=valid_until())
    return response


class SharedPagesMiddleware:
    """Answers a shared page from the cache before the session, user, message and URL machinery
    runs, and stores the pages `page_cached` marked as shareable."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        route = self._route(request)
        if route is not None:
            current = route.versions()
            hit = _stored_response(page_key(
                host=request.get_host(), language=translation.get_language_from_path(request.path) or "",
                path=request.path, name=route.name, versions=current.key,
            ))
            if hit is not None:
                return hit
            request._shared_versions = current
        response = self.get_response(request)
        shareable = getattr(request, "_shared_page", None)
        if shareable is not None and _shareable_response(request, response):
            self._store(request, response, shareable)
        return response

    @staticmethod
    def _route(request: HttpRequest) -> _Route | None:
        # No session (nobody signed in) and no message cookie (nothing waiting for this visitor).
        cookies = request.COOKIES
        if settings.SESSION_COOKIE_NAME in cookies or CookieStorage.cookie_name in cookies:
            return None
        if request.method not in ("GET", "HEAD") or request.META.get("QUERY_STRING"):
            return None
        try:
            return _routes.get((request.get_host(), request.path))
        except DisallowedHost:
            return None  # the whole stack refuses it

    @staticmethod
    def _store(request: HttpRequest, response: HttpResponse, shareable: _Shareable) -> None:
        if not shareable.stored:
            headers = [
                (name, value) for name, value in response.items() if name.lower() not in UNSTORED_HEADERS
            ]
            seconds = getattr(settings, "PAGE_CACHE_SECONDS", DEFAULT_SECONDS)
            cache.set(shareable.key, (response.content, headers, shareable.valid_until), seconds)
        if len(_routes) < MAX_ROUTES:
            _routes[(request.get_host(), request.path)] = shareable.route
