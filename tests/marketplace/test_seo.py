import re

import pytest
from defusedxml import ElementTree as ET

from catalog.workloads import WORKLOADS

pytestmark = pytest.mark.django_db


def head_links(html: str) -> dict[str, str]:
    return dict(re.findall(r'<link rel="alternate" hreflang="([^"]+)" href="([^"]+)">', html))


def test_alternates_canonical_and_x_default(client, gpu_catalog):
    html = client.get("/pt/gpus/h200/").content.decode()
    assert head_links(html) == {
        "en": "http://testserver/en/gpus/h200/",
        "pt": "http://testserver/pt/gpus/h200/",
        "fr": "http://testserver/fr/gpus/h200/",
        "x-default": "http://testserver/en/gpus/h200/",
    }
    assert '<link rel="canonical" href="http://testserver/pt/gpus/h200/">' in html


def test_switcher_keeps_the_visitor_on_the_same_page(client, gpu_catalog):
    html = client.get("/fr/workloads/inference/").content.decode()
    switcher = re.search(r'<nav class="language-switcher".*?</nav>', html, re.S).group(0)
    assert 'href="/en/workloads/inference/"' in switcher
    assert 'href="/pt/workloads/inference/"' in switcher
    assert 'href="/fr/workloads/inference/" hreflang="fr" lang="fr" aria-current="true"' in switcher


def test_switcher_keeps_the_query_string(client, gpu_catalog):
    html = client.get("/en/gpus/", {"sort": "price"}).content.decode()
    assert 'href="/fr/gpus/?sort=price"' in html


@pytest.mark.parametrize(
    ("accept", "target"),
    [("fr-FR,fr;q=0.9,en;q=0.5", "/fr/"), ("pt-PT,pt;q=0.9", "/pt/"), ("pt-BR", "/pt/"),
     ("de-DE,de;q=0.9", "/en/"), ("", "/en/")],
)
def test_root_redirects_by_accept_language(client, accept, target):
    response = client.get("/", HTTP_ACCEPT_LANGUAGE=accept)
    assert response.status_code == 302
    assert response["Location"] == target


def test_sitemap_lists_every_public_page_in_every_language(client, gpu_catalog):
    response = client.get("/sitemap.xml")
    assert response.status_code == 200
    ns = {"s": "http://www.sitemaps.org/schemas/sitemap/0.9", "x": "http://www.w3.org/1999/xhtml"}
    root = ET.fromstring(response.content)
    locations = [url.find("s:loc", ns).text for url in root.findall("s:url", ns)]
    pages = 9 + len(WORKLOADS) + 2 * len(gpu_catalog)  # with the fit calculator
    assert len(locations) == pages * 3
    for language in ("en", "pt", "fr"):
        assert f"http://testserver/{language}/workloads/fine-tuning/" in locations
        assert f"http://testserver/{language}/gpus/h200/" in locations
    first = root.find("s:url", ns)
    hreflangs = {link.get("hreflang") for link in first.findall("x:link", ns)}
    assert hreflangs == {"en", "pt", "fr", "x-default"}


def test_robots_points_to_the_sitemap(client):
    body = client.get("/robots.txt").content.decode()
    assert "Sitemap: http://testserver/sitemap.xml" in body
    assert "Disallow: /en/admin/" in body
