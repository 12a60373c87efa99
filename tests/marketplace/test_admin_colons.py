"""The admin's delete page and password summary put the language's colon after a name: French
sets a no-break space before it, where Django glues ":" to the name."""

from django.utils import translation
from django.utils.html import format_html
from django.utils.safestring import SafeData

from marketplace.templatetags.fmt import name_colons


def test_a_deleted_objects_name_takes_the_languages_colon_and_keeps_its_escaping():
    linked = format_html('{}: <a href="{}">{}</a>', "Adresse e-mail", "/fr/admin/x/", "a@b.example")
    plain = "Groupe: <b>support</b>"  # Django's item without a link: plain text, escaped later
    with translation.override("fr"):
        items = name_colons([linked, [plain]])
    assert items[0] == 'Adresse e-mail\u00a0: <a href="/fr/admin/x/">a@b.example</a>'
    assert isinstance(items[0], SafeData)
    assert items[1] == ["Groupe\u00a0: <b>support</b>"] and not isinstance(items[1][0], SafeData)
    with translation.override("en"):
        assert name_colons(linked) == linked
