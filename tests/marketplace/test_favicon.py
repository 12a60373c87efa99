"""`/favicon.ico`, which every browser asks for, is a real icon, and the base layout links it."""

import io

import pytest
from PIL import Image

pytestmark = pytest.mark.django_db


def test_favicon_ico_is_an_icon(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 200
    assert response["Content-Type"] == "image/vnd.microsoft.icon"
    icon = Image.open(io.BytesIO(b"".join(response.streaming_content)))
    assert icon.format == "ICO" and icon.size == (48, 48)
    assert {(16, 16), (32, 32)} <= icon.info["sizes"]


def test_every_page_links_the_icon_and_its_svg(client, gpu_catalog):
    for path in ("/fr/", "/pt/gpus/h200/", "/en/no-such-page/"):
        html = client.get(path).content.decode()
        assert '<link rel="icon" href="/favicon.ico" sizes="32x32">' in html
        assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in html
    svg = client.get("/static/favicon.svg")
    assert svg.status_code == 200 and b"<svg" in b"".join(svg.streaming_content)
