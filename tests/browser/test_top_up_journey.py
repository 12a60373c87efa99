import re

import pytest
from django.core import mail

from accounts.models import Wallet

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NBSP = "\u00a0"
PASSWORD = "horas-de-gpu-2026!"


def test_portuguese_sign_up_top_up_and_invoice(live_server, page, tmp_path):
    base = live_server.url
    page.goto(f"{base}/pt/account/signup/")
    page.locator("input[name=email]").fill("joana@example.com")
    page.locator("input[name=password1]").fill(PASSWORD)
    page.locator("input[name=password2]").fill(PASSWORD)
    page.locator("form button[type=submit]").last.click()
    page.wait_for_load_state()

    # The confirmation link arrives by email (the test outbox), in Portuguese.
    assert len(mail.outbox) == 1
    link = re.search(r"https?://\S+/confirm-email/\S+/", mail.outbox[0].body).group(0)
    page.goto(link)
    page.locator("main form button[type=submit]").click()
    page.wait_for_url(f"{base}/pt/account/")

    page.get_by_role("link", name="Editar identidade de faturação e idioma").click()
    page.get_by_label("Nome completo").fill("Joana Ferreira")
    page.get_by_label("País de faturação").select_option("PT")
    page.get_by_label("Morada").fill("Rua Augusta 10, 1100-053 Lisboa")
    page.locator("main form button[type=submit]").click()
    page.wait_for_url(f"{base}/pt/account/profile/")

    page.goto(f"{base}/pt/account/top-up/")
    page.get_by_test_id("currency-chips").get_by_role("link", name="EUR").click()
    page.wait_for_url(f"{base}/pt/account/top-up/?currency=EUR")
    page.get_by_label(f"€{NBSP}50,00").check()
    page.get_by_label("Pagamento de teste (sandbox)").check()
    page.locator("main form button[type=submit]").click()
    page.wait_for_url(re.compile(r".*/pt/account/top-ups/\d+/$"))
    # 50 EUR credited plus 23 % Portuguese VAT.
    assert f"€{NBSP}61,50" in page.locator("main").inner_text()
    page.locator("main form button[type=submit]").click()
    page.wait_for_load_state()
    assert page.get_by_test_id("top-up-status").inner_text() == "Pago"

    page.goto(f"{base}/pt/account/")
    assert page.get_by_test_id("balance").inner_text() == f"€{NBSP}50,00"
    assert Wallet.objects.get(user__email="joana@example.com").balance == 50

    page.locator("#top-ups").get_by_role("link", name=re.compile(r"EXC-\d{4}-\d{6}")).click()
    with page.expect_download() as download_info:
        page.get_by_test_id("invoice-pdf").click()
    download = download_info.value
    assert re.fullmatch(r"EXC-\d{4}-\d{6}\.pdf", download.suggested_filename)
    saved = tmp_path / download.suggested_filename
    download.save_as(saved)
    assert saved.read_bytes().startswith(b"%PDF")
