"""The catalogs speak the words of locale/GLOSSARY.md.

For each row of the glossary's terms table, every pt and fr translation of a msgid containing one
of the row's English forms contains one of the row's forms in that language; and no translation
contains a form of the forbidden table. How forms are matched is written in the glossary itself.
"""

import re
from functools import cache
from pathlib import Path

import pytest
from babel.messages.pofile import read_po

from tests.marketplace.slip_checks import form_pattern, glossary

ROOT = Path(__file__).resolve().parents[2]
LANGUAGES = {"pt": "pt-PT", "fr": "fr"}
# What is not a word of the sentence: placeholders, tags, addresses, template variables.
_NOT_WORDS = re.compile(r"%\(\w+\)[sdf]|%[sdf]|\{\{.*?\}\}|\{\w*\}|<[^>]+>|https?://\S+|&\w+;")


def _forms(cell: str) -> list[str]:
    return [form.strip() for form in cell.split(" / ") if form.strip()]


@cache
def catalog(language: str) -> list[tuple[str, str]]:
    """(msgid, msgstr) pairs of a catalog, each plural form its own pair, without non-words."""
    with (ROOT / "locale" / language / "LC_MESSAGES" / "django.po").open("rb") as file:
        messages = read_po(file)
    pairs = []
    for message in messages:
        if not message.id or message.fuzzy:
            continue
        ids = message.id if isinstance(message.id, tuple) else (message.id,)
        strings = message.string if isinstance(message.string, tuple) else (message.string,)
        for index, string in enumerate(strings):
            source = ids[min(index, len(ids) - 1)]
            pairs.append((_NOT_WORDS.sub(" ", source), _NOT_WORDS.sub(" ", string)))
    return pairs


def test_the_glossary_has_its_two_tables():
    terms, forbidden = glossary()
    assert {"term", "en", "pt-PT", "fr", "note"} <= set(terms[0])
    assert len(terms) >= 20 and len(forbidden) >= 10


@pytest.mark.parametrize("language", LANGUAGES)
def test_each_term_is_translated_with_the_glossarys_word(language):
    terms, _forbidden = glossary()
    slips = []
    for row in terms:
        accepted = [form_pattern(form) for form in _forms(row[LANGUAGES[language]])]
        english = [form_pattern(form) for form in _forms(row["en"])]
        if not accepted:
            continue
        for source, string in catalog(language):
            if any(p.search(source) for p in english) and not any(p.search(string) for p in accepted):
                slips.append(f"{row['term']}: {source!r} -> {string!r}")
    assert slips == []


@pytest.mark.parametrize("language", LANGUAGES)
def test_no_translation_uses_a_forbidden_form(language):
    _terms, forbidden = glossary()
    patterns = [(row["form"], form_pattern(row["form"])) for row in forbidden if row["language"] == language]
    slips = [
        f"{form}: {string!r}"
        for source, string in catalog(language)
        for form, pattern in patterns
        if pattern.search(string)
    ]
    assert slips == []


def test_the_matching_reads_words_not_parts_of_words():
    assert form_pattern("mail").search("un e-mail") is None
    assert form_pattern("bid").search("Two bids") and not form_pattern("bid").search("forbidden")
    assert form_pattern("licit*").search("Licitações")
    assert form_pattern("carnet d'ordres").search("carnet d’ordres")
