"""A Portuguese seller enrolls the host agent of a server: creates its token (shown once, in the
enroll command), then, once the agent has reported GPUs that match the registration, sees the
server verified with its GPUs."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.conf import settings
from django.utils import timezone, translation
from django.utils.translation import gettext

from sellers.models import AgentToken, ServerAgent, ServerEvent, ServerEventKind
from tests.browser.support import PASSWORD, SIGN_IN_TIMEOUT_MS, new_page
from tests.factories import GpuModelFactory, ProfileFactory, SellerFactory, ServerFactory
from tests.sellers.support import with_mfa

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

H100 = {"uuid": "GPU-0", "name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "temperature_c": 31,
        "utilization_percent": 0, "ecc_uncorrected": 0}


def agent_reports(server) -> None:
    """What the exchange writes when the agent's first heartbeat matches the registration (the
    heartbeat service's part: here as its rows)."""
    now = timezone.now()
    ServerAgent.objects.create(
        server=server, enrolled_at=now, last_heartbeat_at=now, agent_version="1.0.0", hostname="gpu-lis-01",
        uptime_seconds=7200, disk_free_gb=Decimal("812.5"),
        gpus=[{**H100, "index": index, "uuid": f"GPU-{index}"} for index in range(server.gpu_count)],
    )
    server.agent_verified_at = now
    server.save(update_fields=["agent_verified_at"])
    ServerEvent.objects.create(server=server, at=now - timedelta(seconds=1), kind=ServerEventKind.ENROLLED)
    ServerEvent.objects.create(server=server, at=now, kind=ServerEventKind.VERIFIED)


def test_a_portuguese_seller_enrolls_the_agent_and_sees_the_server_verified(live_server, browser):
    base = live_server.url
    seller = SellerFactory(name="Lisboa GPU Lda")
    profile = ProfileFactory(preferred_language="pt")
    seller.memberships.create(user=profile.user, role="owner")
    server = ServerFactory(seller=seller, name="lis-h100-01", gpu_count=2,
                           gpu_model=GpuModelFactory(name="H100 SXM"), agent_verified_at=None)
    page = new_page(browser, "pt")
    page.goto(f"{base}/pt/account/login/")
    page.locator("input[name=login]").fill(profile.user.email)
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("main form button[type=submit]").last.click()
    page.wait_for_url(f"{base}/pt/account/", timeout=SIGN_IN_TIMEOUT_MS)
    with_mfa(profile.user)  # two-factor on after signing in, so the login asks no code

    page.goto(f"{base}/pt/seller/servers/{server.pk}/")
    page.get_by_test_id("server-agent-link").click()
    page.wait_for_url(f"{base}/pt/seller/servers/{server.pk}/agent/")
    with translation.override("pt"):
        never, online, verified = gettext("No agent yet"), gettext("Online"), gettext("Verified")
        enrolled = gettext("Agent enrolled")
    assert page.get_by_test_id("agent-state").inner_text() == never

    page.get_by_test_id("agent-token-create").click()
    page.wait_for_load_state()
    secret = page.get_by_test_id("agent-token-secret").input_value()
    assert secret.startswith("evxa_")
    enroll = page.get_by_test_id("agent-enroll").inner_text()
    assert enroll == f"sudo everx-agent enroll --url {settings.SITE_URL or base} --token {secret}"
    assert AgentToken.objects.get(server=server, revoked_at__isnull=True).prefix == secret[:12]

    page.get_by_role("link", name="Já o copiei").click()
    page.wait_for_url(f"{base}/pt/seller/servers/{server.pk}/agent/")
    assert secret not in page.content()  # shown once
    assert "--token evxa_…" in page.get_by_test_id("agent-enroll").inner_text()

    agent_reports(server)
    page.reload()
    assert page.get_by_test_id("agent-state").inner_text() == online
    assert page.get_by_test_id("agent-verified").inner_text() == verified
    assert page.get_by_test_id("agent-verified-since").is_visible()
    gpus = page.get_by_test_id("agent-gpus").locator("tbody tr")
    assert gpus.count() == 2
    assert "NVIDIA H100 80GB HBM3" in gpus.first.inner_text()
    assert "81.559" in gpus.first.inner_text()  # Portuguese digits
    assert enrolled in page.get_by_test_id("agent-events").inner_text()

    page.goto(f"{base}/pt/seller/servers/")
    assert page.get_by_test_id("agent-state").inner_text() == online
    page.context.close()
