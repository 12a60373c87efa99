"""What the base layout needs on every page: language alternates and the canonical address."""

from django.conf import settings
from django.urls import translate_url
from django.utils import translation


def _absolute(request, path: str) -> str:
    if settings.SITE_URL:
        return settings.SITE_URL + path
    return request.build_absolute_uri(path)


def site(request) -> dict:
    current = translation.get_language()
    alternates = []
    for code, _name in settings.LANGUAGES:
        path = translate_url(request.path, code)
        alternates.append({
            "code": code,
            "name": settings.LANGUAGE_NATIVE_NAMES[code],
            "path": path,
            "url": _absolute(request, path),
            "current": code == current,
        })
    return {
        "alternates": alternates,
        "canonical_url": _absolute(request, request.path),
        "x_default_url": _absolute(request, translate_url(request.path, settings.LANGUAGE_CODE)),
    }
