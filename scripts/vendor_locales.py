"""Make the packages' catalogs speak our European Portuguese.

allauth ships `pt_PT` and `pt_BR`; Django looks for `pt` only. This reads the installed package's
`pt_PT` catalog, puts it in our words (see `WORDS`), and compiles it into the git-ignored
`.locale_vendor/pt/`, which settings list after our own `locale/`: our translations still win where
both have a string, and this catalog wins over Django's and allauth's own.

It also gives Django's month names in lower case, as European Portuguese writes them in a date
("1 de dezembro de 2026"); Django's `pt` catalog capitalises them.
"""

import re
import sys
from pathlib import Path

import allauth
from babel.messages.catalog import Catalog
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / ".locale_vendor"
ALIASES = {"pt": "pt_PT"}  # our language -> the package's locale folder

# The package's words -> ours (locale/GLOSSARY.md): "e-mail", "registar", the "você" imperative.
WORDS = [
    (re.compile(r"(?<![\w%(-])([Ee])mails?(?![\w)])"), lambda m: m.group(0).replace("mail", "-mail", 1)),
    (re.compile(r"\bInscrever-se\b"), "Registar-se"), (re.compile(r"\binscrever-se\b"), "registar-se"),
    (re.compile(r"\bInscrição\b"), "Registo"), (re.compile(r"\binscrição\b"), "registo"),
    (re.compile(r"\binscreva-se\b"), "registe-se"), (re.compile(r"\bInscreva-se\b"), "Registe-se"),
    (re.compile(r"\bCadastrar-se\b"), "Registar-se"), (re.compile(r"\bcadastrar-se\b"), "registar-se"),
    (re.compile(r"\bCadastro\b"), "Registo"), (re.compile(r"\bcadastro\b"), "registo"),
    (re.compile(r"\bDigite\b"), "Introduza"), (re.compile(r"\bdigite\b"), "introduza"),
]
MONTHS = {
    "January": "janeiro", "February": "fevereiro", "March": "março", "April": "abril", "May": "maio",
    "June": "junho", "July": "julho", "August": "agosto", "September": "setembro",
    "October": "outubro", "November": "novembro", "December": "dezembro",
}


def in_our_words(text: str) -> str:
    for pattern, replacement in WORDS:
        text = pattern.sub(replacement, text)
    return text


def catalog_ours(source: Path) -> Catalog:
    with source.open("rb") as file:
        catalog = read_po(file, locale="pt_PT")
    for message in catalog:
        if not message.id or message.fuzzy:
            continue
        if isinstance(message.string, tuple):
            message.string = tuple(in_our_words(form) for form in message.string)
        else:
            message.string = in_our_words(message.string)
    for english, portuguese in MONTHS.items():
        catalog.add(english, portuguese)  # the `F` of a date format
        catalog.add(english, portuguese, context="alt. month")  # the `E` of a date format
    return catalog


def main() -> int:
    source_root = Path(allauth.__file__).resolve().parent / "locale"
    for ours, theirs in ALIASES.items():
        source = source_root / theirs / "LC_MESSAGES" / "django.po"
        if not source.exists():
            print(f"allauth has no {theirs} catalog; skipped", file=sys.stderr)
            continue
        destination = TARGET / ours / "LC_MESSAGES"
        destination.mkdir(parents=True, exist_ok=True)
        with (destination / "django.mo").open("wb") as file:
            write_mo(file, catalog_ours(source))
    return 0


if __name__ == "__main__":
    sys.exit(main())
