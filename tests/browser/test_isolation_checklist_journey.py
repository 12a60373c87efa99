"""A French seller reads the isolation checklist of a server whose NVIDIA driver would undo the
GPU locks: the server is sold only whole, and the missing fact carries the `everx-agent harden`
command that fixes it."""

import pytest
from django.utils import translation
from django.utils.translation import gettext

from exchange.services import agent_heartbeat_receive
from sellers.isolation import FACTS
from tests.browser.support import PASSWORD, SIGN_IN_TIMEOUT_MS, new_page
from tests.exchange.agents_support import enrolled, isolation_of, report_for
from tests.factories import GpuModelFactory, ProfileFactory
from tests.sellers.support import with_mfa

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_french_seller_sees_the_harden_command_for_a_failed_fact(live_server, browser):
    base = live_server.url
    server, secret = enrolled(GpuModelFactory(name="H100 SXM"), name="par-h100-01")
    profile = ProfileFactory(preferred_language="fr")
    server.seller.memberships.create(user=profile.user, role="owner")
    report = report_for(server, isolation=isolation_of(server, driver_keeps_permissions=False))
    agent_heartbeat_receive(secret=secret, report=report, address="192.0.2.7")
    page = new_page(browser, "fr")
    page.goto(f"{base}/fr/account/login/")
    page.locator("input[name=login]").fill(profile.user.email)
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("main form button[type=submit]").last.click()
    page.wait_for_url(f"{base}/fr/account/", timeout=SIGN_IN_TIMEOUT_MS)
    with_mfa(profile.user)

    page.goto(f"{base}/fr/seller/servers/{server.pk}/")

    checklist = page.get_by_test_id("isolation")
    assert page.get_by_test_id("isolation-level").inner_text() == "Vendu comme\u00a0: Serveur entier."
    failed = checklist.get_by_test_id("isolation-fact-driver_keeps_permissions")
    with translation.override("fr"):
        label = gettext(FACTS["driver_keeps_permissions"])
        held_label = gettext(FACTS["devices_locked"])
    assert failed.get_attribute("data-holds") == "no"
    assert label in failed.inner_text() and "Manquant\u00a0:" in failed.inner_text()
    command = failed.get_by_test_id("isolation-command-driver_keeps_permissions")
    assert command.inner_text() == "sudo everx-agent harden --apply"
    held = checklist.get_by_test_id("isolation-fact-devices_locked")
    assert held.get_attribute("data-holds") == "yes"
    assert held_label in held.inner_text() and "Tenu\u00a0:" in held.inner_text()
    assert held.get_by_test_id("isolation-command-devices_locked").count() == 0
    assert checklist.locator("code").count() == 1
