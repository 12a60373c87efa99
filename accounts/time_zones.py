"""The time zones a profile may choose: the IANA names of the zone database, and the zone proposed
when the browser says nothing usable."""

import functools
import zoneinfo

from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

# Without a zone from the browser: the usual zone of the page's language.
LANGUAGE_ZONES = {"pt": "Europe/Lisbon", "fr": "Europe/Paris"}


@functools.cache
def time_zone_names() -> tuple[str, ...]:
    """Every canonical-looking IANA zone (Area/Location, plus UTC), sorted."""
    names = {
        name for name in zoneinfo.available_timezones()
        if "/" in name and not name.startswith(("Etc/", "SystemV/", "US/", "posix/", "right/"))
    }
    return ("UTC", *sorted(names))


def time_zone_is_known(name: object) -> bool:
    return isinstance(name, str) and name in time_zone_names()


def time_zone_validate(value: str) -> None:
    if not time_zone_is_known(value):
        raise ValidationError(_("Choose a time zone from the list."), code="time_zone_unknown")


def time_zone_proposed(*, browser: object, language: str | None) -> str:
    """The browser's zone when it is one we know, else the language's usual zone, else UTC."""
    if time_zone_is_known(browser):
        return browser
    return LANGUAGE_ZONES.get((language or "").split("-")[0], "UTC")
