"""The packages' strings our catalogs complete (marketplace/package_msgids.py, the hand-kept
locale/pt/LC_MESSAGES/djangojs.po): shown in Portuguese, and each still needed."""

import ast
import gettext as gettext_module
from pathlib import Path

import django
import pytest
from babel.messages.pofile import read_po
from django.conf import settings
from django.test import Client
from django.utils import translation

from tests.admin_support import operator_client

DJANGO = Path(django.__file__).resolve().parent
ROOT = Path(settings.BASE_DIR)
MARKERS = {"gettext_noop", "ngettext_lazy", "pgettext_lazy"}


def django_catalog(domain: str, *apps: str) -> dict:
    found = {}
    for app in apps:
        with (DJANGO / app / "locale" / "pt" / "LC_MESSAGES" / f"{domain}.mo").open("rb") as handle:
            found.update(gettext_module.GNUTranslations(handle)._catalog)
    return found


def django_translation(catalog: dict, context: str | None, msgid: str) -> str | None:
    key = f"{context}\x04{msgid}" if context else msgid
    return catalog.get(key) or catalog.get((key, 1))


def marked_msgids() -> list[tuple[str, str]]:
    """(context, msgid) of every string the module marks, read from its source as makemessages does."""
    tree = ast.parse((ROOT / "marketplace" / "package_msgids.py").read_text(encoding="utf-8"))
    marked = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in MARKERS:
            texts = [argument.value for argument in node.args if isinstance(argument, ast.Constant)]
            marked.append((texts[0], texts[1]) if node.func.id == "pgettext_lazy" else ("", texts[0]))
    return marked


def test_the_module_marks_strings():
    assert ("", "View %s") in marked_msgids()
    assert ("abbrev. month", "Jan.") in marked_msgids()


def test_every_marked_string_reads_in_portuguese():
    with translation.override("pt"):
        for context, msgid in marked_msgids():
            shown = translation.pgettext(context, msgid) if context else translation.gettext(msgid)
            assert shown != msgid, msgid


def test_django_still_leaves_each_marked_string_in_english():
    """Once Django's own Portuguese has one of them, the module can drop it."""
    theirs = django_catalog("django", "conf", "contrib/admin", "contrib/auth")
    for context, msgid in marked_msgids():
        translated = django_translation(theirs, context, msgid)
        assert not translated or translated.strip() == msgid.strip(), msgid


def test_our_script_catalog_completes_the_admins_in_portuguese():
    with (ROOT / "locale" / "pt" / "LC_MESSAGES" / "djangojs.po").open("rb") as handle:
        ours = {(message.context, message.id) for message in read_po(handle) if message.id}
    theirs = django_catalog("djangojs", "contrib/admin")
    english_catalog = DJANGO / "contrib" / "admin" / "locale" / "en" / "LC_MESSAGES" / "djangojs.po"
    with english_catalog.open("rb") as handle:
        english = [message for message in read_po(handle) if message.id]
    for message in english:
        msgid = message.id if isinstance(message.id, str) else message.id[0]
        translated = django_translation(theirs, message.context, msgid)
        if not translated or translated == msgid:
            assert (message.context, message.id) in ours, f"{msgid!r} is left in English"


@pytest.mark.django_db
def test_the_admins_scripts_say_click_to_clear_in_portuguese():
    client = Client()
    operator_client(client)
    response = client.get("/pt/admin/jsi18n/")
    assert "(clique para limpar)" in response.content.decode()
