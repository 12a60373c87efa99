"""Times as the protocol writes them: RFC 3339, UTC, with a Z (Python 3.9's `fromisoformat`
reads neither the Z nor every number of fractional digits, hence the small parser)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|z|[+-]\d{2}:\d{2})"
)


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def rfc3339_format(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_parse(text: object) -> datetime | None:
    """The moment, or None for anything that is not an RFC 3339 date-time."""
    if not isinstance(text, str):
        return None
    found = RFC3339.fullmatch(text.strip())
    if not found:
        return None
    year, month, day, hour, minute, second, fraction, offset = found.groups()
    try:
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                          int((fraction or "0").ljust(6, "0")[:6]), tzinfo=timezone.utc)
    except ValueError:
        return None
    if offset not in ("Z", "z"):
        sign = 1 if offset[0] == "+" else -1
        moment -= sign * timedelta(hours=int(offset[1:3]), minutes=int(offset[4:6]))
    return moment
