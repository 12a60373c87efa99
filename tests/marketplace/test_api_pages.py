"""The API's pages on the site: the reference at /<lang>/api/ and the quickstart at
/<lang>/api/quickstart/, in the three languages, under the site's strict policy."""

import re

import pytest

from tests.marketplace.test_seo import head_links

LANGUAGES = ("en", "pt", "fr")
HEADINGS = {
    "reference": {"en": "API reference", "pt": "Referência da API", "fr": "Référence de l’API"},
    "quickstart": {"en": "API quickstart", "pt": "Início rápido da API", "fr": "Démarrage rapide de l’API"},
}
PATHS = {"reference": "/{language}/api/", "quickstart": "/{language}/api/quickstart/"}
STRICT_STYLES = "style-src 'self';"


def h1(html: str) -> str:
    return re.search(r"<h1>(.*?)</h1>", html, re.S).group(1).strip()


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("page", sorted(PATHS))
def test_each_page_renders_translated_with_its_alternates(client, language, page):
    path = PATHS[page].format(language=language)
    response = client.get(path)
    assert response.status_code == 200
    html = response.content.decode()
    assert h1(html) == HEADINGS[page][language]
    assert f'<html lang="{language}">' in html
    assert head_links(html) == {
        **{code: "http://testserver" + PATHS[page].format(language=code) for code in LANGUAGES},
        "x-default": "http://testserver" + PATHS[page].format(language="en"),
    }
    assert f'<link rel="canonical" href="http://testserver{path}">' in html


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_reference_links_the_document_the_tokens_and_the_quickstart(client, language):
    html = client.get(f"/{language}/api/").content.decode()
    assert 'href="/api/v1/openapi.json"' in html
    assert f'href="/{language}/account/api-tokens/"' in html
    assert f'href="/{language}/api/quickstart/"' in html
    assert "<code>http://testserver/api/v1</code>" in html
    assert "<noscript>" in html
    assert re.search(r'<script src="/static/ninja/swagger-ui-bundle\.js[^"]*" defer>', html)
    assert re.search(r'<script src="/static/js/api-reference\.js[^"]*" defer>', html)
    assert 'id="swagger-ui" data-openapi-url="/api/v1/openapi.json"' in html


def test_the_quickstart_shows_curl_and_everx_on_the_sites_address(client, settings):
    settings.SITE_URL = "https://gpus.example"
    html = client.get("/en/api/quickstart/").content.decode()
    for command in (
        "curl https://gpus.example/api/v1/markets", "everx login", "everx markets",
        "curl -X POST https://gpus.example/api/v1/bids", "Idempotency-Key:", '"time_in_force": "buy_now"',
        "everx buy h100-sxm --gpus 1 --hours 1 --max-price 2.90 --ssh-key ~/.ssh/id_ed25519.pub",
        "everx rental ID", "https://gpus.example/api/v1/rentals/ID/stop", "everx stop ID",
        "Accept-Language: fr",
    ):
        assert command in html, command
    assert "120 requests a minute, of which 30" in html


def test_the_french_pages_follow_french_typography(client):
    html = client.get("/fr/api/quickstart/").content.decode()
    assert "une fois\u00a0: gardez-le" in html
    assert "«\u00a0acheter maintenant\u00a0»" in html
    assert " :" not in re.sub(r"<pre.*?</pre>", "", html, flags=re.S)


@pytest.mark.parametrize("path", ["/en/api/", "/pt/api/quickstart/", "/en/", "/en/market-rules/"])
def test_every_page_keeps_the_strict_policy(client, gpu_catalog, path):
    policy = client.get(path)["Content-Security-Policy"]
    assert STRICT_STYLES in policy + ";"
    assert "script-src 'self';" in policy + ";"
    assert "unsafe" not in policy


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_footer_links_the_api_pages(client, gpu_catalog, language):
    html = client.get(f"/{language}/").content.decode()
    footer = re.search(r'<footer class="site-footer">.*?</footer>', html, re.S).group(0)
    assert f'href="/{language}/api/"' in footer and f'href="/{language}/api/quickstart/"' in footer


@pytest.mark.django_db
def test_the_sitemap_lists_the_api_pages(client):
    xml = client.get("/sitemap.xml").content.decode()
    for language in LANGUAGES:
        assert f"<loc>http://testserver/{language}/api/</loc>" in xml
        assert f"<loc>http://testserver/{language}/api/quickstart/</loc>" in xml
