"""Strings of Django's catalogs that its Portuguese catalog (`pt`, Django 5.2) leaves in English,
among those the site can show: its admin, the password forms and validators, the model fields'
validation errors, the CSRF failure page. Marked here so that `makemessages` puts them in our
catalog, which wins over Django's; nothing imports this module. Django's French catalog has them.

tests/marketplace/test_package_msgids.py fails when a Django upgrade leaves another of these
untranslated in Portuguese, or translates one of them (this module can then lose it).
"""

from django.utils.translation import gettext_noop, ngettext_lazy, pgettext_lazy

ADMIN = (
    gettext_noop("View %s"),
    gettext_noop("Error:"),
    gettext_noop("Forgotten your login credentials?"),
    gettext_noop("In case you’ve forgotten, you are:"),
)

PASSWORDS = (
    gettext_noop("Raw passwords are not stored, so there is no way to see the user’s password."),
    ngettext_lazy(
        "This password is too short. It must contain at least %d character.",
        "This password is too short. It must contain at least %d characters.",
        "count",
    ),
)

VALIDATION = (
    gettext_noop("Enter a valid “slug” consisting of letters, numbers, underscores or hyphens."),
    gettext_noop("Enter a valid “slug” consisting of Unicode letters, numbers, underscores, or hyphens."),
    gettext_noop("Ensure this value is a multiple of step size %(limit_value)s."),
    gettext_noop(
        "Ensure this value is a multiple of step size %(limit_value)s, starting from %(offset)s, e.g. "
        "%(offset)s, %(valid_value1)s, %(valid_value2)s, and so on."
    ),
    gettext_noop("Constraint “%(name)s” is violated."),
    gettext_noop("“%(value)s” value must be a decimal number."),
    gettext_noop("“%(value)s” value must be a float."),
    gettext_noop("“%(value)s” value must be an integer."),
    gettext_noop("“%(value)s” value must be either None, True or False."),
    gettext_noop("“%(value)s” value has an invalid format. It must be in [DD] [[HH:]MM:]ss[.uuuuuu] format."),
    gettext_noop("“%(value)s” value has an invalid format. It must be in HH:MM[:ss[.uuuuuu]] format."),
    gettext_noop("“%(value)s” value has the correct format (HH:MM[:ss[.uuuuuu]]) but it is an invalid time."),
    gettext_noop("“%(value)s” is not a valid UUID."),
    gettext_noop("%(model)s instance with %(field)s %(value)r is not a valid choice."),
    gettext_noop("“%(pk)s” is not a valid value."),
    gettext_noop(
        "%(datetime)s couldn’t be interpreted in time zone %(current_timezone)s; it may be ambiguous or it "
        "may not exist."
    ),
    gettext_noop(
        "ManagementForm data is missing or has been tampered with. Missing fields: %(field_names)s. You may "
        "need to file a bug report if the issue persists."
    ),
    ngettext_lazy("Please submit at most %(num)d form.", "Please submit at most %(num)d forms.", "num"),
    ngettext_lazy("Please submit at least %(num)d form.", "Please submit at least %(num)d forms.", "num"),
)

CSRF_FAILURE = (
    gettext_noop(
        "You are seeing this message because this HTTPS site requires a “Referer header” to be sent by your "
        "web browser, but none was sent. This header is required for security reasons, to ensure that your "
        "browser is not being hijacked by third parties."
    ),
    gettext_noop(
        "If you have configured your browser to disable “Referer” headers, please re-enable them, at least "
        "for this site, or for HTTPS connections, or for “same-origin” requests."
    ),
    gettext_noop(
        "If you have configured your browser to disable cookies, please re-enable them, at least for this "
        "site, or for “same-origin” requests."
    ),
)

DATES = (
    pgettext_lazy("abbrev. month", "Jan."),
    pgettext_lazy("abbrev. month", "Nov."),
)
