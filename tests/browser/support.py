"""Helpers the browser journeys share."""

import time
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from urllib.parse import urlsplit

from django.utils import translation
from django.utils.translation import gettext

from billing.services import fx_rates_load, top_up_create, top_up_pay_sandbox
from demo.totp import PERIOD, totp_activate, totp_code, totp_secret_generate, totp_step
from tests.factories import ProfileFactory, operator_make

PASSWORD = "gpu-hours-2026!"
LOCALES = {"fr": "fr-FR", "pt": "pt-PT"}
# Signing in is the slowest step of a journey (password hashing, the admin's first page): on a
# loaded machine it gets more time than the default 10 s.
SIGN_IN_TIMEOUT_MS = 30_000
# A code is typed only with at least this many seconds left in its step, so it never rolls over
# between being computed and being checked.
CODE_MARGIN_SECONDS = 5
_last_step_typed: dict[str, int] = {}  # secret -> step of the last code typed with it


def french_buyer_with_balance():
    profile = ProfileFactory(preferred_language="fr", billing_country="FR", name="Léa Martin")
    fx_rates_load(rates={"EUR": Decimal("0.92"), "GBP": Decimal("0.79")},
                  valid_from=datetime(2026, 1, 1, tzinfo=UTC), source="test")
    top_up = top_up_create(user=profile.user, amount_text="100", currency="EUR", provider="sandbox",
                           form_token=uuid.uuid4())
    top_up_pay_sandbox(user=profile.user, top_up_id=top_up.pk)
    return profile.user


def buyer_sign_in(page, base: str, user, language: str = "fr") -> None:
    """Sign `user` in with the journeys' password, landing on their account page."""
    page.goto(f"{base}/{language}/account/login/")
    page.locator("input[name=login]").fill(user.email)
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("main form button[type=submit]").last.click()
    page.wait_for_url(f"{base}/{language}/account/", timeout=SIGN_IN_TIMEOUT_MS)


def french(message: str) -> str:
    with translation.override("fr"):
        return gettext(message)


def new_page(browser, language: str):
    context = browser.new_context(locale=LOCALES[language])
    page = context.new_page()
    page.set_default_timeout(10_000)
    return page


def operator_with_totp(role: str | None, email: str):
    """A staff user of `role` (a superuser for None) with TOTP on, and the secret of its codes."""
    operator = operator_make(role, email=email)
    secret = totp_secret_generate()
    totp_activate(user=operator, secret=secret)
    return operator, secret


def totp_code_to_type(secret: str) -> str:
    """A code allauth accepts when it arrives: its step has CODE_MARGIN_SECONDS left at least, and
    it is of a later step than any code typed before with `secret` (allauth takes a code once)."""
    while True:
        now = time.time()
        step, left = totp_step(at=now), PERIOD - now % PERIOD
        if left >= CODE_MARGIN_SECONDS and step > _last_step_typed.get(secret, -1):
            _last_step_typed[secret] = step
            return totp_code(secret=secret, step=step)
        time.sleep(left + 0.1)


def landed_on(page, path: str) -> None:
    """Fail with what the page shows when the browser is not at `path`."""
    if urlsplit(page.url).path != path:
        shown = page.locator(".errorlist, .alert, ul.messagelist, main h1").all_inner_texts()
        raise AssertionError(f"expected {path}, landed on {page.url} ({page.title()!r}): {shown}")


def submit(page, button) -> None:
    """Click a form's submit button and wait for the page it leads to, redirects included."""
    with page.expect_navigation(timeout=SIGN_IN_TIMEOUT_MS):
        button.click()


def admin_sign_in(browser, base: str, operator, secret: str, language: str):
    """Open the admin, get sent to the sign-in page, type the password then a TOTP code; returns
    the page on the admin's index, or fails saying where the browser landed instead."""
    page = new_page(browser, language)
    page.goto(f"{base}/{language}/admin/", timeout=SIGN_IN_TIMEOUT_MS)
    landed_on(page, f"/{language}/account/login/")
    page.locator("input[name=login]").fill(operator.email)
    page.locator("input[name=password]").fill(PASSWORD)
    submit(page, page.locator("main form button[type=submit]").last)
    landed_on(page, f"/{language}/account/2fa/authenticate/")
    page.locator("input[name=code]").fill(totp_code_to_type(secret))
    submit(page, page.locator("form:has(input[name=code]) button[type=submit]").first)
    landed_on(page, f"/{language}/admin/")
    return page
