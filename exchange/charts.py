"""Inline SVG charts drawn on the server: no chart library, nothing fetched from elsewhere. The
price history of a GPU model (public pages) and a seller's utilisation (the seller portal)."""

from datetime import datetime, timedelta
from decimal import Decimal

from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _

from marketplace import formatting

WIDTH, HEIGHT = 720, 220
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 12, 28


def _y(price: Decimal, low: Decimal, high: Decimal) -> float:
    span = high - low or Decimal(1)
    return TOP + float((high - price) / span) * (HEIGHT - TOP - BOTTOM)


def price_history_svg(points, *, start: datetime, end: datetime) -> SafeString:
    """Hourly low-high bars with the last price as a dot, between `start` and `end`.
    `points` have `hour`, `low`, `high` and `last`."""
    if not points:
        return mark_safe("")  # noqa: S308 - nothing to draw
    low = min(point.low for point in points)
    high = max(point.high for point in points)
    pad = (high - low) * Decimal("0.1") or Decimal("0.05")
    low, high = max(Decimal(0), low - pad), high + pad
    seconds = (end - start).total_seconds() or 1
    plot_width = WIDTH - LEFT - RIGHT

    def x(moment: datetime) -> float:
        return LEFT + (moment - start).total_seconds() / seconds * plot_width

    marks = []
    bar = max(1.5, plot_width / (seconds / 3600) * 0.8)
    for point in points:
        centre = x(point.hour + timedelta(minutes=30))
        marks.append(
            f'<line class="bar" x1="{centre:.1f}" x2="{centre:.1f}" '
            f'y1="{_y(point.high, low, high):.1f}" y2="{_y(point.low, low, high):.1f}" '
            f'stroke-width="{bar:.1f}"/>'
            f'<circle class="last" cx="{centre:.1f}" cy="{_y(point.last, low, high):.1f}" r="2.2"/>'
        )
    axis = (
        f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{HEIGHT - BOTTOM}" y2="{HEIGHT - BOTTOM}"/>'
        f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{HEIGHT - BOTTOM}"/>'
        f'<text x="{LEFT - 6}" y="{TOP + 10}" text-anchor="end">{escape(formatting.usd(high))}</text>'
        f'<text x="{LEFT - 6}" y="{HEIGHT - BOTTOM}" text-anchor="end">{escape(formatting.usd(low))}</text>'
        f'<text x="{LEFT}" y="{HEIGHT - 8}">{escape(date_format(start, "SHORT_DATE_FORMAT"))}</text>'
        f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - 8}" text-anchor="end">'
        f'{escape(date_format(end, "SHORT_DATE_FORMAT"))}</text>'
    )
    label = _("Hourly trade prices from %(start)s to %(end)s: lowest %(low)s, highest %(high)s.") % {
        "start": date_format(start, "SHORT_DATE_FORMAT"), "end": date_format(end, "SHORT_DATE_FORMAT"),
        "low": formatting.usd(min(p.low for p in points)),
        "high": formatting.usd(max(p.high for p in points)),
    }
    svg = (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(label)}" '
        f'xmlns="http://www.w3.org/2000/svg">{axis}{"".join(marks)}</svg>'
    )
    return mark_safe(svg)  # noqa: S308 - built from numbers and escaped text only


# --- a seller's utilisation (exchange.selectors.seller_utilisation) ---------------------------------


def _percent(share: float) -> str:
    return formatting.percent(round(share * 100))


def _last_day(utilisation) -> str:
    """Today, in the current time zone: the day of the last hour drawn."""
    return date_format(timezone.localtime(utilisation.end - timedelta(seconds=1)), "SHORT_DATE_FORMAT")


def utilisation_summary(utilisation) -> str:
    return _(
        "Share of your GPUs rented each hour from %(start)s to %(end)s: on average %(average)s, "
        "at most %(peak)s."
    ) % {
        "start": date_format(timezone.localtime(utilisation.start), "SHORT_DATE_FORMAT"),
        "end": _last_day(utilisation),
        "average": _percent(utilisation.average), "peak": _percent(utilisation.peak),
    }


def utilisation_svg(utilisation) -> SafeString:
    """One bar per hour, its height the share of the GPUs rented (0 to 100 %), across the seven
    days to midnight after today (the hours still to come are left blank)."""
    plot_width, plot_height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_width / ((utilisation.days_end - utilisation.start).total_seconds() / 3600)
    bars = []
    for index, share in enumerate(utilisation.shares):
        if share <= 0:
            continue
        height = share * plot_height
        bars.append(
            f'<rect class="bar" x="{LEFT + index * step:.1f}" y="{TOP + plot_height - height:.1f}" '
            f'width="{max(step, 1.0):.2f}" height="{height:.1f}"/>'
        )
    axis = (
        f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{HEIGHT - BOTTOM}" y2="{HEIGHT - BOTTOM}"/>'
        f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{HEIGHT - BOTTOM}"/>'
        f'<text x="{LEFT - 6}" y="{TOP + 10}" text-anchor="end">{escape(_percent(1))}</text>'
        f'<text x="{LEFT - 6}" y="{HEIGHT - BOTTOM}" text-anchor="end">{escape(_percent(0))}</text>'
        f'<text x="{LEFT}" y="{HEIGHT - 8}">'
        f'{escape(date_format(timezone.localtime(utilisation.start), "SHORT_DATE_FORMAT"))}</text>'
        f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - 8}" text-anchor="end">'
        f'{escape(_last_day(utilisation))}</text>'
    )
    svg = (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(utilisation_summary(utilisation))}" '
        f'xmlns="http://www.w3.org/2000/svg">{axis}{"".join(bars)}</svg>'
    )
    return mark_safe(svg)  # noqa: S308 - built from numbers and escaped text only


def utilisation_by_day(utilisation) -> list[tuple]:
    """(day, average share) for the accessible table beside the chart: the seven days in the current
    time zone, today's average over its hours so far."""
    by_day: dict = {}
    for index, share in enumerate(utilisation.shares):
        day = timezone.localtime(utilisation.start + timedelta(hours=index)).date()
        by_day.setdefault(day, []).append(share)
    return [(day, _percent(sum(shares) / len(shares))) for day, shares in by_day.items()]
