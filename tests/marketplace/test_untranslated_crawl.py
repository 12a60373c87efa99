"""The untranslated-text crawl: in Portuguese and in French, every page a visitor, a buyer, a seller's
member and each operator role can open, and every email the site sent meanwhile, read for English
left behind: a piece of text that is, whole, an English msgid of our catalogs or of the packages'
(Django, its admin, allauth) which that language translates. Brand and technical words that stay
English are in locale/crawl_allowlist.txt. The same text is read for the slips of
tests/marketplace/slip_checks.py: French punctuation without its no-break space, a Brazilian form
on a Portuguese page, an amount of money not written in the page's number format.

One test per language builds the demo site of tests/marketplace/test_every_page.py (its data fill
the admin's lists and forms), with every email rendered in the crawled language, then fails with
the list of (language, page, text) found.
"""

import json
from urllib.parse import urlsplit

import pytest
from django.core import mail
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import translation

from accounts.models import Profile, User
from demo.seed import DEMO_OPERATORS
from marketplace import emails
from marketplace.emails import outbox_send_pending
from marketplace.models import OutboxEmail
from tests.marketplace.crawl_support import (
    collapsed,
    html_segments,
    read_html,
    slips,
    text_lines,
    text_segments,
)
from tests.marketplace.slip_checks import brazilian_slips, money_slips, typography_slips
from tests.marketplace.test_every_page import admin_pages, buyer_pages, signed_in, site, sitemap_paths  # noqa: F401

pytestmark = pytest.mark.django_db

# Screens that are no page of their own: downloads, redirects, the API's machine answers.
NOT_PAGES = ("agent-download", "sitemap", "robots", "favicon", "healthz", "stripe-webhook", "set_language")
PORTAL = ("sellers:portal-server", "sellers:portal-server-edit", "sellers:portal-server-agent",
          "sellers:portal-agent-token", "sellers:portal-agent-token-revoke")


def url(name: str, language: str, **kwargs) -> str:
    with translation.override(language):
        return reverse(name, kwargs=kwargs or None)


def names_without_arguments(resolver=None, namespace: str = "") -> list[str]:
    """Every named route of the site (the admin's and the API's aside) that takes no argument."""
    names = []
    for pattern in (resolver or get_resolver()).url_patterns:
        if isinstance(pattern, URLResolver):
            if pattern.namespace in {"admin", "api-1.0.0"} or "api/v1" in str(pattern.pattern):
                continue
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            names += names_without_arguments(pattern, inner)
        elif (isinstance(pattern, URLPattern) and pattern.name and not pattern.pattern.regex.groupindex
              and pattern.name not in NOT_PAGES):
            names.append(namespace + pattern.name)
    return list(dict.fromkeys(names))


def operator_screens(language: str, *, everything: bool) -> list[str]:
    """A superuser's every screen; for another role, the index, changelists and change forms."""
    with translation.override(language):
        pages = admin_pages()
    if everything:
        return pages
    return [page for page in pages if page.endswith(("/admin/", "/")) and (
        page.endswith("/change/") or page.count("/") <= 5)]


def is_json(text: str) -> bool:
    """A JSON field's value, which the admin shows as data, not as a sentence."""
    if not text.startswith(("{", "[")):
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


class Crawl:
    """Pages read in one language, and what they showed that the language writes otherwise."""

    def __init__(self, language: str):
        self.language = language
        self.found: list[tuple[str, str, str]] = []  # (check, where, text)
        self.read = 0

    def visit(self, client: Client, page: str, data: dict | None = None, who: str = "") -> None:
        response = client.post(page, data) if data is not None else client.get(page)
        if response.status_code != 200 or "text/html" not in response.get("Content-Type", ""):
            return
        self.read += 1
        self.check_html(f"{who} {page}".strip(), response.content.decode())

    def check_html(self, where: str, html: str) -> None:
        text = read_html(html)
        self.check(where, text.segments, text.texts)

    def check(self, where: str, segments: list[str], texts: list[str]) -> None:
        """`segments` for English msgids (crawl_support.py), `texts` for the slips of slip_checks.py."""
        for segment in slips(self.language, segments):
            self.found.append(("English", where, segment))
        for text in texts:
            if is_json(text):
                continue
            if self.language == "fr":
                self.found += [("typography", where, slip) for slip in typography_slips(text)]
            if self.language == "pt":
                self.found += [("Brazilian", where, f"{form} in {text[:80]!r}")
                               for form in brazilian_slips(text)]
            self.found += [("money", where, amount) for amount in money_slips(text, self.language)]

    def report(self) -> str:
        found = list(dict.fromkeys(self.found))
        lines = [f"{self.language} {check} {where}: {text!r}" for check, where, text in found]
        return f"{len(lines)} slips in {self.language}:\n" + "\n".join(lines)


@pytest.fixture
def emails_in_language(monkeypatch, request):
    """Every email of the test in the crawled language, whatever its recipient's profile says."""
    language = request.node.callspec.params["language"]
    monkeypatch.setattr(emails, "email_language", lambda **_ignored: language)
    return language


@pytest.fixture
def world(emails_in_language, site):  # noqa: F811  (the fixture imported above)
    # Signed-in pages follow the profile's language: every user reads the crawled one.
    Profile.objects.update(preferred_language=emails_in_language)
    return site


def crawl_public(crawl: Crawl, language: str) -> None:
    visitor = Client()
    prefix = f"/{language}/"
    for page in sitemap_paths(visitor):
        if page.startswith(prefix):
            crawl.visit(visitor, page)
    for name in ("account_login", "account_signup", "account_reset_password", "account_reset_password_done",
                 "account_email_verification_sent", "account_inactive", "sellers:apply"):
        crawl.visit(visitor, url(name, language))
    # Forms sent back with their errors: the validators' messages, the password rules.
    sent = {
        "account_signup": {"email": "not-an-address", "password1": "short", "password2": "other"},
        "account_login": {"login": "nobody@example.com", "password": "wrong"},
        "account_reset_password": {"email": "not-an-address"},
    }
    for name, data in sent.items():
        crawl.visit(Client(), url(name, language), data, "visitor POST")


def crawl_buyer(crawl: Crawl, language: str, world) -> None:
    buyer = signed_in(world["buyer"])
    # Its list is of English addresses: the same pages under the crawled language's prefix.
    pages = [f"/{language}/" + page.removeprefix("/en/") for page in buyer_pages(world)]
    pages += [url(name, language) for name in names_without_arguments()]
    pages.append(url("exchange:rental", language, pk=world["rental"].pk))
    for page in dict.fromkeys(pages):
        crawl.visit(buyer, page, who="buyer")


def crawl_seller(crawl: Crawl, language: str, world) -> None:
    owner = signed_in(world["owner"])
    server = world["rental"].offer.server
    pages = [url(name, language) for name in names_without_arguments() if name.startswith("sellers:portal")]
    pages += [url(name, language, server_id=server.pk) for name in PORTAL]
    for page in pages:
        crawl.visit(owner, page, who="seller")


def crawl_admin(crawl: Crawl, language: str) -> None:
    for email, role in DEMO_OPERATORS.items():
        operator = signed_in(User.objects.get(email=email))
        for page in operator_screens(language, everything=role is None):
            crawl.visit(operator, page, who=role or "superuser")


def send_emails(language: str, world) -> None:
    """The emails that allauth sends, on top of those the data already made: a reset link, the
    confirmation of a new account."""
    Client().post(url("account_reset_password", language), {"email": world["buyer"].email})
    Client().post(url("account_signup", language), {
        "email": f"crawl-{language}@example.com", "password1": "a long Passphrase 4 crawl",
        "password2": "a long Passphrase 4 crawl"})
    outbox_send_pending(limit=1000)


def crawl_emails(crawl: Crawl, language: str) -> None:
    for row in OutboxEmail.objects.filter(language=language).order_by("pk"):
        where = f"email {row.key}"
        crawl.check(where, [row.subject.strip(), *text_segments(row.body)],
                    [collapsed(row.subject), *text_lines(row.body)])
        if row.html:
            crawl.check_html(where, row.html)
    for message in mail.outbox:
        where = f"mail to {message.to[0]}: {message.subject}"
        crawl.check(where, [message.subject, *text_segments(message.body)],
                    [collapsed(message.subject), *text_lines(message.body)])
        for content, mimetype in getattr(message, "alternatives", []):
            if mimetype == "text/html":
                crawl.check_html(where, content)


@pytest.mark.parametrize("language", ["pt", "fr"])
def test_no_english_text_on_a_page_or_in_an_email(world, language):
    crawl = Crawl(language)
    crawl_public(crawl, language)
    crawl_buyer(crawl, language, world)
    crawl_seller(crawl, language, world)
    crawl_admin(crawl, language)
    send_emails(language, world)
    crawl_emails(crawl, language)
    assert crawl.read > 100, "the crawl reached too few pages to prove anything"
    assert crawl.found == [], crawl.report()


def test_the_crawl_reads_the_text_a_reader_sees():
    """The reader's text: text nodes and shown attributes, not code, scripts or the brand's words."""
    html = ('<p title="Save changes">Sign in <code>Sign in</code><span translate="no">Sign Out</span></p>'
            '<script>var a = "Sign Out";</script><input type="submit" value="Sign Out">'
            '<input type="hidden" value="Sign Out"><img alt="Remove">')
    assert html_segments(html) == ["Save changes", "Sign in", "Sign Out", "Remove"]


def test_the_crawl_reads_a_line_across_inline_elements_with_its_no_break_spaces():
    html = ('<p><strong>Statut</strong>\u00a0: <em>payé</em></p><p>Total : 3</p>'
            '<p>En-tête <code>Authorization:</code>: jeton</p><input placeholder="Nom\u00a0?">')
    text = read_html(html)
    assert text.texts == ["Statut\u00a0: payé", "Total : 3", "En-tête", ": jeton", "Nom\u00a0?"]
    assert [typography_slips(line) != [] for line in text.texts] == [False, True, False, False, False]


def test_the_crawl_flags_an_english_msgid_and_not_a_shared_word():
    assert slips("fr", ["Sign In", "Se connecter", "GPU", "Password:"]) == ["Sign In", "Password:"]
    assert urlsplit(url("account_login", "fr")).path.startswith("/fr/")
