"""Calendar months in UTC (the site's time zone), the unit of statements and of a seller's
earnings: bounds, how a month is written in addresses and shown to people."""

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime

from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext_lazy as _

# One sentence per month, because languages bend the article before a month's name: French
# writes "Relevé d'octobre" and "Relevé de mai", which no "Statement for %(month)s" can give.
STATEMENT_TITLES = {
    1: _("Statement for January %(year)s"), 2: _("Statement for February %(year)s"),
    3: _("Statement for March %(year)s"), 4: _("Statement for April %(year)s"),
    5: _("Statement for May %(year)s"), 6: _("Statement for June %(year)s"),
    7: _("Statement for July %(year)s"), 8: _("Statement for August %(year)s"),
    9: _("Statement for September %(year)s"), 10: _("Statement for October %(year)s"),
    11: _("Statement for November %(year)s"), 12: _("Statement for December %(year)s"),
}


def month_of(moment: datetime) -> date:
    """The first day of the UTC month of an aware datetime."""
    moment = moment.astimezone(UTC)
    return date(moment.year, moment.month, 1)


def month_previous(month: date) -> date:
    return date(month.year - 1, 12, 1) if month.month == 1 else date(month.year, month.month - 1, 1)


def month_next(month: date) -> date:
    return date(month.year + 1, 1, 1) if month.month == 12 else date(month.year, month.month + 1, 1)


def month_bounds(month: date) -> tuple[datetime, datetime]:
    """[first instant of the month, first instant of the next month), in UTC."""
    following = month_next(month)
    return (
        datetime(month.year, month.month, 1, tzinfo=UTC),
        datetime(following.year, following.month, 1, tzinfo=UTC),
    )


def month_slug(month: date) -> str:
    """"2026-12": how a month is written in statement addresses."""
    return f"{month.year:04d}-{month.month:02d}"


def month_parse(text: str) -> date:
    """The month written "YYYY-MM"; ValueError for anything else ("2026-13", "2026-1", "abcd-ef")."""
    if not re.fullmatch(r"[0-9]{4}-[0-9]{2}", text or ""):
        raise ValueError(f"Not a month: {text!r}.")
    year, month = (int(part) for part in text.split("-"))
    if year < 2000:
        raise ValueError(f"Not a month of this exchange: {text!r}.")
    return date(year, month, 1)


def month_label(month: date) -> str:
    """"December 2026", "décembre 2026", "dezembro de 2026": the active language's month and year."""
    return date_format(month, "YEAR_MONTH_FORMAT")


def statement_title(month: date) -> str:
    """"Statement for December 2026", "Relevé d'octobre 2026", "Extrato de dezembro de 2026"."""
    return str(STATEMENT_TITLES[month.month]) % {"year": month.year}


@dataclass(frozen=True)
class StatementMonth:
    month: date
    slug: str
    label: str
    title: str

    @classmethod
    def of(cls, month: date) -> "StatementMonth":
        return cls(
            month=month, slug=month_slug(month), label=month_label(month), title=statement_title(month)
        )


def statement_months_since(*, first: datetime, now: datetime | None = None) -> list[StatementMonth]:
    """Every month (UTC) from the one of `first` (an account's creation) to the current one,
    newest first: none that began before the account existed."""
    month, oldest = month_of(now or timezone.now()), month_of(first)
    months = []
    while month >= oldest:
        months.append(StatementMonth.of(month))
        month = month_previous(month)
    return months
