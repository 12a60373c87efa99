"""A French buyer creates an API token on the account's "Jetons d'API" page, sees its secret once,
uses it from a program (an HTTP request to /api/v1/me), then revokes it, after which the API
refuses it."""

import httpx
import pytest

from accounts.models import ApiToken
from tests.browser.support import PASSWORD
from tests.factories import ProfileFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NBSP = "\u00a0"


def test_a_token_created_seen_once_used_and_revoked(live_server, page):
    base = live_server.url
    buyer = ProfileFactory(preferred_language="fr", billing_country="FR", name="Léa Martin").user
    page.goto(f"{base}/fr/account/login/")
    page.locator("input[name=login]").fill(buyer.email)
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("main form button[type=submit]").last.click()
    page.wait_for_url(f"{base}/fr/account/")

    page.locator("main").get_by_role("link", name="Jetons d'API").click()
    page.wait_for_url(f"{base}/fr/account/api-tokens/")
    assert page.get_by_text("Vous n'avez pas encore de jeton d'API.").is_visible()
    assert page.get_by_test_id("sell-scope-explained").is_visible()
    page.get_by_label("Nom").fill("Script de prix")
    page.get_by_label("Lecture", exact=False).check()
    page.get_by_role("button", name="Créer le jeton").click()
    page.wait_for_load_state()

    assert page.get_by_role("heading", name="Votre nouveau jeton d'API").is_visible()
    assert "c'est la seule fois que nous l'affichons" in page.locator("main").inner_text()
    secret = page.get_by_test_id("token-secret").input_value()
    assert secret.startswith("evx_") and len(secret) == 44

    answer = httpx.get(f"{base}/api/v1/me", headers={"Authorization": f"Bearer {secret}"})
    assert answer.status_code == 200
    assert answer.json()["token_name"] == "Script de prix" and answer.json()["scopes"] == ["read"]

    page.get_by_role("link", name="Je l'ai copié").click()
    page.wait_for_url(f"{base}/fr/account/api-tokens/")
    table = page.locator("#api-tokens")
    assert secret not in page.content()
    assert f"{secret[:12]}…" in table.inner_text()
    assert "Actif" in table.inner_text()

    table.get_by_role("link", name="Révoquer").click()
    assert f"Révoquer le jeton «{NBSP}Script de prix{NBSP}»" in page.locator("main").inner_text()
    page.get_by_role("button", name="Révoquer le jeton").click()
    page.wait_for_url(f"{base}/fr/account/api-tokens/")
    assert f"Le jeton «{NBSP}Script de prix{NBSP}» est révoqué." in page.locator("main").inner_text()
    assert "Révoqué" in page.locator("#api-tokens").inner_text()
    assert ApiToken.objects.get(user=buyer).revoked_at is not None

    refused = httpx.get(f"{base}/api/v1/me",
                        headers={"Authorization": f"Bearer {secret}", "Accept-Language": "fr"})
    assert refused.status_code == 401
    assert refused.headers["Content-Type"].split(";")[0] == "application/problem+json"
    assert refused.json()["title"] == "Authentification requise"
