"""What several apps' views share."""

from urllib.parse import urlsplit

from django.urls import Resolver404, resolve
from django.utils.http import url_has_allowed_host_and_scheme


def own_path(request, value) -> str | None:
    """`value` when it is a path of this site (one of its pages, no other host or scheme), else
    None: what a `next` may send someone to."""
    if not isinstance(value, str) or not value.startswith("/") or value.startswith(("//", "/\\")):
        return None
    if any(ord(char) < 32 or char == "\\" for char in value):
        return None
    if not url_has_allowed_host_and_scheme(value, allowed_hosts={request.get_host()},
                                           require_https=request.is_secure()):
        return None
    try:
        resolve(urlsplit(value).path)
    except Resolver404:
        return None
    return value
