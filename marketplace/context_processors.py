"""What the base layout needs on every page: language alternates and the canonical address."""

from django.conf import settings
from django.urls import NoReverseMatch, Resolver404, ResolverMatch, resolve, reverse
from django.utils import translation


def _absolute(request, path: str) -> str:
    if settings.SITE_URL:
        return settings.SITE_URL + path
    return request.build_absolute_uri(path)


def _route(request) -> ResolverMatch | None:
    if request.resolver_match is not None:
        return request.resolver_match
    try:
        return resolve(request.path_info)
    except Resolver404:
        return None


def _path_in(match: ResolverMatch | None, language: str) -> str:
    """The page's address in `language`, reversed from its route; that language's home page when the
    request matched no route (a 404) or one that cannot be reversed. Never the path as typed:
    `/%5Cevil.example/` would become `href="/\\evil.example/"`, which a browser opens as another site."""
    with translation.override(language):
        if match is not None and match.url_name:
            try:
                return reverse(match.view_name, args=match.args, kwargs=match.kwargs)
            except NoReverseMatch:
                pass
        return reverse("catalog:home")


def site(request) -> dict:
    current = translation.get_language()
    match = _route(request)
    paths = {code: _path_in(match, code) for code, _name in settings.LANGUAGES}
    alternates = [
        {
            "code": code,
            "name": settings.LANGUAGE_NATIVE_NAMES[code],
            "path": path,
            "url": _absolute(request, path),
            "current": code == current,
        }
        for code, path in paths.items()
    ]
    return {
        "alternates": alternates,
        "canonical_url": _absolute(request, paths.get(current, paths[settings.LANGUAGE_CODE])),
        "x_default_url": _absolute(request, paths[settings.LANGUAGE_CODE]),
    }
