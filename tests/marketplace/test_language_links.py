"""The language switcher, hreflang alternates and canonical link come from the route a request
resolved to, never from the path as typed: on a page that matched no route they lead to each
language's home page."""

import re

import pytest

pytestmark = pytest.mark.django_db

HOMES = {"en": "/en/", "pt": "/pt/", "fr": "/fr/"}
HOSTILE_PATHS = [
    "/\\evil.example/",
    "/en/\\evil.example/",
    "/fr/\\\\evil.example",
    "//evil.example/",
    "/en//evil.example/",
    "/pt///evil.example/x",
    "/\\/evil.example/",
    "/\t/evil.example/",
    "/fr/\t\\evil.example/",
    "/https:/evil.example/",
    "/en/https://evil.example/",
    "/fr/gpus/\\evil.example/",
    "/en/trade/../../evil.example/",
    "/en/%2F%2Fevil.example/",
    "/pt/\u202eelpmaxe.live/",
    "/fr/\u00e9v\u00efl/",
    "/en/" + "a" * 3000 + "/",
]
IDS = [repr(path)[:40] for path in HOSTILE_PATHS]


def page_links(html: str) -> list[str]:
    """Every address the page links to or loads."""
    return re.findall(r'(?:href|src|action)="([^"]*)"', html)


def switcher(html: str) -> dict[str, str]:
    nav = re.search(r'<nav class="language-switcher".*?</nav>', html, re.S).group(0)
    return {lang: href for href, lang in re.findall(r'<a href="([^"]*)" hreflang="([^"]+)"', nav)}


def head_links(html: str) -> dict[str, str]:
    found = dict(re.findall(r'<link rel="alternate" hreflang="([^"]+)" href="([^"]+)">', html))
    found["canonical"] = re.search(r'<link rel="canonical" href="([^"]+)">', html).group(1)
    return found


def get(client, path: str):
    # PATH_INFO as given (UTF-8 bytes as WSGI carries them): the test client would read
    # "//evil.example/" as a host and drop it.
    return client.get(path, PATH_INFO=path.encode().decode("iso-8859-1"))


@pytest.mark.parametrize("path", HOSTILE_PATHS, ids=IDS)
def test_a_page_that_matched_no_route_links_to_the_home_pages(client, path):
    response = get(client, path)
    assert response.status_code == 404
    html = response.content.decode()
    assert switcher(html) == HOMES
    language = next((code for code in HOMES if path.startswith(f"/{code}/")), "en")
    assert head_links(html) == {
        "en": "http://testserver/en/", "pt": "http://testserver/pt/", "fr": "http://testserver/fr/",
        "x-default": "http://testserver/en/", "canonical": f"http://testserver/{language}/",
    }
    assert [link for link in page_links(html) if not ours(link)] == []


def ours(link: str) -> bool:
    """A path of this site, or an address on it: no backslash, no second slash, no other scheme."""
    path = link.removeprefix("http://testserver")
    return link == "#content" or (
        re.fullmatch(r"/(en/|pt/|fr/|static/|favicon\.ico)[^\\\s]*", path) is not None and "//" not in path
    )


def test_a_route_that_answers_404_itself_keeps_the_page_in_each_language(client, gpu_catalog):
    response = client.get("/fr/gpus/no-such-gpu/")
    assert response.status_code == 404
    assert switcher(response.content.decode()) == {
        "en": "/en/gpus/no-such-gpu/", "pt": "/pt/gpus/no-such-gpu/", "fr": "/fr/gpus/no-such-gpu/",
    }


def test_a_resolved_page_links_to_its_route_in_each_language(client, gpu_catalog):
    html = client.get("/pt/gpus/h200/", {"sort": "<x>"}).content.decode()
    assert switcher(html) == {code: f"/{code}/gpus/h200/?sort=%3Cx%3E" for code in HOMES}
    assert head_links(html)["canonical"] == "http://testserver/pt/gpus/h200/"


def test_a_site_address_from_settings_prefixes_the_home_pages(client, settings):
    settings.SITE_URL = "https://everxcloud.example"
    html = get(client, "/\\evil.example/").content.decode()
    assert head_links(html)["x-default"] == "https://everxcloud.example/en/"
