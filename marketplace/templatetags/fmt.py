"""Template filters over marketplace.formatting, for the active language."""

import re

from django import template
from django.utils.safestring import SafeData, mark_safe
from django.utils.translation import gettext

from marketplace import formatting

register = template.Library()


@register.filter
def number(value):
    return formatting.number(value)


@register.filter
def usd(value):
    return formatting.usd(value)


@register.filter
def usd_fine(value):
    return formatting.money_fine(value, "USD")


@register.filter
def price_from(value):
    return formatting.price_from(value)


@register.filter
def gb(value):
    return formatting.gigabytes(value)


@register.filter
def bandwidth(value):
    return formatting.bandwidth(value)


@register.filter
def tflops(value):
    return formatting.tflops(value)


@register.filter
def params(value):
    return formatting.parameters(value)


@register.filter
def reliability(value):
    """A share from 0 to 1 as a percentage, "new" when None."""
    return formatting.reliability(value)


@register.filter
def money(value, currency):
    """`{{ amount|money:"EUR" }}`: an amount in the active language's notation."""
    return formatting.money(value, currency)


@register.filter
def share_percent(value):
    """A share from 0 to 1 as a percentage with one decimal at most: 0.987 -> `98.7%`."""
    return formatting.percent(value * 100)


@register.filter
def percent(value):
    """A figure in percent: 7 -> `7%`, `7 %` in French."""
    return formatting.percent(value)


@register.filter
def moment(value):
    """An aware time in the current time zone, with its abbreviation (empty for None)."""
    return formatting.moment(value) if value else ""


@register.filter
def datetime_zone(value):
    """A moment in the active time zone with its abbreviation: `3 Dec 2026, 14:05 WET`."""
    return formatting.datetime_zone(value)


@register.filter(expects_localtime=True)
def datetime_long(value):
    """Django's `date:"DATETIME_FORMAT"` in the current time zone, French writing `1er` for the
    first of a month."""
    return formatting.datetime_long(value) if value else ""


@register.filter
def day(value):
    """A day written out in the active language: `3 de dezembro de 2026`."""
    return formatting.day(value) if value else formatting.NO_FIGURE


# Django's admin writes each object to be deleted as `Name: <a href="…">object</a>` (or without
# the link) with an English colon glued to the name, in Python (admin.utils.get_deleted_objects).
_NAME_COLON = re.compile(r"^([^<:]+): ")


@register.filter
def name_colons(items):
    """The nested list of objects a delete page shows, each name followed by the language's colon
    (`Adresse e-mail : demo@…` in French, with a no-break space). Only the colon after the name is
    replaced: an item that was safe HTML stays safe, a plain one (no link) stays plain, for
    `unordered_list` to escape."""
    if isinstance(items, list | tuple):
        return [name_colons(item) for item in items]
    colon = gettext(":")
    text = _NAME_COLON.sub(lambda m: f"{m[1]}{colon} ", str(items), count=1)
    return mark_safe(text) if isinstance(items, SafeData) else text  # noqa: S308  (safe in, safe out)


_ORDINARY_SPACES = re.compile(r"[ \t\r\n]+")


@register.filter
def truncate_words(value, count):
    """Django's `truncatewords` that leaves no-break spaces alone: Django splits at every space,
    no-break ones included, and joins with ordinary ones, which breaks French `n° 1 : …` apart."""
    words = _ORDINARY_SPACES.split(str(value).strip())
    count = int(count)
    return " ".join(words) if len(words) <= count else " ".join(words[:count]) + "…"
