"""Every email EverXCloud sends goes through `email_send`.

It resolves the recipient's language once (their profile's, else the given one, else the
site's default), renders `<template>_subject.txt`, `<template>_message.txt` and, where it
exists, `<template>_message.html` in that language, and sends when the current database
transaction commits (at once outside one). Plain-text templates are rendered without HTML
escaping, so a subject or a body never shows `&amp;` or `&#x27;`.

This module is the bottom layer: it knows a user only as an object with `email` and, maybe, a
`profile` with `preferred_language`, and never imports an app above it.
"""

import re
from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMultiAlternatives
from django.db import transaction
from django.template import Context, TemplateDoesNotExist
from django.template.loader import get_template
from django.utils import translation

SITE_NAME = "EverXCloud"
_LAYOUT_SPACE = re.compile(r"[ \t\r\n]+")

# What the templates may name without each caller passing it.
Ctx = Mapping[str, Any] | Callable[[], Mapping[str, Any]]


def absolute_url(path: str) -> str:
    """A link for an email: the site's address in front of `path` when the site has one."""
    return settings.SITE_URL + path if settings.SITE_URL else path


def email_language(*, user: Any = None, email: str = "", fallback: str = "") -> str:
    """The language a recipient reads: their profile's; for an address with no user behind
    it, `fallback`; else the site's default."""
    if user is None and email:
        user = get_user_model().objects.filter(email__iexact=email).select_related("profile").first()
    profile = getattr(user, "profile", None) if user is not None else None
    language = getattr(profile, "preferred_language", "") or fallback or settings.LANGUAGE_CODE
    return language if language in dict(settings.LANGUAGES) else settings.LANGUAGE_CODE


def _render(name: str, context: Mapping[str, Any], *, autoescape: bool) -> str:
    template = get_template(name)
    # The Django backend's template takes a Context, whose autoescape we set per kind of file.
    return template.template.render(Context(dict(context), autoescape=autoescape))


def email_render(*, template: str, context: Mapping[str, Any]) -> tuple[str, str, str]:
    """Subject (one line), plain-text body and HTML body ("" when the template has none), in
    the language active now. A `subject_prefix` in the context goes before the subject (allauth's
    templates leave the brand to a prefix)."""
    values = {"site_name": SITE_NAME, "site_url": settings.SITE_URL, **context}
    # The template's line breaks and indentation become single spaces; a no-break space stays
    # (French writes "EverXCloud : ..." with one), which str.split() would have broken.
    subject = _render(f"{template}_subject.txt", values, autoescape=False)
    subject = _LAYOUT_SPACE.sub(" ", subject).strip()
    subject = values.get("subject_prefix", "") + subject
    body = _render(f"{template}_message.txt", values, autoescape=False).strip() + "\n"
    try:
        html = _render(f"{template}_message.html", values, autoescape=True)
    except TemplateDoesNotExist:
        html = ""
    return subject, body, html


def email_send(*, template: str, context: Ctx, user: Any = None, email: str = "", language: str = "") -> None:
    """Send one email to `user` (or to `email`, an address that may have no account yet).

    `context` is a mapping, or a function returning one, called in the recipient's language
    (for links and amounts that must be written in it). `language` is used only where the
    recipient has no profile saying otherwise.
    """
    recipient = email or user.email
    language = email_language(user=user, email="" if user is not None else recipient, fallback=language)
    with translation.override(language):
        values = context() if callable(context) else context
        subject, body, html = email_render(template=template, context=values)
    message = EmailMultiAlternatives(subject, body, None, [recipient])
    if html:
        message.attach_alternative(html, "text/html")
    transaction.on_commit(message.send)
