"""A French company whose VAT number VIES has not confirmed (VIES did not answer): the top-up page
quotes German VAT on top and says why, in French, and the top-up it creates carries the VAT and the
reason too. Once VIES confirms the number, the VAT comes back to the balance."""

import re

import pytest

from accounts.models import VatIdStatus
from accounts.services import profile_vat_id_vies_check
from tests.factories import ProfileFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NBSP = "\u00a0"
PASSWORD = "gpu-hours-2026!"
NUMBER = "DE100000008"
REASON = (
    f"Nous n'avons pas encore pu confirmer votre numéro de TVA {NUMBER} auprès du service VIES de "
    f"l'UE{NBSP}: la TVA est donc ajoutée. Dès que VIES l'aura confirmé, nous vous rembourserons cette "
    "TVA sur votre solde par un avoir."
)


def test_the_french_quote_adds_vat_and_says_why_for_an_unconfirmed_vat_number(
    live_server, page, monkeypatch
):
    profile = ProfileFactory(
        preferred_language="fr", billing_country="DE", billing_type="business",
        company_name="GPU Labs GmbH", vat_id=NUMBER, vat_id_status=VatIdStatus.UNKNOWN, name="Léa Martin",
    )
    base = live_server.url
    page.goto(f"{base}/fr/account/login/")
    page.locator("input[name=login]").fill(profile.user.email)
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("main form button[type=submit]").last.click()
    page.wait_for_url(f"{base}/fr/account/")

    page.goto(f"{base}/fr/account/top-up/")
    assert page.get_by_test_id("vat-reason").inner_text() == REASON
    page.get_by_test_id("currency-chips").get_by_role("link", name="EUR").click()
    page.wait_for_url(f"{base}/fr/account/top-up/?currency=EUR")
    page.get_by_label(f"50,00{NBSP}€ (59,50{NBSP}€ TTC)").check()  # 19 % German VAT on top
    page.get_by_label("Paiement de test (sandbox)").check()
    page.locator("main form button[type=submit]").click()
    page.wait_for_url(re.compile(r".*/fr/account/top-ups/\d+/$"))

    detail = page.locator("main").inner_text()
    assert f"59,50{NBSP}€" in detail and f"9,50{NBSP}€" in detail
    assert page.get_by_test_id("vat-reason").inner_text() == REASON
    page.locator("main form button[type=submit]").click()  # the test payment
    page.wait_for_load_state()

    # VIES answers at last: the 9,50 € of VAT go back to the balance, and the page says so.
    monkeypatch.setattr("accounts.services._vies_says", lambda number: True)
    profile_vat_id_vies_check(profile_id=profile.pk)
    page.reload()
    said = page.get_by_test_id("vat-reason").inner_text()
    assert said.startswith(f"VIES a confirmé votre numéro de TVA {NUMBER}{NBSP}:")
    page.goto(f"{base}/fr/account/")
    assert page.get_by_test_id("balance").inner_text() == f"59,50{NBSP}€"
