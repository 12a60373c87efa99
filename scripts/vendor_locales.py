"""Make the packages' catalogs speak our European Portuguese and our French.

allauth ships `pt_PT` and `pt_BR`; Django looks for `pt` only. This reads the installed package's
`pt_PT` catalog, puts it in our words (see `WORDS`), and compiles it into the git-ignored
`.locale_vendor/pt/`, which settings list after our own `locale/`: our translations still win where
both have a string, and this catalog wins over Django's and allauth's own.

Django's own Portuguese catalogs get the same words where they differ ("Endereço de e-mail").
It also gives Django's month names in lower case, as European Portuguese writes them in a date
("1 de dezembro de 2026"); Django's `pt` catalog capitalises them.

French gets allauth's `fr` catalog and the strings of Django's own French catalogs (the admin's
theme switch, "Félicitations !") in French typography: a no-break space before `:` `;` `?` `!` and
inside « », where the packages write an ordinary space or none (see `french_typography`); and in our
words: "e-mail", and "créer un compte" for signing up, never "s'inscrire".
"""

import contextlib
import io
import re
import sys
from pathlib import Path

import allauth
import django
from babel.messages.catalog import Catalog
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / ".locale_vendor"
ALLAUTH_LOCALES = Path(allauth.__file__).resolve().parent / "locale"
DJANGO_ROOT = Path(django.__file__).resolve().parent


def django_catalogs(language: str) -> list[Path]:
    """Django's catalogs whose strings our pages show (the admin and forms)."""
    return [
        DJANGO_ROOT / part / "locale" / language / "LC_MESSAGES" / "django.po"
        for part in ("conf", "contrib/admin", "contrib/auth")
    ]


# The package's words -> ours (locale/GLOSSARY.md): "e-mail", "registar", the "você" imperative.
EMAIL = (re.compile(r"(?<![\w%(-])([Ee])mails?(?![\w)])"), lambda m: m.group(0).replace("mail", "-mail", 1))
WORDS = [
    EMAIL,
    (re.compile(r"\bInscrever-se\b"), "Registar-se"), (re.compile(r"\binscrever-se\b"), "registar-se"),
    (re.compile(r"\bInscrição\b"), "Registo"), (re.compile(r"\binscrição\b"), "registo"),
    (re.compile(r"\binscreva-se\b"), "registe-se"), (re.compile(r"\bInscreva-se\b"), "Registe-se"),
    (re.compile(r"\bCadastrar-se\b"), "Registar-se"), (re.compile(r"\bcadastrar-se\b"), "registar-se"),
    (re.compile(r"\bCadastro\b"), "Registo"), (re.compile(r"\bcadastro\b"), "registo"),
    (re.compile(r"\bDigite\b"), "Introduza"), (re.compile(r"\bdigite\b"), "introduza"),
    # allauth's two-factor pages "habilitam" an authenticator, Brazil's word: Portugal "ativa" it.
    (re.compile(r"\bHabilitar\b"), "Ativar"), (re.compile(r"\bhabilitar\b"), "ativar"),
    (re.compile(r"\bhabilitad([oa]s?)\b"), r"ativad\1"),
]
# French: signing up is creating an account (the glossary's "sign up" row); the longer forms first.
FRENCH_WORDS = [
    EMAIL,
    (re.compile(r"(?<![\w-])mail(?![\w)])"), "e-mail"),
    (re.compile(r"\bInscriptions fermées\b"), "Création de compte fermée"),
    (re.compile(r"\bles inscriptions sont actuellement fermées\b"),
     "la création de compte est actuellement fermée"),
    (re.compile(r"\bterminer l['’]inscription\b"), "terminer la création de votre compte"),
    (re.compile(r"\bdate d['’]inscription\b"), "date de création du compte"),
    (re.compile(r"\bvous inscrire pour un compte\b"), "créer un compte"),
    (re.compile(r"\bvous inscrire\b"), "créer un compte"),
    (re.compile(r"\bS['’]inscrire\b"), "Créer un compte"),
    (re.compile(r"\bs['’]inscrire\b"), "créer un compte"),
    (re.compile(r"\bInscrivez-vous\b"), "Créez un compte"),
    (re.compile(r"\binscrivez-vous\b"), "créez un compte"),
    (re.compile(r"\bInscription\b"), "Création de compte"),
    (re.compile(r"\binscription\b"), "création de compte"),
]
MONTHS = {
    "January": "janeiro", "February": "fevereiro", "March": "março", "April": "abril", "May": "maio",
    "June": "junho", "July": "julho", "August": "agosto", "September": "setembro",
    "October": "outubro", "November": "novembro", "December": "dezembro",
}

NBSP = "\u00a0"
SPACES = "\u00a0\u202f"  # a no-break space, or the narrow one that some catalogs already use
FRENCH_SPACING = [
    (re.compile(r"[ ]([:;?!»])"), NBSP + r"\1"),  # an ordinary space before the sign
    (re.compile(r"«[ ]"), "«" + NBSP),
    (re.compile(rf"(?<=[^\s{SPACES}])([;?!]+)(?=\s|$|<)"), NBSP + r"\1"),  # none at all
    (re.compile(rf"(?<=[^\s{SPACES}])(:)(?=\s|$|<)"), NBSP + r"\1"),
    (re.compile(rf"«(?=[^\s{SPACES}])"), "«" + NBSP),
    (re.compile(rf"(?<=[^\s{SPACES}])»"), NBSP + "»"),
]


def in_our_words(text: str, words=WORDS) -> str:
    for pattern, replacement in words:
        text = pattern.sub(replacement, text)
    return text


def french_typography(text: str) -> str:
    for pattern, replacement in FRENCH_SPACING:
        text = pattern.sub(replacement, text)
    return text


def in_our_french(text: str) -> str:
    return french_typography(in_our_words(text, FRENCH_WORDS))


def _rewritten(message, rewrite) -> bool:
    """Rewrite a message's translation in place; whether it changed."""
    before = message.string
    if isinstance(before, tuple):
        message.string = tuple(rewrite(form) for form in before)
    else:
        message.string = rewrite(before)
    return message.string != before


def _translated(catalog: Catalog):
    return [message for message in catalog if message.id and message.string and not message.fuzzy]


def _add_changed(catalog: Catalog, sources: list[Path], rewrite) -> None:
    """Django's own strings where `rewrite` changes them, and only singular ones: its catalogs count
    plural forms differently from allauth's, and one .mo file has one plural rule."""
    for source in sources:
        # Babel prints a warning for each of Django's three-form plurals; they are skipped anyway.
        with source.open("rb") as file, contextlib.redirect_stdout(io.StringIO()):
            theirs = read_po(file, locale=catalog.locale)
        for message in _translated(theirs):
            if not message.pluralizable and _rewritten(message, rewrite):
                catalog.add(message.id, message.string, context=message.context)


def catalog_rewritten(source: Path, locale: str, django_sources: list[Path], rewrite) -> Catalog:
    """allauth's catalog `source` with every translation rewritten, and Django's where it changes."""
    with source.open("rb") as file:
        catalog = read_po(file, locale=locale)
    for message in _translated(catalog):
        _rewritten(message, rewrite)
    _add_changed(catalog, django_sources, rewrite)
    return catalog


def catalog_ours(source: Path, django_sources: list[Path]) -> Catalog:
    catalog = catalog_rewritten(source, "pt_PT", django_sources, in_our_words)
    for english, portuguese in MONTHS.items():
        catalog.add(english, portuguese)  # the `F` of a date format
        catalog.add(english, portuguese, context="alt. month")  # the `E` of a date format
    return catalog


def _write(language: str, catalog: Catalog) -> None:
    destination = TARGET / language / "LC_MESSAGES"
    destination.mkdir(parents=True, exist_ok=True)
    with (destination / "django.mo").open("wb") as file:
        write_mo(file, catalog)


def main() -> int:
    portuguese = ALLAUTH_LOCALES / "pt_PT" / "LC_MESSAGES" / "django.po"
    french = ALLAUTH_LOCALES / "fr" / "LC_MESSAGES" / "django.po"
    for source in (portuguese, french, *django_catalogs("pt"), *django_catalogs("fr")):
        if not source.exists():
            print(f"{source.name} of {source.parents[2].name} is missing", file=sys.stderr)
            return 1
    _write("pt", catalog_ours(portuguese, django_catalogs("pt")))
    _write("fr", catalog_rewritten(french, "fr", django_catalogs("fr"), in_our_french))
    return 0


if __name__ == "__main__":
    sys.exit(main())
