"""A Portuguese buyer saves an SSH key on the account page, sees its fingerprint, and deletes it."""

import pytest
from django.utils import translation
from django.utils.translation import gettext
from playwright.sync_api import expect

from exchange.models import SshKey
from tests.browser.support import PASSWORD, new_page
from tests.exchange.support import VECTOR_FINGERPRINT, VECTOR_KEY
from tests.factories import ProfileFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def portuguese(message: str) -> str:
    with translation.override("pt"):
        return gettext(message)


def test_a_buyer_saves_and_deletes_a_key_in_portuguese(live_server, browser):
    buyer = ProfileFactory(preferred_language="pt", billing_country="PT").user
    page = new_page(browser, "pt")
    base = live_server.url
    page.goto(f"{base}/pt/account/login/")
    page.locator("input[name=login]").fill(buyer.email)
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("main form button[type=submit]").last.click()
    page.wait_for_url(f"{base}/pt/account/")
    page.get_by_role("link", name=portuguese("SSH keys")).click()
    page.wait_for_url(f"{base}/pt/account/ssh-keys/")
    expect(page.get_by_role("heading", level=1)).to_have_text(portuguese("Your SSH keys"))

    page.locator("textarea[name=public_key]").fill("ssh-dss AAAA")
    page.locator("input[name=name]").fill("portátil")
    page.get_by_role("button", name=portuguese("Save the key")).click()
    expect(page.locator(".field-error")).to_be_visible()
    assert not SshKey.objects.exists()

    page.locator("textarea[name=public_key]").fill(VECTOR_KEY)
    page.get_by_role("button", name=portuguese("Save the key")).click()
    expect(page.locator("#ssh-keys")).to_contain_text(VECTOR_FINGERPRINT)
    expect(page.locator("#ssh-keys")).to_contain_text("portátil")
    assert SshKey.objects.get().buyer == buyer

    page.locator("#ssh-keys").get_by_role("button").click()
    expect(page.locator("#ssh-keys")).to_have_count(0)
    assert not SshKey.objects.exists()
    page.context.close()
