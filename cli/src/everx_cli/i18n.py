"""The command line's own words in English, European Portuguese and French.

A dictionary of translations (`messages.py`) rather than gettext catalogs: the package has no
build step and nothing to compile. `t("English sentence {name}.", name=...)` answers in the
language chosen by `--lang`, else `EVERX_LANG`, else the system locale; the exchange's own
messages come translated by the server, asked for in the same language (`Accept-Language`).
"""

from __future__ import annotations

import os
from decimal import Decimal

from .messages import MESSAGES, VALUES

LANGUAGES = ("en", "pt", "fr")
DEFAULT_LANGUAGE = "en"
NBSP = "\u00a0"
NARROW_NBSP = "\u202f"
# Decimal mark and thousands separator of each language (CLDR: French groups with a narrow
# no-break space, Portuguese with a dot).
NUMBER_SYMBOLS = {"en": (".", ","), "pt": (",", "."), "fr": (",", NARROW_NBSP)}

_language = DEFAULT_LANGUAGE


def language_of(tag: str | None) -> str | None:
    """`fr_FR.UTF-8`, `pt-PT`, `FR`: the language we speak, or None."""
    if not tag:
        return None
    code = tag.replace("-", "_").split(".")[0].split("_")[0].strip().lower()
    return code if code in LANGUAGES else None


def language_detect(environ: dict[str, str] | None = None) -> str:
    """EVERX_LANG, then the locale variables in POSIX order of precedence."""
    environ = os.environ if environ is None else environ
    for name in ("EVERX_LANG", "LC_ALL", "LC_MESSAGES", "LANG"):
        value = environ.get(name)
        if value:
            # A set locale variable decides, even for a language we do not speak (C, de_DE).
            return language_of(value) or DEFAULT_LANGUAGE
    return DEFAULT_LANGUAGE


def language_set(language: str) -> None:
    global _language
    _language = language if language in LANGUAGES else DEFAULT_LANGUAGE


def language() -> str:
    return _language


def t(message: str, **values: object) -> str:
    """`message` in the current language, with `{name}` filled from `values`."""
    translated = MESSAGES.get(message, {}).get(_language, message) if _language != "en" else message
    return translated.format(**values) if values else translated


def value_label(kind: str, value: object) -> str:
    """A state or reason the API sends as a code (`running`, `buy_now`), in words."""
    labels = VALUES.get(kind, {}).get(str(value))
    if labels is None:
        return str(value)
    return labels.get(_language, labels["en"])


def number(value: Decimal | int | str) -> str:
    """A decimal as the language writes it, every digit the API sent kept: 1,234.50 / 1.234,50 /
    1 234,50."""
    text = format(value, "f") if isinstance(value, Decimal) else str(value)
    sign = "-" if text.startswith("-") else ""
    whole, _, fraction = text.lstrip("-").partition(".")
    mark, group = NUMBER_SYMBOLS[_language]
    groups = []
    while len(whole) > 3:
        whole, groups = whole[:-3], [whole[-3:], *groups]
    grouped = group.join([whole, *groups])
    return sign + grouped + (mark + fraction if fraction else "")
