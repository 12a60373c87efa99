"""The site's addresses: each resolves to its own view, whatever the order of the includes (the
public pages come first in marketplace/urls.py, since Django tries the patterns in order)."""

import re

from django.urls import get_resolver, resolve
from django.urls.resolvers import URLPattern, URLResolver
from django.utils import translation

SAMPLES = {"int": "7", "slug": "a-slug", "str": "x", "path": "x/y",
           "uuid": "12345678-1234-5678-1234-567812345678", "statement_month": "2026-11"}
CONVERTER = re.compile(r"<(?:(\w+):)?\w+>")


def _routes(resolver: URLResolver, prefix: str = ""):
    """(address, the pattern's full route) of every plain pattern below `resolver`."""
    for entry in resolver.url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _routes(entry, route)
        elif isinstance(entry, URLPattern) and "^" not in route and "(?" not in route:  # not a regex
            address = CONVERTER.sub(lambda found: SAMPLES[found.group(1) or "str"], route)
            yield "/" + address, route


def test_every_address_of_the_site_resolves_to_its_own_pattern():
    with translation.override("en"):
        routes = [(address, route) for address, route in _routes(get_resolver()) if "api/v1/" not in route]
        assert len(routes) > 50
        for address, route in routes:
            found = resolve(address)
            assert found.route in (route, route.removeprefix("en/")), (address, found.route, route)
