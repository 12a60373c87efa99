"""Headless Chromium (Debian's package) driven by Playwright against pytest-django's live server."""

import os
import shutil

import pytest
from playwright.sync_api import sync_playwright

# Playwright's sync API runs an event loop in this thread; Django's ORM calls made by the
# test itself (fixtures, assertions) are still plain synchronous code.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or "/usr/bin/chromium"
# The machine has no outside network: keep Chromium from trying to reach it.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]


@pytest.fixture(scope="session")
def browser():
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(locale="fr-FR")
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield page
    context.close()
