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

In front of Django, `SharedPagesFront` (the WSGI application's outer layer, `marketplace.wsgi`)
answers the same copies without Django's request handling at all: no request object, no request
signals, no middleware. It learns an address from the whole stack's answer (the middleware tells it
which headers came with the copy; the rest, the security headers and the policy, are the outer
middleware's, the same for every request that reaches the same address by the same scheme), and
answers with the stored bytes and headers and those. Whatever it does not know for sure (a POST, a
query string, a cookie of a session or a message, an address or scheme it has not seen answered
200) goes the whole way.
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
from django.http import HttpRequest, HttpResponse, parse_cookie
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


def _stored_copy(key: str) -> tuple[bytes, list[tuple[str, str]]] | None:
    """The page stored under `key` (its bytes and headers), unless none is or it has expired."""
    stored = cache.get(key)
    if stored is None:
        return None
    content, headers, until = stored
    if until is not None and timezone.now() >= until:
        return None
    return content, headers


def _stored_response(key: str) -> HttpResponse | None:
    copy = _stored_copy(key)
    if copy is None:
        return None
    response = HttpResponse(copy[0], headers=copy[1])
    response._stored_headers = frozenset(name.lower() for name, _value in copy[1])
    return response


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
                _front_tell(request, route, hit)
                return hit
            request._shared_versions = current
        response = self.get_response(request)
        shareable = getattr(request, "_shared_page", None)
        if shareable is not None and _shareable_response(request, response):
            self._store(request, response, shareable)
            _front_tell(request, shareable.route, response)
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
            response._stored_headers = frozenset(name.lower() for name, _value in headers)
        if len(_routes) < MAX_ROUTES:
            _routes[(request.get_host(), request.path)] = shareable.route


# --- In front of Django ------------------------------------------------------------------------

FRONT_ENVIRON_KEY = "everxcloud.shared_page"
# Set by the server (gunicorn) or different on every answer: never learned as an outer header.
_FRONT_UNLEARNED = frozenset({"date", "server", "connection", "set-cookie"})


@dataclass(frozen=True)
class _Told:
    """What the middleware tells the front about a shared page it answered: how to find the page,
    the host its key was made with, and the names of the headers stored with the copy."""

    route: _Route
    host: str
    stored_headers: frozenset[str]


@dataclass(frozen=True)
class _FrontRoute:
    route: _Route
    host: str
    language: str
    path: str
    outer_headers: tuple[tuple[str, str], ...]


def _front_tell(request: HttpRequest, route: _Route, response: HttpResponse) -> None:
    stored = getattr(response, "_stored_headers", None)
    if stored is not None and _shareable_response(request, response):
        told = _Told(route=route, host=request.get_host(), stored_headers=stored)
        request.environ[FRONT_ENVIRON_KEY] = told


def _front_address(environ: dict) -> tuple | None:
    """Everything of a request that the stack below decides on before a shared page is answered
    (method, scheme as the server and the proxy say it, host headers, address), or None when it
    may not be shared (not a GET, a query string, a session or a message cookie)."""
    if environ.get("REQUEST_METHOD") != "GET" or environ.get("QUERY_STRING"):
        return None
    if environ.get("HTTP_COOKIE"):
        cookies = parse_cookie(environ["HTTP_COOKIE"])
        if settings.SESSION_COOKIE_NAME in cookies or CookieStorage.cookie_name in cookies:
            return None
    return tuple(environ.get(name) for name in (
        "wsgi.url_scheme", "HTTP_X_FORWARDED_PROTO", "HTTP_HOST", "HTTP_X_FORWARDED_HOST",
        "SERVER_NAME", "SERVER_PORT", "SCRIPT_NAME", "PATH_INFO",
    ))


class SharedPagesFront:
    """A WSGI layer around the site: answers a shared page whose address it has seen answered by
    the whole stack, with one read of the versions and one cache read (see the module's text)."""

    def __init__(self, app) -> None:
        self.app = app
        self._routes: dict[tuple, _FrontRoute] = {}

    def __call__(self, environ: dict, start_response):
        address = _front_address(environ)
        known = self._routes.get(address) if address is not None else None
        if known is not None:
            answer = self._answer(known)
            if answer is not None:
                start_response("200 OK", answer[1])
                return [answer[0]]
        if address is None:
            return self.app(environ, start_response)
        answered: list = []

        def start_response_seen(status, headers, exc_info=None):
            answered[:] = [status, headers]
            return start_response(status, headers, exc_info)

        response = self.app(environ, start_response_seen)
        told = environ.get(FRONT_ENVIRON_KEY)
        if told is not None and answered and answered[0].startswith("200 "):
            self._learn(address, told, answered[1], environ)
        return response

    def _learn(self, address: tuple, told: _Told, headers: list, environ: dict) -> None:
        if any(name.lower() == "set-cookie" for name, _value in headers) or len(self._routes) >= MAX_ROUTES:
            return
        outer = tuple(
            (name, value) for name, value in headers
            if name.lower() not in told.stored_headers and name.lower() not in _FRONT_UNLEARNED
        )
        path = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
        self._routes[address] = _FrontRoute(
            route=told.route, host=told.host, language=translation.get_language_from_path(path) or "",
            path=path, outer_headers=outer,
        )

    @staticmethod
    def _answer(known: _FrontRoute) -> tuple[bytes, list] | None:
        """The stored page and its headers, or None to let the whole stack answer (no copy for
        the current versions, or anything going wrong on the way: the stack reports it)."""
        try:
            current = known.route.versions()
            copy = _stored_copy(page_key(
                host=known.host, language=known.language, path=known.path, name=known.route.name,
                versions=current.key,
            ))
        except Exception:  # noqa: BLE001 (the whole stack answers, and reports, what failed here)
            return None
        if copy is None:
            return None
        return copy[0], [*copy[1], *known.outer_headers]
