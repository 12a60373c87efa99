"""The command line's own words: every sentence in Portuguese and French, French typography,
the same placeholders in each language, numbers written as each language writes them."""

import ast
import re
import string
from pathlib import Path

import pytest
from everx_cli import i18n
from everx_cli.messages import MESSAGES, VALUES

from tests.cli.conftest import CLI_SOURCE

PACKAGE = CLI_SOURCE / "everx_cli"
NBSP = "\u00a0"


def _messages_in_code() -> set[str]:
    """Every literal passed to t(), and the labels of the *_LABELS tables given to t() later."""
    found = set()
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "t" \
                    and isinstance(node.args[0], ast.Constant):
                found.add(node.args[0].value)
            targets = getattr(node, "targets", [])
            if isinstance(node, ast.Assign) and any(getattr(target, "id", "").endswith("_LABELS")
                                                    for target in targets):
                found |= {value.value for value in node.value.values}
    return found


def _placeholders(text: str) -> set[str]:
    return {name for _literal, name, _spec, _conversion in string.Formatter().parse(text) if name}


def test_every_message_of_the_code_is_translated_and_none_is_left_over():
    in_code = _messages_in_code()
    assert sorted(in_code - set(MESSAGES)) == []
    assert sorted(set(MESSAGES) - in_code) == []
    for message, translations in MESSAGES.items():
        assert set(translations) == {"pt", "fr"}, message
        for text in translations.values():
            assert _placeholders(text) == _placeholders(message), (message, text)


def _french_texts() -> list[str]:
    values = [labels["fr"] for kind in VALUES.values() for labels in kind.values()]
    return [translations["fr"] for translations in MESSAGES.values()] + values


def test_french_has_a_no_break_space_before_double_punctuation():
    # A colon inside a time (18:00:00Z) is not punctuation: only one that ends a word counts.
    for text in _french_texts():
        for match in re.finditer(r"(.)([:;?!])(?=\s|$)", text):
            assert match.group(1) == NBSP, text
        assert not re.search(r"«(?!\u00a0)|(?<!\u00a0)»", text), text


def test_english_and_portuguese_have_no_space_before_a_colon():
    for message, translations in MESSAGES.items():
        for text in (message, translations["pt"]):
            assert not re.search(r"\s[:;?!]", text), text


@pytest.mark.parametrize("word", ["usuário", "tela", "cadastr", "arquivo", "você"])
def test_portuguese_is_european(word):
    for translations in MESSAGES.values():
        assert not re.search(rf"\b{word}", translations["pt"], re.IGNORECASE), translations["pt"]


def test_every_value_label_exists_in_the_three_languages():
    for kind, labels in VALUES.items():
        for code, words in labels.items():
            assert set(words) == {"en", "pt", "fr"}, (kind, code)


@pytest.mark.parametrize(("environ", "language"), [
    ({"EVERX_LANG": "fr", "LANG": "pt_PT.UTF-8"}, "fr"),
    ({"LC_ALL": "pt_PT.UTF-8", "LANG": "fr_FR.UTF-8"}, "pt"),
    ({"LC_MESSAGES": "fr_CA.UTF-8", "LANG": "en_GB.UTF-8"}, "fr"),
    ({"LANG": "pt_BR.UTF-8"}, "pt"),
    ({"LANG": "de_DE.UTF-8"}, "en"),
    ({"LANG": "C.UTF-8"}, "en"),
    ({}, "en"),
])
def test_the_language_comes_from_everx_lang_then_the_locale(environ, language):
    assert i18n.language_detect(environ) == language


@pytest.mark.parametrize(("language", "written"), [
    ("en", "12,345.60"), ("pt", "12.345,60"), ("fr", "12\u202f345,60"),
])
def test_numbers_keep_every_digit_and_take_the_language_separators(language, written):
    i18n.language_set(language)
    try:
        assert i18n.number("12345.60") == written
        assert i18n.number("-2.5") == "-2" + ("." if language == "en" else ",") + "5"
        assert i18n.number(8) == "8"
    finally:
        i18n.language_set("en")


def test_messages_fill_their_placeholders_in_the_chosen_language():
    i18n.language_set("fr")
    try:
        assert i18n.t("Error: {detail}", detail="Solde insuffisant.") == f"Erreur{NBSP}: Solde insuffisant."
        assert i18n.value_label("rental_state", "running") == "en cours"
        assert i18n.value_label("rental_state", "unheard_of") == "unheard_of"
    finally:
        i18n.language_set("en")
    assert i18n.t("Error: {detail}", detail="Low balance.") == "Error: Low balance."


def test_the_package_has_no_gettext_catalog_for_django_to_compile():
    assert not list(Path(PACKAGE).rglob("*.po"))
