"""Site-wide: response headers that depend on who asked and what was answered, and requests refused
before any view reads them."""

import re

from django.conf import settings
from django.shortcuts import render
from django.utils.cache import cc_delim_re, patch_cache_control

# Documents that belong to one buyer, whoever fetches them (invoices, statements).
PRIVATE_CONTENT_TYPES = ("application/pdf", "text/csv")


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
