"""Template filters over marketplace.formatting, for the active language."""

from django import template

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
