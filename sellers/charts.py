"""The seller portal's inline SVG chart, drawn on the server like exchange/charts.py."""

from datetime import timedelta

from django.utils.formats import date_format
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _

from exchange.charts import BOTTOM, HEIGHT, LEFT, RIGHT, TOP, WIDTH
from marketplace import formatting


def _percent(share: float) -> str:
    return formatting.percent(round(share * 100))


def utilisation_summary(utilisation) -> str:
    return _(
        "Share of your GPUs rented each hour from %(start)s to %(end)s: on average %(average)s, "
        "at most %(peak)s."
    ) % {
        "start": date_format(utilisation.start, "SHORT_DATE_FORMAT"),
        "end": date_format(utilisation.end, "SHORT_DATE_FORMAT"),
        "average": _percent(utilisation.average), "peak": _percent(utilisation.peak),
    }


def utilisation_svg(utilisation) -> SafeString:
    """One bar per hour, its height the share of the GPUs rented (0 to 100 %)."""
    plot_width, plot_height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_width / len(utilisation.shares)
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
        f'{escape(date_format(utilisation.start, "SHORT_DATE_FORMAT"))}</text>'
        f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - 8}" text-anchor="end">'
        f'{escape(date_format(utilisation.end - timedelta(seconds=1), "SHORT_DATE_FORMAT"))}</text>'
    )
    svg = (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(utilisation_summary(utilisation))}" '
        f'xmlns="http://www.w3.org/2000/svg">{axis}{"".join(bars)}</svg>'
    )
    return mark_safe(svg)  # noqa: S308 - built from numbers and escaped text only


def utilisation_by_day(utilisation) -> list[tuple]:
    """(day, average share) for the accessible table beside the chart."""
    days = []
    for day in range(len(utilisation.shares) // 24):
        shares = utilisation.shares[day * 24:(day + 1) * 24]
        days.append((utilisation.start + timedelta(days=day), _percent(sum(shares) / 24)))
    return days
