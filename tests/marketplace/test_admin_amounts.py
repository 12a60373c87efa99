"""Amounts in the operators' admin, in English, Portuguese and French: every amount that a change
list or a change form of our models shows (a number next to a currency sign or code) reads back as a
number of that language by CLDR's rules, written as marketplace/formatting.py writes it; and the
amounts of the money tables are there, with their currency."""

import re
from decimal import Decimal

import pytest
from babel.numbers import (
    NumberFormatError,
    format_currency,
    get_currency_symbol,
    get_group_symbol,
    parse_decimal,
)
from django.utils import translation

from accounts.models import AuditEntry, Wallet
from billing.models import (
    CreditNote,
    ExchangeRate,
    Invoice,
    LedgerEntry,
    Payout,
    RentalCharge,
    TopUp,
    TopUpRefund,
    TopUpVatRefund,
)
from billing.services import top_up_credit_bank_transfer
from exchange.models import Bid, MarketBook, Offer, PriceAlert, Rental
from marketplace import formatting
from marketplace.models import OutboxEmail
from tests.admin_support import operator_client
from tests.marketplace.crawl_support import html_segments
from tests.marketplace.test_admin_site import (  # noqa: F401  (books: the fixture)
    LANGUAGES,
    bank_top_up,
    books,
    change_url,
    changelist,
    our_models,
)

pytestmark = pytest.mark.django_db

CURRENCIES = ("EUR", "USD", "GBP")
# What may stand around a currency's sign in an amount: digits, separators, spaces and a sign.
FIGURE = "-−+0123456789.,\u00a0\u202f "


def currency_signs(locale: str) -> dict[str, str]:
    """Each sign or code that names one of our currencies in `locale`, longest first ("US$" before "$")."""
    signs = {}
    for code in CURRENCIES:
        signs[code] = code
        signs[get_currency_symbol(code, locale=locale)] = code
    return dict(sorted(signs.items(), key=lambda item: -len(item[0])))


def amounts_in(text: str, locale: str) -> list[tuple[str, str, str, str]]:
    """(amount as shown, the figure, its currency's code, the sign) of every currency sign or code in
    `text` with a figure beside it."""
    signs = currency_signs(locale)
    pattern = re.compile("|".join(re.escape(sign) for sign in signs))
    found = []
    for match in pattern.finditer(text):
        start, end = match.start(), match.end()
        while start > 0 and text[start - 1] in FIGURE:
            start -= 1
        while end < len(text) and text[end] in FIGURE:
            end += 1
        # A sentence's punctuation around an amount is not part of it ("a total of €12.50.").
        while start < match.start() and text[start] in ".,\u00a0\u202f ":
            start += 1
        while end > match.end() and text[end - 1] in ".,\u00a0\u202f ":
            end -= 1
        before, after = text[start:match.start()], text[match.end():end]
        if not re.search(r"\d", before + after):
            continue  # a currency column, a code in a sentence
        found.append((text[start:end].strip(), before.strip() + "|" + after.strip(), signs[match.group()],
                      match.group()))
    return found


def spaced(text: str) -> str:
    return " ".join(text.split())


def misread(text: str, locale: str) -> list[str]:
    """The amounts of `text` that are not `locale`'s notation of a number with its currency."""
    wrong = []
    for shown, figure, code, _sign in amounts_in(text, locale):
        before, after = figure.split("|")
        digits_before, digits_after = bool(re.search(r"\d", before)), bool(re.search(r"\d", after))
        if digits_before and digits_after:
            wrong.append(shown)  # figures on both sides of the sign: `-0,63 €,00`
            continue
        number = before if digits_before else after
        sign = "-" if "-" in (after if digits_before else before) else ""
        # The page's text has its spaces collapsed (CLDR's no-break ones too): a space inside the
        # figure stands for the locale's grouping sign, which the strict reading checks.
        number = re.sub(r"\s", get_group_symbol(locale), number.removeprefix("+"))
        try:
            value = parse_decimal(sign + number, locale=locale, strict=True)
        except NumberFormatError:
            wrong.append(shown)
            continue
        # A credit may carry its plus sign (`+€ 283,95`, formatting.money_signed); CLDR writes none.
        if spaced(format_currency(value, code, locale=locale, decimal_quantization=False)) != spaced(
            shown.removeprefix("+")
        ):
            wrong.append(shown)
    return wrong


def test_the_reading_finds_what_django_wrote_and_accepts_what_babel_writes():
    assert misread("-0,63\u00a0€,00", "fr") == ["-0,63\u00a0€,00"]
    assert misread("-€\u00a00,63,00", "pt") == ["-€\u00a00,63,00"]
    assert misread("120,00 EUR", "fr") == ["120,00 EUR"]
    assert misread("$0.63 and 1,234.50 EUR", "en") == ["1,234.50 EUR"]
    for locale in ("en", "pt", "fr"):
        for code in CURRENCIES:
            shown = format_currency(Decimal("-1234.5"), code, locale=locale)
            assert misread(f"Total: {shown}.", locale) == [], shown
    assert misread("EUR", "fr") == [] and amounts_in("USD wallet", "en") == []
    assert misread("1 234,50 € collapsed", "fr") == [] and misread("12 34,50 €", "fr") == ["12 34,50 €"]


MONEY = {
    TopUp: ("amount", "vat_amount", "total"),
    TopUpRefund: ("amount", "vat_amount", "total"),
    TopUpVatRefund: ("vat_amount",),
    Invoice: ("net", "vat_amount", "total"),
    CreditNote: ("net", "vat_amount", "total"),
    Payout: ("amount",),
    RentalCharge: ("amount",),
    Wallet: ("balance",),
}
USD = {
    RentalCharge: ("cost_usd", "fee_usd"),
    Offer: ("price_usd",),
    Bid: ("max_price_usd",),
    Rental: ("price_usd",),
    PriceAlert: ("threshold_usd",),
}


def expected_amounts(obj) -> list[str]:
    model = type(obj)
    shown = [formatting.money(getattr(obj, name), obj.currency) for name in MONEY.get(model, ())]
    shown += [formatting.usd(getattr(obj, name)) for name in USD.get(model, ())]
    if isinstance(obj, LedgerEntry):
        shown.append(formatting.money(obj.amount.amount, obj.currency))
    if isinstance(obj, MarketBook) and obj.best_ask_usd is not None:
        shown.append(formatting.usd(obj.best_ask_usd))
    return shown


@pytest.fixture
def large_amounts(books):  # noqa: F811
    """A top-up past a thousand euros, so that the figures have a grouping separator to get wrong."""
    large = bank_top_up("1234.56", user=books.buyer)
    top_up_credit_bank_transfer(reference=large.reference, operator=books.boss, reason="On the statement")
    return books


def labels_with_amounts(language: str) -> list[str]:
    """The rows' names (their `__str__`, and those the audit log stored) that hold an amount: the
    names are written by the models, not by the admin's columns and fields, and set aside here."""
    with translation.override(language):
        labels = {str(obj) for model in our_models() for obj in model.objects.all()}
    labels |= set(AuditEntry.objects.values_list("target_repr", flat=True))
    return sorted((label for label in labels if amounts_in(label, language)), key=len, reverse=True)


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_amount_of_the_admin_reads_in_the_pages_language(client, large_amounts, language):
    operator_client(client)
    labels = labels_with_amounts(language)
    wrong = {}
    for model in our_models():
        obj = model.objects.order_by("-pk").first()
        for page in (changelist(model, language), change_url(obj, language)):
            response = client.get(page)
            assert response.status_code == 200, page
            if model is OutboxEmail and page.endswith("/change/"):
                continue  # an email as it was sent, in its recipient's language
            text = "\n".join(html_segments(response.content.decode()))
            for label in labels:
                text = text.replace(label, "")
            if found := misread(text, language):
                wrong[page] = found
    assert wrong == {}


MONEY_MODELS = [*MONEY, *USD, LedgerEntry, MarketBook]


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("model", list(dict.fromkeys(MONEY_MODELS)), ids=lambda model: model.__name__)
def test_the_money_tables_show_each_amount_with_its_currency(client, large_amounts, language, model):
    operator_client(client)
    obj = model.objects.order_by("-pk").first()
    with translation.override(language):
        expected = expected_amounts(obj)
    assert expected
    for page in (changelist(model, language), change_url(obj, language)):
        text = "\n".join(html_segments(client.get(page).content.decode()))
        assert [amount for amount in expected if spaced(amount) not in text] == [], page


@pytest.mark.parametrize(("language", "shown"), [("en", "0.92"), ("pt", "0,92"), ("fr", "0,92")])
def test_an_exchange_rate_shows_its_decimals(client, books, language, shown):  # noqa: F811
    operator_client(client)
    rate = ExchangeRate.objects.filter(ledger_transactions__isnull=False).first()
    rate = rate or ExchangeRate.objects.get(currency="EUR", rate=Decimal("0.92"))
    text = html_segments(client.get(change_url(rate, language)).content.decode())
    list_text = html_segments(client.get(changelist(ExchangeRate, language)).content.decode())
    assert formatting.number_exact(rate.rate, language=language) in text + list_text
    assert shown in list_text
