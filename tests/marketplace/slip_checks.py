"""Slips a page can show in its language, each found by one small function on a piece of text:

- `typography_slips`: French punctuation that a line may break before (`:` `;` `?` `!` `»` after an
  ordinary space or glued to the word, `«` before an ordinary space), where French sets a no-break
  space (U+00A0, or the narrow U+202F).
- `brazilian_slips`: a Brazilian form on a European Portuguese page: the rows of the glossary's
  "Forbidden forms" table marked Brazilian (locale/GLOSSARY.md, the one list), and the country
  names that CLDR spells differently in Brazil (Babel's `pt`) and in Portugal (`pt_PT`).
- `money_slips`: an amount of money (a number next to a currency marker) that is not written in
  the page's own number format (marketplace/formatting.py: en, pt, fr), e.g. `0.69 USD` in French.

Used by the French typography test on the catalogs and by the untranslated-text crawl on pages.
"""

import re
from functools import cache
from pathlib import Path

from babel import Locale
from babel.numbers import NumberFormatError, get_decimal_symbol, get_group_symbol, parse_decimal

ROOT = Path(__file__).resolve().parents[2]
GLOSSARY = ROOT / "locale" / "GLOSSARY.md"

# --- French typography -----------------------------------------------------------------------------

NO_BREAK = "\u00a0\u202f"
TYPOGRAPHY = [
    re.compile(r" [:;?!»]"),  # an ordinary space, which a line may break at
    re.compile(r"« "),
    re.compile(rf"(?<=[^\s{NO_BREAK}])[;?!]+(?=\s|$|<)"),  # no space at all
    re.compile(rf"(?<=[^\s{NO_BREAK}]):(?=\s|$|<)"),
    re.compile(rf"«(?![{NO_BREAK}])"),
    re.compile(rf"(?<![{NO_BREAK}])»"),
]
# Not punctuation of a sentence: HTTP header names written as the protocol spells them (colon
# attached), addresses (https://, mailto:), query strings (?next=/fr/) and image digests
# (name@sha256:…).
NOT_PUNCTUATION = re.compile(
    r"\b(?:Authorization|Idempotent-Replayed|Idempotency-Key|Referrer-Policy|Content-Type|Accept"
    r"|Retry-After|X-[A-Za-z-]+|sha256):"
    r"|\b[a-z][a-z0-9+.-]*://\S*|\bmailto:\S+"
    r"|\?[\w.%-]+=\S*"
)


def typography_slips(text: str) -> list[str]:
    """Each French punctuation slip of `text`, with the words around it."""
    text = NOT_PUNCTUATION.sub("", text)
    return [text[max(0, m.start() - 25):m.end() + 10] for slip in TYPOGRAPHY for m in slip.finditer(text)]


# --- Brazilian forms -------------------------------------------------------------------------------


def markdown_tables(text: str) -> list[list[dict[str, str]]]:
    """Each Markdown table of `text`, as rows keyed by the header's cells."""
    tables, header, rows = [], None, []
    for line in [*text.splitlines(), ""]:
        if not line.startswith("|"):
            if header:
                tables.append(rows)
            header, rows = None, []
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not set("".join(cells)) <= set("-: "):
            rows.append(dict(zip(header, cells, strict=True)))
    return tables


@cache
def glossary() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The glossary's two tables: the terms, and the forbidden forms."""
    terms, forbidden = markdown_tables(GLOSSARY.read_text(encoding="utf-8"))
    return terms, forbidden


def form_pattern(form: str) -> re.Pattern:
    """A form on word boundaries (a hyphen joins words: "mail" is not in "e-mail"), its plural in
    `s` too; a trailing `*` leaves the word's end open. Apostrophes ' and ’ are one."""
    stem = form.removesuffix("*")
    body = re.escape(stem).replace("'", "['’]").replace(r"\ ", r"\s+")
    end = r"[\w-]*" if form.endswith("*") else r"(?:s|es)?(?![\w-])"
    return re.compile(rf"(?<![\w-]){body}{end}", re.IGNORECASE)


# CLDR's groupings and placeholders, which no page names: the EU, the euro area, the UN, unknown.
NOT_COUNTRIES = {"EU", "EZ", "UN", "ZZ", "QO", "XA", "XB"}


@cache
def brazilian_country_names() -> frozenset[str]:
    """The country names of Babel's `pt` (Brazil's) that Portugal's `pt_PT` writes otherwise
    (Polônia: Polónia, Irã: Irão), less those that are also, or inside, a European name."""
    brazil, portugal = Locale.parse("pt").territories, Locale.parse("pt_PT").territories
    european = list(portugal.values())
    return frozenset(
        name for code, name in brazil.items()
        if code.isalpha() and code not in NOT_COUNTRIES and name != portugal.get(code)
        and not any(_name_pattern(name).search(other) for other in european)
    )


def _name_pattern(name: str) -> re.Pattern:
    """A name as whole words: "Irã" is not in "Irão", nor "Dominica" in "República Dominicana"."""
    return re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])")


@cache
def _brazilian_patterns() -> tuple[tuple[str, re.Pattern], ...]:
    _terms, forbidden = glossary()
    words = [row["form"] for row in forbidden
             if row["language"] == "pt" and row["why"].startswith("Brazilian")]
    names = sorted(brazilian_country_names())
    return (*((word, form_pattern(word)) for word in words),
            *((name, _name_pattern(name)) for name in names))


# An address is not a word of the sentence (arquivo.pdf, /registro/, contato@example.com).
ADDRESSES = re.compile(r"\S+@\S+|\b[a-z][a-z0-9+.-]*://\S*|\S*/\S*|\S+\.[a-z]{2,4}\b")


def brazilian_slips(text: str) -> list[str]:
    """The Brazilian forms of `text`, each as the glossary or CLDR writes it."""
    text = ADDRESSES.sub(" ", text)
    return [form for form, pattern in _brazilian_patterns() if pattern.search(text)]


# --- money -----------------------------------------------------------------------------------------

# Longest first, so that `US$` is not read as `$`. Letters only as a whole word (`USD`, not `USDC`).
CURRENCY = r"(?:US\$|\$US|£GB|\$|€|£|(?<![A-Za-z])(?:USD|EUR|GBP)(?![A-Za-z]))"
# A number as any language may write it: digits grouped or split by `.` `,` or a no-break space,
# with a sign. Not an ordinary space: "Top-up 9 100.00 EUR" is two numbers.
NUMBER = r"[-−+]?\d+(?:[.,\u00a0\u202f]\d+)*"
SPACE = r"[ \u00a0\u202f]?"
AMOUNT = re.compile(
    rf"(?P<before>{CURRENCY}){SPACE}(?P<a>{NUMBER})"
    rf"|(?P<b>{NUMBER}){SPACE}(?P<after>{CURRENCY})(?P<rest>[.,]\d+)?"
)
# The currency markers each language's CLDR format writes (marketplace/formatting.py's money()):
# French `0,33 $US`, never `US$` nor a bare `$`; Portuguese `US$ 0,33`; English `$0.33`.
FOREIGN_MARKERS = {"en": {"US$", "$US", "£GB"}, "pt": {"$", "$US", "£GB"}, "fr": {"$", "US$"}}


def _number_slip(number: str, locale: str) -> bool:
    digits = number.lstrip("-−+")
    allowed = {get_group_symbol(locale), get_decimal_symbol(locale)}
    # Babel's strict parse still reads `0.69` in French (Python's decimal point): only the
    # language's own separators are its number format.
    if not set(re.sub(r"\d", "", digits)) <= allowed:
        return True
    try:
        parse_decimal(digits, locale=locale, strict=True)
    except NumberFormatError:
        return True
    return False


def money_slips(text: str, language: str) -> list[str]:
    """Each amount of money in `text` not written in `language`'s format (`-0,63 €,00`, `0.69 USD`
    on a French page, `$1.234,50` on an English one)."""
    locale = {"pt": "pt", "fr": "fr"}.get(language, "en")
    found = []
    for match in AMOUNT.finditer(text):
        number = match["a"] or match["b"]
        marker = match["before"] or match["after"]
        # A number glued to the marker's far side too (`-0,63 €,00`): an amount written twice.
        if match["rest"] or _number_slip(number, locale) or marker in FOREIGN_MARKERS[locale]:
            found.append(match[0])
    return found
