"""French typography in every string French pages can show: a no-break space (U+00A0, or the
narrow U+202F) before `:` `;` `?` `!` and inside « ». The check reads the whole French catalog
Django serves, ours merged with the packages' (allauth, Django's admin and forms, made over by
scripts/vendor_locales.py), so a slip in any of them fails here."""

import importlib.util
from pathlib import Path

import pytest
from django.utils import translation
from django.utils.translation import gettext, trans_real

from tests.marketplace.slip_checks import typography_slips

ROOT = Path(__file__).resolve().parents[2]


def _vendor_script():
    spec = importlib.util.spec_from_file_location("vendor_locales", ROOT / "scripts" / "vendor_locales.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("text", "slipped"),
    [
        ("Statut\u00a0: payé", False), ("Statut\u202f: payé", False),
        ("Statut : payé", True), ("Statut: payé", True),
        ("Vraiment\u00a0?", False), ("Vraiment ?", True), ("Vraiment?", True), ("«\u00a0offre\u00a0»", False),
        ("« offre »", True), ("https://everxcloud.example/?next=/fr/", False), ("10:30", False),
        ("en-tête\u00a0: Authorization: Bearer", False),
    ],
)
def test_the_check_tells_a_slip_from_french_spacing(text, slipped):
    assert bool(typography_slips(text)) is slipped


def test_every_french_string_served_is_spaced_the_french_way():
    catalog = trans_real.translation("fr")._catalog
    keys = {key for key, _text in catalog.items() if key}
    found = {
        repr(key)[:70]: slips
        for key in keys if isinstance(catalog[key], str) and (slips := typography_slips(catalog[key]))
    }
    assert found == {}


def test_the_packages_french_comes_with_our_spacing_and_words():
    with translation.override("fr"):
        assert gettext("Forgot your password?") == "Mot de passe oublié\u00a0?"
        theme = gettext("Toggle theme (current theme: auto)")
        assert theme == "Changer de thème (actuellement\u00a0: automatique)"
        assert gettext("Sign Up Closed") == "Création de compte fermée"
        assert gettext("Sign up using a passkey") == "Créer un compte avec une clé d'accès"


def test_the_vendor_script_spaces_french_punctuation():
    vendor = _vendor_script()
    assert vendor.in_our_french("Vous avez déjà un compte ? Menu: « ici »!") == (
        "Vous avez déjà un compte\u00a0? Menu\u00a0: «\u00a0ici\u00a0»\u00a0!"
    )
    assert vendor.in_our_french("Vous pouvez vous inscrire par email.") == (
        "Vous pouvez créer un compte par e-mail."
    )
    assert vendor.in_our_french("Mot de passe oublié\u202f?") == "Mot de passe oublié\u202f?"
