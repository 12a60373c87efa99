"""The packages' Portuguese in our words (scripts/vendor_locales.py): months in lower case in a
date, allauth's and Django's sign-up and e-mail as the rest of the site says them."""

import re
from datetime import date

import pytest
from django.utils import dateformat, translation
from django.utils.translation import gettext, pgettext, trans_real

from tests.marketplace.slip_checks import brazilian_slips


def test_portuguese_dates_write_the_month_in_lower_case():
    with translation.override("pt"):
        assert dateformat.format(date(2026, 12, 1), r"j \d\e F \d\e Y") == "1 de dezembro de 2026"
        assert pgettext("alt. month", "March") == "março"
    with translation.override("fr"):
        assert dateformat.format(date(2026, 12, 1), r"j F Y") == "1 décembre 2026"


def test_allauth_speaks_european_portuguese():
    with translation.override("pt"):
        assert gettext("Sign Up") == "Registar-se"
        assert gettext("Email Addresses") == "Endereços de e-mail"
        assert "%(email)s" in gettext("Confirm that %(email)s is an email address for user %(user_display)s.")


def test_allauth_portuguese_activates_an_authenticator_the_european_way():
    with translation.override("pt"):
        assert gettext("Activate") == "Ativar"
        assert gettext("An authenticator app is not active.") == "Não há um autenticador ativado."


def test_no_served_portuguese_string_has_a_brazilian_form():
    catalog = trans_real.translation("pt")._catalog
    keys = {key for key, _text in catalog.items() if key}  # items() lists shadowed entries too
    found = {
        catalog[key]: slips for key in keys
        if isinstance(catalog[key], str) and (slips := brazilian_slips(catalog[key]))
    }
    assert found == {}


def test_django_portuguese_writes_e_mail_too():
    with translation.override("pt"):
        assert gettext("Email address:") == "Endereço de e-mail:"


PLACEHOLDERS = re.compile(r"%\(\w+\)s|\{\w+\}|mailto:|\S+@\S+")
UNHYPHENATED = re.compile(r"(?<![\w%(-])e?mails?(?![\w)])", re.IGNORECASE)


@pytest.mark.parametrize("language", ["pt", "fr"])
def test_no_served_string_writes_email_without_its_hyphen(language):
    catalog = trans_real.translation(language)._catalog
    keys = {key for key, _text in catalog.items() if key}
    found = [
        catalog[key] for key in keys
        if isinstance(catalog[key], str) and UNHYPHENATED.search(PLACEHOLDERS.sub("", catalog[key]))
    ]
    assert found == []


def test_one_term_per_concept_in_the_packages_strings():
    with translation.override("pt"):
        assert gettext("Activate") == "Ativar"
        assert gettext("Two-Factor Authentication") == "Autenticação de dois fatores"
        assert gettext("staff status") == "Estado da equipa"
    with translation.override("fr"):
        assert gettext("Sign Up") == "Créer un compte"  # the page's title and button, as its link


@pytest.mark.parametrize(("language", "words"), [
    ("pt", re.compile(r"\b(?:habilit\w*|dois componentes|status de)\b", re.IGNORECASE)),
    ("fr", re.compile(r"\bcourriels?\b", re.IGNORECASE)),
])
def test_no_served_string_uses_the_other_word(language, words):
    catalog = trans_real.translation(language)._catalog
    keys = {key for key, _text in catalog.items() if key}
    found = [catalog[key] for key in keys if isinstance(catalog[key], str) and words.search(catalog[key])]
    assert found == []
