"""What the untranslated-text crawl reads: the English msgids of the catalogs the site uses (ours,
Django's and allauth's), the text a reader sees on an HTML page or in an email, and the allowlist
of brand and technical words (locale/crawl_allowlist.txt).

A segment is one text node (or one attribute a reader sees), whitespace collapsed. It is a slip
when it is, whole, an English msgid that the page's language translates to something else: a
msgid whose translation is itself (GPU, Total) is a word both languages share, never a slip.
"""

import gettext as gettext_module
import re
from functools import cache
from html.parser import HTMLParser
from pathlib import Path

import allauth
import django
from django.conf import settings
from django.utils import translation

ROOT = Path(settings.BASE_DIR)
ALLOWLIST = ROOT / "locale" / "crawl_allowlist.txt"
DJANGO = Path(django.__file__).resolve().parent
ALLAUTH = Path(allauth.__file__).resolve().parent
# The package catalogs whose strings the site shows: Django's own, the contrib apps installed, allauth.
DJANGO_APPS = ("admin", "auth", "contenttypes", "humanize", "messages", "sessions", "sitemaps")
PACKAGE_FOLDERS = {"pt": "pt_PT", "fr": "fr"}  # allauth's folder for our language

PLACEHOLDER = re.compile(r"%\(\w+\)[sdif]|%[sdif]|\{\w*\}")
LETTERS = re.compile(r"[A-Za-z]")
WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*")


def catalog_files(language: str) -> list[Path]:
    files = [ROOT / "locale" / language / "LC_MESSAGES" / "django.mo",
             DJANGO / "conf" / "locale" / language / "LC_MESSAGES" / "django.mo"]
    files += [DJANGO / "contrib" / app / "locale" / language / "LC_MESSAGES" / "django.mo"
              for app in DJANGO_APPS]
    files.append(ALLAUTH / "locale" / PACKAGE_FOLDERS[language] / "LC_MESSAGES" / "django.mo")
    return [path for path in files if path.exists()]


def catalog_keys(path: Path) -> set[tuple[str, str]]:
    """(context, msgid) of every entry of a compiled catalog; a plural entry by its singular."""
    with path.open("rb") as handle:
        keys = gettext_module.GNUTranslations(handle)._catalog
    found = set()
    for key in keys:
        msgid = key[0] if isinstance(key, tuple) else key
        if not msgid:
            continue  # the header
        context, _sep, text = msgid.rpartition("\x04")
        found.add((context, text))
    return found


def worth_checking(msgid: str) -> bool:
    """At least two words, or one word of four letters or more: shorter ones ("OK", "No") are too
    often the same text in a code, a unit or a name."""
    words = WORD.findall(PLACEHOLDER.sub("", msgid))
    return len(words) >= 2 or (len(words) == 1 and len(words[0]) >= 4)


def _pattern(msgid: str) -> str:
    parts = PLACEHOLDER.split(msgid)
    return r"\S.*?".join(re.escape(part) for part in parts)


class Msgids:
    """The English msgids that `language` shows translated: exact ones in a set, those with
    placeholders in one regular expression where each placeholder matches any text."""

    def __init__(self, exact: frozenset[str], patterns: list[str]):
        self.exact = exact
        self.regex = re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None

    def matches(self, segment: str) -> bool:
        if segment in self.exact:
            return True
        return bool(self.regex and self.regex.fullmatch(segment))


@cache
def english_msgids(language: str) -> Msgids:
    keys = set().union(*(catalog_keys(path) for path in catalog_files(language)))
    exact, patterns = set(), []
    with translation.override(language):
        for context, msgid in keys:
            text = " ".join(msgid.split())
            if not worth_checking(text) or not LETTERS.search(text):
                continue
            shown = translation.pgettext(context, msgid) if context else translation.gettext(msgid)
            if " ".join(shown.split()) == text:
                continue  # the same words in both languages
            if "<" in text:
                continue  # markup inside: never one text node
            if PLACEHOLDER.search(text):
                if len(PLACEHOLDER.sub("", text).strip(" .,:;()-")) >= 4:
                    patterns.append(_pattern(text))
            else:
                exact.add(text.replace("%%", "%"))
    return Msgids(frozenset(exact), sorted(set(patterns)))


@cache
def allowlist(language: str) -> frozenset[str]:
    """The allowed segments: a line for every language, or "fr: text" for one language only (a word
    of that language that is also an English msgid, e.g. French "Active")."""
    allowed = set()
    for line in ALLOWLIST.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        prefix, sep, rest = line.partition(": ")
        if sep and prefix in PACKAGE_FOLDERS:
            if prefix == language:
                allowed.add(rest.strip())
        else:
            allowed.add(line)
    return frozenset(allowed)


# --- the text a reader sees ------------------------------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
HIDDEN = {"script", "style", "code", "pre", "kbd", "samp", "template", "noscript", "svg"}
SHOWN_ATTRIBUTES = ("title", "placeholder", "aria-label", "alt")
BUTTON_INPUTS = {"submit", "button", "reset"}
# Elements inside a line of text: a reader reads their text on with the text around them.
INLINE = {"a", "abbr", "b", "bdi", "bdo", "cite", "data", "dfn", "em", "i", "label", "mark", "q", "s",
          "small", "span", "strong", "sub", "sup", "time", "u", "var"}
# Whitespace that HTML collapses; the no-break spaces (U+00A0, U+202F) are text and stay.
COLLAPSED = re.compile(r"[ \t\n\r\f]+")


def collapsed(text: str | None) -> str:
    return COLLAPSED.sub(" ", text or "").strip(" ")


class VisibleText(HTMLParser):
    """The text nodes and shown attributes of a page, outside code, scripts, `translate="no"` and
    the brand's elements: `segments`, one a text node or attribute, whitespace collapsed (the
    no-break spaces too) for the msgid check; `texts`, the same text as a reader reads it, the
    nodes of one line joined across inline elements and the no-break spaces kept, for the
    typography, Brazilian and money checks (slip_checks.py)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool]] = []  # (tag, skipped below)
        self.segments: list[str] = []
        self.texts: list[str] = []
        self.line: list[str] = []  # the text nodes of the line read so far

    @property
    def skipping(self) -> bool:
        return bool(self.stack) and self.stack[-1][1]

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        classes = (attributes.get("class") or "").split()
        skip = (self.skipping or tag in HIDDEN or attributes.get("translate") == "no" or "brand" in classes)
        if tag not in INLINE or skip:
            self.end_line()
        if not skip:
            for name in SHOWN_ATTRIBUTES:
                self.add_attribute(attributes.get(name))
            if tag == "input" and (attributes.get("type") or "").lower() in BUTTON_INPUTS:
                self.add_attribute(attributes.get("value"))
        if tag not in VOID:
            self.stack.append((tag, skip))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID and self.stack and self.stack[-1][0] == tag:
            self.stack.pop()

    def handle_endtag(self, tag):
        if tag not in INLINE:
            self.end_line()
        # An element closed implicitly (a <p> or <li> without its end tag) is closed here too.
        for depth in range(len(self.stack) - 1, -1, -1):
            if self.stack[depth][0] == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data):
        if not self.skipping:
            self.add(data)
            self.line.append(data)

    def close(self):
        super().close()
        self.end_line()

    def end_line(self):
        text = collapsed("".join(self.line))
        if text:
            self.texts.append(text)
        self.line = []

    def add(self, text):
        text = " ".join((text or "").split())
        if text:
            self.segments.append(text)

    def add_attribute(self, text):
        self.add(text)
        if collapsed(text):
            self.texts.append(collapsed(text))


def read_html(html: str) -> VisibleText:
    parser = VisibleText()
    parser.feed(html)
    parser.close()
    return parser


def html_segments(html: str) -> list[str]:
    return read_html(html).segments


def text_segments(text: str) -> list[str]:
    """An email's plain text, line by line (a line is what the template wrote in one piece)."""
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def text_lines(text: str) -> list[str]:
    """An email's plain text line by line as a reader reads it, its no-break spaces kept."""
    return [collapsed(line) for line in text.splitlines() if collapsed(line)]


def variants(segment: str) -> list[str]:
    """The segment, and without what a template adds around a msgid: a label's colon, a required
    field's asterisk, a closing full stop."""
    found = [segment]
    for suffix in (" :", ":", " *", "*", "…"):
        if segment.endswith(suffix):
            found.append(segment[: -len(suffix)].rstrip())
    return found


def slips(language: str, segments: list[str]) -> list[str]:
    msgids, allowed = english_msgids(language), allowlist(language)
    found = []
    for segment in segments:
        if segment in allowed:
            continue
        if any(msgids.matches(text) for text in variants(segment) if text not in allowed):
            found.append(segment)
    return list(dict.fromkeys(found))
