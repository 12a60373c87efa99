"""Calendar months in UTC (the site's time zone), the unit of statements and of a seller's
earnings: bounds, how a month is written in addresses and shown to people."""

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime

from django.utils import timezone
from django.utils.formats import date_format


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


@dataclass(frozen=True)
class StatementMonth:
    month: date
    slug: str
    label: str

    @classmethod
    def of(cls, month: date) -> "StatementMonth":
        return cls(month=month, slug=month_slug(month), label=month_label(month))


def statement_months_recent(*, now: datetime | None = None) -> list[StatementMonth]:
    """The current month and the one before (UTC), newest first."""
    current = month_of(now or timezone.now())
    return [StatementMonth.of(current), StatementMonth.of(month_previous(current))]
