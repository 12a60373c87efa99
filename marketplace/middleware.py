"""Site-wide: response headers that depend on who asked and what was answered, and requests refused
before any view reads them."""

import functools
import json
import math
import re
import time

from csp.constants import HEADER, HEADER_REPORT_ONLY
from csp.middleware import CheckableLazyObject
from csp.middleware import CSPMiddleware as PolicyBuiltPerResponse
from csp.utils import build_policy
from django.conf import settings
from django.core.cache import cache
from django.core.cache.backends.redis import RedisCacheClient
from django.core.signals import setting_changed
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import translation
from django.utils.cache import cc_delim_re, patch_cache_control, patch_vary_headers
from django.utils.translation import gettext_lazy as _
from django.utils.translation.trans_real import parse_accept_lang_header

from accounts.tokens import token_secret_hash
from sellers.selectors import agent_token_find

from .api_support import PROBLEM_TYPE, client_address, problem_response, request_agent_secret, request_token
from .idempotency import idempotency_claim, idempotency_complete, idempotency_key_valid, idempotency_release

# The API's paths: its answers are problem details, never pages (ApiMiddleware below).
API_PREFIX = "/api/"

# Documents that belong to one buyer, whoever fetches them (invoices, statements).
PRIVATE_CONTENT_TYPES = ("application/pdf", "text/csv")


# django-csp's response attributes that change the policy of one answer (its view decorators).
_POLICY_OVERRIDES = (
    "_csp_config", "_csp_update", "_csp_replace", "_csp_exempt",
    "_csp_config_ro", "_csp_update_ro", "_csp_replace_ro", "_csp_exempt_ro",
)


@functools.cache
def _site_policy() -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """The settings' policy headers, each with the path prefixes it skips: the same for every answer
    that no view changed, so built once (django-csp builds it for each answer, a tenth of a cached
    page's cost)."""
    built = []
    for header, setting, report_only in (
        (HEADER, "CONTENT_SECURITY_POLICY", False),
        (HEADER_REPORT_ONLY, "CONTENT_SECURITY_POLICY_REPORT_ONLY", True),
    ):
        value = build_policy(report_only=report_only)
        if value:
            prefixes = (getattr(settings, setting, None) or {}).get("EXCLUDE_URL_PREFIXES") or ()
            built.append((header, value, tuple(prefixes)))
    return tuple(built)


def _site_policy_forget(*, setting, **kwargs) -> None:
    if setting.startswith("CONTENT_SECURITY_POLICY"):
        _site_policy.cache_clear()


setting_changed.connect(_site_policy_forget)


class CSPMiddleware(PolicyBuiltPerResponse):
    """django-csp's middleware, with the site's policy built once instead of for each answer. An
    answer whose view changed its policy, or a page that used a nonce, takes django-csp's own way."""

    def process_response(self, request, response):
        if getattr(request, "_csp_nonce", None) is not None or any(
            hasattr(response, name) for name in _POLICY_OVERRIDES
        ) or (settings.DEBUG and response.status_code in (404, 500)):
            return super().process_response(request, response)
        for header, value, prefixes in _site_policy():
            if header not in response and not request.path_info.startswith(prefixes):
                response[header] = value
        # As django-csp does: a nonce asked for after the header is written is an error, not a
        # nonce missing from the policy.
        request.csp_nonce = CheckableLazyObject(self._csp_nonce_post_response)
        return response


class PrivateResponsesMiddleware:
    """`Cache-Control: private, no-store` on every response to a signed-in user (account pages show
    balances, rental pages show connection details, and every page shows who is signed in) and on
    every PDF and CSV: neither a shared cache nor the browser's disk keeps a copy. A response that
    its view declares public, the same for everyone (the favicon, market data), keeps its caching."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        document = response.get("Content-Type", "").startswith(PRIVATE_CONTENT_TYPES)
        if document or (self._signed_in(request) and not self._declared_public(response)):
            patch_cache_control(response, private=True, no_store=True)
        return response

    @staticmethod
    def _declared_public(response) -> bool:
        return "public" in cc_delim_re.split(response.get("Cache-Control", "").lower())

    @staticmethod
    def _signed_in(request) -> bool:
        # Without a session cookie, or a session this request just started (signing in), nobody is
        # signed in: no need to load the session (and say `Vary: Cookie`) on every anonymous request.
        session = getattr(request, "session", None)
        if session is None or (settings.SESSION_COOKIE_NAME not in request.COOKIES and not session.modified):
            return False
        user = getattr(request, "user", None)
        return bool(user and user.is_authenticated)


# C0 control characters but tab, line feed and carriage return, and DEL: no one types them, a
# page cannot show them back (HTML forbids U+0000), and no field of ours accepts them.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class RefuseControlCharactersMiddleware:
    """Answer 400, in the page's language, to a query string or a form whose names or values hold
    a control character (`%00` and the like), before any view reads it: nothing is written, and no
    page echoes it back into its links and fields."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if self._has_control_characters(request):
            if request.path.startswith(API_PREFIX):
                return problem_response(
                    status=400, code="control_characters",
                    detail=_("The request holds control characters, which no field accepts."),
                )
            return render(request, "400.html", status=400)
        return self.get_response(request)

    @staticmethod
    def _has_control_characters(request) -> bool:
        sent = [request.GET]
        if request.method == "POST" and request.content_type in (
            "application/x-www-form-urlencoded", "multipart/form-data"
        ):
            sent.append(request.POST)
        return any(
            CONTROL_CHARACTERS.search(name) or any(CONTROL_CHARACTERS.search(value) for value in values)
            for data in sent for name, values in data.lists()
        )


# --- The API (/api/): what every operation shares before and after its router (docs/api.md) ------

API_V1_PREFIX = "/api/v1/"
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
MAX_API_BODY = 64 * 1024
JSON_CHARSETS = frozenset({"utf-8", "utf8"})
API_LANGUAGES = frozenset(code for code, _name in settings.LANGUAGES)

# Error answers that did not come from a router (no such address, a method not allowed, a crash,
# a refusal of Django's) get problem details with these codes.
STATUS_CODES = {
    400: "bad_request", 401: "token_invalid", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 413: "body_too_large", 500: "server_error",
}
STATUS_DETAILS = {
    400: _("The request is not one this API understands."),
    403: _("This request is not allowed."),
    404: _("There is nothing at this address."),
    405: _("This address does not answer this method."),
    413: _("The request body is larger than 64 KiB."),
    500: _("Something went wrong on our side. Nothing was changed; try again later."),
}
# Headers of the original error answer that its problem details keep.
KEPT_HEADERS = ("Allow", "Retry-After", "WWW-Authenticate")


def api_language(request) -> str:
    """The first of our languages that `Accept-Language` names (pt-PT and pt-BR are pt), else
    English. The API ignores the site's language cookie: a program says what it reads."""
    header = request.headers.get("Accept-Language", "")
    for code, _quality in parse_accept_lang_header(header[:500]):
        base = code.split("-")[0].lower()
        if base in API_LANGUAGES:
            return base
    return "en"


class ApiMiddleware:
    """For /api/ paths: answer in the language of `Accept-Language`; refuse bodies that are too
    large, not UTF-8 JSON or of another media type; count the rate limits; replay an
    `Idempotency-Key`'s first answer; and turn every error answer that is not problem details
    (Django's 404, 405, 500 pages) into problem details. Never cached by anyone but the client
    unless the operation declared itself public."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not request.path.startswith(API_PREFIX):
            return self.get_response(request)
        language = api_language(request)
        with translation.override(language):
            response = self._answer(request)
            response = _as_problem(response)
        response["Content-Language"] = language
        patch_vary_headers(response, ("Accept-Language", "Authorization"))
        if not PrivateResponsesMiddleware._declared_public(response):
            patch_cache_control(response, private=True, no_store=True)
        return response

    def _answer(self, request):
        if request.path.startswith(API_V1_PREFIX):
            # Counted first: a client sending refused bodies over and over is limited too.
            refusal = _rate_limit_refusal(request) or _body_refusal(request)
            if refusal is not None:
                return refusal
            response = _idempotent(request, self.get_response)
            if response.status_code == 401 and request_agent_secret(request) is not None:
                _agent_refusal_count(request)
            return response
        return self.get_response(request)


def _is_problem(response) -> bool:
    return response.get("Content-Type", "").startswith((PROBLEM_TYPE, "application/json"))


def _as_problem(response):
    if response.status_code < 400 or _is_problem(response):
        return response
    status = response.status_code
    problem = problem_response(
        status=status, code=STATUS_CODES.get(status, "server_error" if status >= 500 else "bad_request"),
        detail=STATUS_DETAILS.get(status, STATUS_DETAILS[500 if status >= 500 else 400]),
    )
    for name in KEPT_HEADERS:
        if name in response:
            problem[name] = response[name]
    return problem


# --- Bodies --------------------------------------------------------------------------------------

def _not_json(value):
    raise ValueError(f"{value} is not JSON")


def _empty_form(request) -> bool:
    """A form with no field at all (what a client sends for "POST, nothing in it") is no body."""
    if request.content_type != "multipart/form-data":
        return False
    try:
        return not request.POST and not request.FILES
    except Exception:  # noqa: BLE001 - a form that does not parse is a body we refuse below
        return False


def _body_refusal(request):
    """413 over 64 KiB (announced or sent), 415 for a body that is not JSON in UTF-8, 400 for one
    that does not decode or parse: before any router reads it, so nothing moves."""
    if request.method not in WRITE_METHODS:
        return None
    length = request.META.get("CONTENT_LENGTH") or "0"
    if not (length.isascii() and length.isdigit()):
        return problem_response(status=400, code="bad_request", detail=STATUS_DETAILS[400])
    if int(length) > MAX_API_BODY:
        return problem_response(status=413, code="body_too_large", detail=STATUS_DETAILS[413])
    body = request.body
    if len(body) > MAX_API_BODY:
        return problem_response(status=413, code="body_too_large", detail=STATUS_DETAILS[413])
    if not body or _empty_form(request):
        return None
    charset = request.content_params.get("charset", "utf-8").lower()
    if request.content_type != "application/json" or charset not in JSON_CHARSETS:
        return problem_response(
            status=415, code="unsupported_media_type",
            detail=_("Send the body as JSON, with the header Content-Type: application/json."),
        )
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return problem_response(status=400, code="body_not_utf8", detail=_("The body is not valid UTF-8."))
    try:
        # NaN and Infinity are not JSON, whatever Python's parser accepts; nesting too deep or a
        # number too long to read is refused like any other body that does not parse.
        json.loads(text, parse_constant=_not_json)
    except (ValueError, RecursionError):
        return problem_response(status=400, code="body_not_json", detail=_("The body is not valid JSON."))
    return None


# --- Rate limits ---------------------------------------------------------------------------------

def _rate_limit_refusal(request):
    """Fixed windows in the cache, per token (a usable one) or else per client address: every
    request counts against API_RATE_LIMIT_PER_MINUTE, writes also against
    API_WRITE_RATE_LIMIT_PER_MINUTE. A host agent's token has its own bucket (`_agent_over_limit`).
    Over any: 429 with the seconds left in the window."""
    window = settings.API_RATE_LIMIT_WINDOW_SECONDS
    now = time.time()
    start = int(now // window) * window
    secret = request_agent_secret(request)
    if secret is not None:
        over = _agent_over_limit(request, secret=secret, start=start, timeout=window * 2)
    else:
        token = request_token(request)
        who = f"token:{token.pk}" if token is not None else f"address:{client_address(request)}"
        limits = [("all", settings.API_RATE_LIMIT_PER_MINUTE)]
        if request.method in WRITE_METHODS:
            limits.append(("write", settings.API_WRITE_RATE_LIMIT_PER_MINUTE))
        over = any(_count(f"api-rate:{kind}:{who}:{start}", timeout=window * 2)[0] > limit
                   for kind, limit in limits)
    if not over:
        return None
    retry_after = max(1, math.ceil(start + window - now))
    return problem_response(
        status=429, code="rate_limited",
        detail=_("Too many requests: wait %(seconds)d seconds before the next one.")
        % {"seconds": retry_after},
        headers={"Retry-After": str(retry_after)},
    )


def _agent_over_limit(request, *, secret: str, start: int, timeout: int) -> bool:
    """A host agent's token has its own bucket of AGENT_RATE_LIMIT_PER_MINUTE, counted by the
    secret's hash without a query (every server calls every 30 s), so thousands of servers behind
    one address (a NAT) are not limited together. Secrets the heartbeat refused (unknown, revoked)
    count per address (`_agent_refusal_count`): past API_WRITE_RATE_LIMIT_PER_MINUTE of them, that
    address's requests are limited unless their token is live, so trying secrets is no faster than
    any other anonymous write."""
    count, refused = _count(f"api-rate:agent:{token_secret_hash(secret)}:{start}", timeout=timeout,
                            read=_agent_refusals_key(request, start))
    if count > settings.AGENT_RATE_LIMIT_PER_MINUTE:
        return True
    return refused > settings.API_WRITE_RATE_LIMIT_PER_MINUTE and agent_token_find(secret=secret) is None


def _agent_refusals_key(request, start: int) -> str:
    return f"api-rate:agent-refused:{client_address(request)}:{start}"


def _agent_refusal_count(request) -> None:
    """Count a refused agent token against the client's address (`_agent_over_limit`)."""
    window = settings.API_RATE_LIMIT_WINDOW_SECONDS
    start = int(time.time() // window) * window
    _count(_agent_refusals_key(request, start), timeout=window * 2)


def _count(key: str, *, timeout: int, read: str | None = None) -> tuple[int, int]:
    """Add one to the window's counter `key`; return it, and the counter `read` (0 when missing
    or not asked). On Redis, one round trip: the counter is created with its expiry when
    missing, then incremented (every API request and heartbeat pays this); the local-memory
    cache of the embedded default takes the portable way."""
    redis_client = _redis_client_of(key)
    if redis_client is not None:
        name = cache.make_and_validate_key(key)
        pipeline = redis_client.pipeline(transaction=False)
        pipeline.set(name, 0, ex=timeout, nx=True)
        pipeline.incr(name)
        if read is not None:
            pipeline.get(cache.make_and_validate_key(read))
        answers = pipeline.execute()
        return answers[1], int(answers[2] or 0) if read is not None else 0
    cache.add(key, 0, timeout=timeout)
    try:
        count = cache.incr(key)
    except ValueError:  # the key expired between add and incr
        cache.set(key, 1, timeout=timeout)
        count = 1
    return count, int(cache.get(read) or 0) if read is not None else 0


def _redis_client_of(key: str):
    """The redis-py client behind the Redis cache for `key` (one per pool: marketplace.cache), or
    None on another backend. Django stores a plain int as itself, so its `get` and `incr` read
    what `_count` writes."""
    backend = getattr(cache, "_cache", None)  # the backend's own client: a dict on local memory
    return backend.get_client(key, write=True) if isinstance(backend, RedisCacheClient) else None


# --- Idempotency keys ----------------------------------------------------------------------------

def _idempotent(request, get_response):
    """A write with an `Idempotency-Key` from a usable token: run once, answer the same again.
    Without a usable token the header is ignored (the operation answers 401, or is public)."""
    key = request.headers.get("Idempotency-Key")
    if request.method not in WRITE_METHODS or key is None:
        return get_response(request)
    if not idempotency_key_valid(key):
        return problem_response(
            status=400, code="idempotency_key_invalid",
            detail=_("The Idempotency-Key header must have from 1 to 255 printable ASCII characters."),
        )
    token = request_token(request)
    if token is None:
        return get_response(request)
    claim = idempotency_claim(
        token_id=token.pk, key=key, method=request.method, path=request.get_full_path(), body=request.body,
    )
    if claim.outcome == "reused":
        return problem_response(
            status=422, code="idempotency_key_reused",
            detail=_("This Idempotency-Key was sent with another request in the last 24 hours. "
                     "Use a new key for a new request."),
        )
    if claim.outcome == "busy":
        return problem_response(
            status=409, code="idempotency_key_in_use",
            detail=_("A request with this Idempotency-Key is still running. Try again in a moment."),
        )
    if claim.outcome == "replay":
        return _replay(claim.record)
    return _first_answer(request, get_response, claim.record)


def _first_answer(request, get_response, record):
    try:
        response = get_response(request)
    except BaseException:
        idempotency_release(record=record)
        raise
    if response.status_code >= 500 or response.streaming:
        idempotency_release(record=record)
    else:
        idempotency_complete(
            record=record, status=response.status_code,
            content_type=response.get("Content-Type", ""), body=response.content,
        )
    return response


def _replay(record):
    response = HttpResponse(
        bytes(record.response_body), status=record.status, content_type=record.content_type
    )
    response["Idempotent-Replayed"] = "true"
    return response
