"""Saving the pages the test suite renders, for the Nu HTML Checker that `make test` runs after pytest
(`scripts/check_html.py`). Off unless the environment variable HTML_CAPTURE_DIR names a folder.

Every HTML response that Django's test client receives is written there once per method, path,
status and content (less the CSRF token, new in each form): a page that a hundred tests render the
same way costs the checker one file, and every state of a page that some test reaches is checked,
whatever the order the tests ran in. A fragment (the answer to an htmx request, or a successful
answer without a doctype: the order book swapped into the trade page) is wrapped in the smallest
valid document, on the same first line so that the checker's line numbers are the fragment's. An
error answer without a doctype is checked as it is, and fails: a visitor sees it as a page.
`index.jsonl` says which request and which test each file came from.
"""

import functools
import hashlib
import json
import os
import re
import threading
from pathlib import Path

from django.test import Client

ENV_VAR = "HTML_CAPTURE_DIR"
INDEX = "index.jsonl"
# Around a fragment: a document with everything the checker requires before and after a body.
FRAGMENT_HEAD = (
    '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>fragment</title></head><body>'
)
FRAGMENT_TAIL = "</body></html>\n"
CSRF_TOKEN = re.compile(r'(name="csrfmiddlewaretoken" value=")[^"]*"')

_lock = threading.Lock()  # a few tests send requests from several threads at once


def page_file_name(*, method: str, path: str, status: int, html: str) -> str:
    """A readable file name, the same for the same request, status and content."""
    readable = re.sub(r"[^A-Za-z0-9]+", "-", path).strip("-")[:80] or "root"
    content = CSRF_TOKEN.sub(r'\1"', html)
    digest = hashlib.sha256(f"{method} {path} {status}\n{content}".encode()).hexdigest()[:12]
    return f"{method.lower()}-{status}-{readable}-{digest}.html"


def is_fragment(*, html: str, status: int, htmx: bool) -> bool:
    """Whether an answer is a piece of a page rather than a page (see the module's docstring)."""
    return htmx or (status < 400 and html.lstrip()[:9].lower() != "<!doctype")


def page_document(html: str, *, fragment: bool) -> str:
    """The text to check: a fragment inside a document, a page as it is."""
    return f"{FRAGMENT_HEAD}{html}{FRAGMENT_TAIL}" if fragment else html


def page_save(
    *, folder: Path, method: str, path: str, status: int, html: str, fragment: bool, test: str
) -> None:
    """Write one page and its line of the index, unless the same page is saved already."""
    name = page_file_name(method=method, path=path, status=status, html=html)
    document = page_document(html, fragment=fragment)
    with _lock:
        target = folder / name
        if target.exists():
            return
        target.write_text(document, encoding="utf-8")
        entry = {"file": name, "method": method, "path": path, "status": status, "fragment": fragment}
        with (folder / INDEX).open("a", encoding="utf-8") as index:
            index.write(json.dumps({**entry, "test": test}) + "\n")


def response_html(response) -> str | None:
    """The HTML text of a response, or None for anything else (a redirect, a PDF, a stream)."""
    if getattr(response, "streaming", False):
        return None
    if not response.get("Content-Type", "").startswith("text/html"):
        return None
    text = response.content.decode(response.charset or "utf-8", errors="replace")
    return text if text.strip() else None


def capture_install(folder: Path):
    """Make `Client.request` save what it receives into `folder`, and only there (a capture of a
    test's own replaces the suite's while it lasts); returns the function that undoes it."""
    folder.mkdir(parents=True, exist_ok=True)
    previous = Client.request
    original = getattr(previous, "__wrapped__", previous)

    @functools.wraps(original)
    def request(self, **request):
        response = original(self, **request)
        html = response_html(response)
        if html is not None:
            page_save(
                folder=folder,
                method=request.get("REQUEST_METHOD", "GET"),
                path=request.get("PATH_INFO", "/"),
                status=response.status_code,
                html=html,
                fragment=is_fragment(
                    html=html, status=response.status_code, htmx=request.get("HTTP_HX_REQUEST") == "true"
                ),
                test=os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0],
            )
        return response

    Client.request = request

    def uninstall():
        Client.request = previous

    return uninstall


_uninstall = None


def pytest_configure(config):
    global _uninstall
    folder = os.environ.get(ENV_VAR)
    if folder:
        _uninstall = capture_install(Path(folder))


def pytest_unconfigure(config):
    global _uninstall
    if _uninstall is not None:
        _uninstall()
        _uninstall = None
