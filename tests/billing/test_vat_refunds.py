"""Reverse charge only on a VAT ID that VIES confirmed lately (issue 14, item 6).

A German business's top-up of 100.00 EUR is reverse-charged only when VIES's last answer about its
number is "valid" and at most VIES_VALID_FOR_DAYS old. Otherwise (VIES said invalid, gave no
verdict, was down, or answered too long ago) German VAT of 19 % is charged, and the quote and the
top-up page say why. When VIES later confirms the number, the VAT still held on each top-up that
was charged it only for that reason goes back to the buyer's wallet, once, with a credit note and
an email. VIES is faked at `requests.get`; everything else is the real code path."""

import uuid
from datetime import timedelta
from decimal import Decimal
from html import unescape

import pytest
import requests
from django.core import mail
from django.utils import translation

from accounts import services as accounts_services
from accounts import vies
from accounts.models import Profile, VatIdStatus, Wallet
from accounts.services import profile_update, profile_vat_id_vies_check
from billing.models import (
    CreditNote,
    Invoice,
    LedgerEntry,
    LedgerTransaction,
    TopUp,
    TopUpRefund,
    TopUpVatRefund,
    VatKind,
)
from billing.services import (
    top_up_create,
    top_up_credit_bank_transfer,
    top_up_mark_paid,
    top_up_quote,
    top_up_refund,
    top_up_vat_refund,
    top_ups_vat_refund_confirmed,
    vat_refund_idempotency_key,
)
from marketplace import formatting
from marketplace.models import OutboxEmail
from tests.billing.support import (
    START,
    assert_books_consistent,
    balance,
    document_page_lines,
    entries_by_code,
    pdf_lines,
    signed_in,
    spaced,
)
from tests.factories import ProfileFactory, operator_make
from tests.threads import run_together

pytestmark = pytest.mark.django_db

D = Decimal
NBSP = "\u00a0"
NUMBER = "DE100000008"  # well-formed, checksum right, and made up
VALID = {"isValid": True, "userError": "VALID", "vatNumber": "100000008"}
INVALID = {"isValid": False, "userError": "INVALID", "vatNumber": "100000008"}
# VIES's answer when the member state's register does not answer: no verdict at all.
NO_VERDICT = {"isValid": False, "userError": "MS_UNAVAILABLE", "vatNumber": "100000008"}
DOWN = requests.ConnectionError("VIES is unreachable")

REASON = {
    "pt": f"Ainda não conseguimos confirmar o seu número de IVA {NUMBER} junto do serviço VIES da UE, por "
          "isso o IVA é acrescentado. Assim que o VIES o confirmar, reembolsamos esse IVA no seu saldo com "
          "uma nota de crédito.",
    "fr": f"Nous n'avons pas encore pu confirmer votre numéro de TVA {NUMBER} auprès du service VIES de "
          f"l'UE{NBSP}: la TVA est donc ajoutée. Dès que VIES l'aura confirmé, nous vous rembourserons cette "
          "TVA sur votre solde par un avoir.",
    "en": f"We could not confirm your VAT number {NUMBER} with the EU's VIES service yet, so VAT is added. "
          "As soon as VIES confirms it, we refund this VAT to your balance with a credit note.",
}


class Answer:
    """What `requests.get` gives back: a VIES answer as its REST API writes it."""

    def __init__(self, payload: dict):
        self.payload = payload

    def raise_for_status(self) -> None:
        return None

    def json(self) -> dict:
        return self.payload


@pytest.fixture(autouse=True)
def _clock(time_machine, settings):
    time_machine.move_to(START, tick=False)
    settings.PLATFORM_COUNTRY = "PT"
    settings.VIES_VALID_FOR_DAYS = 30


@pytest.fixture(autouse=True)
def _books_consistent_after_each_test():
    yield
    assert_books_consistent()


@pytest.fixture
def vies_says(monkeypatch, settings):
    """`vies_says(answer)`: from now on VIES gives this answer (a dict) or fails (an exception)."""
    settings.VIES_URL = "https://vies.invalid/ms/{country}/vat/{number}"
    asked: list[str] = []

    def says(answer):
        def get(url, timeout):
            asked.append(url)
            if isinstance(answer, Exception):
                raise answer
            return Answer(answer)

        monkeypatch.setattr(accounts_services.requests, "get", get)
        return asked

    return says


def german_business(language: str = "pt", vat_id: str = NUMBER) -> Profile:
    return ProfileFactory(
        billing_country="DE", billing_type="business", company_name="GPU Labs GmbH", vat_id=vat_id,
        vat_id_status=VatIdStatus.UNCHECKED, preferred_language=language,
    )


def checked(profile: Profile, vies_says, answer, *, days_ago: int = 0, time_machine=None) -> Profile:
    """The profile as VIES's answer `days_ago` left it (asked through the real check)."""
    vies_says(answer)
    if days_ago:
        time_machine.move_to(START - timedelta(days=days_ago), tick=False)
    profile_vat_id_vies_check(profile_id=profile.pk)
    time_machine.move_to(START, tick=False)
    profile.refresh_from_db()
    return profile


def paid_top_up(user, amount: str = "100", provider: str = "sandbox") -> TopUp:
    top_up = top_up_create(user=user, amount_text=amount, currency="EUR", provider=provider,
                           form_token=uuid.uuid4())
    return top_up_mark_paid(top_up_id=top_up.pk)


def wallet_code(user) -> str:
    return f"wallet:{Wallet.objects.get(user=user).pk}"


def books() -> tuple:
    """Everything a VAT refund could move or write."""
    return (
        LedgerTransaction.objects.count(), LedgerEntry.objects.count(), TopUpVatRefund.objects.count(),
        CreditNote.objects.count(), list(Wallet.objects.order_by("pk").values_list("balance", flat=True)),
        OutboxEmail.objects.count(),
    )


# --- the VAT of a top-up, for each answer of VIES ------------------------------------------------


REVERSE_CHARGED = (VatKind.REVERSE_CHARGE, D("0.00"), D("0.00"), D("100.00"), "")
CHARGED_AWAITING_VIES = (VatKind.STANDARD, D("19.00"), D("19.00"), D("119.00"), NUMBER)
CHARGED_REJECTED = (VatKind.STANDARD, D("19.00"), D("19.00"), D("119.00"), "")


@pytest.mark.parametrize(
    ("answer", "days_ago", "status", "expected"),
    [
        pytest.param(VALID, 0, VatIdStatus.VALID, REVERSE_CHARGED, id="valid-fresh"),
        pytest.param(VALID, 30, VatIdStatus.VALID, REVERSE_CHARGED, id="valid-30-days-old"),
        pytest.param(VALID, 31, VatIdStatus.VALID, CHARGED_AWAITING_VIES, id="valid-stale"),
        pytest.param(INVALID, 0, VatIdStatus.INVALID, CHARGED_REJECTED, id="invalid"),
        pytest.param(NO_VERDICT, 0, VatIdStatus.UNKNOWN, CHARGED_AWAITING_VIES, id="unknown"),
        pytest.param(DOWN, 0, VatIdStatus.UNKNOWN, CHARGED_AWAITING_VIES, id="down"),
    ],
)
def test_the_vat_of_a_top_up_for_each_answer_of_vies(
    vies_says, time_machine, answer, days_ago, status, expected
):
    profile = checked(german_business(), vies_says, answer, days_ago=days_ago, time_machine=time_machine)
    assert profile.vat_id_status == status

    top_up = paid_top_up(profile.user)

    kind, rate, vat, total, unconfirmed = expected
    assert (top_up.vat_kind, top_up.vat_rate, top_up.vat_amount, top_up.amount, top_up.total) == (
        kind, rate, vat, D("100.00"), total
    )
    assert top_up.unconfirmed_vat_id == unconfirmed
    lines = {wallet_code(profile.user): D("100.00"), "clearing:sandbox:EUR": -total}
    if vat:
        lines["vat_payable:EUR"] = vat
    assert entries_by_code(top_up.ledger_transaction) == lines
    invoice = Invoice.objects.get(top_up=top_up)
    assert (invoice.net, invoice.vat_kind, invoice.vat_amount, invoice.total) == (
        D("100.00"), kind, vat, total
    )
    assert not TopUpVatRefund.objects.exists()


@pytest.mark.parametrize("no_answer", [NO_VERDICT, DOWN], ids=["unknown", "down"])
def test_no_answer_keeps_a_valid_answer_until_it_expires(vies_says, time_machine, no_answer):
    profile = checked(german_business(), vies_says, VALID, days_ago=29, time_machine=time_machine)
    checked_at = profile.vat_id_checked_at
    vies_says(no_answer)
    assert profile_vat_id_vies_check(profile_id=profile.pk) == VatIdStatus.UNKNOWN  # the refresh
    profile.refresh_from_db()
    assert (profile.vat_id_status, profile.vat_id_checked_at) == (VatIdStatus.VALID, checked_at)
    assert paid_top_up(profile.user).vat_amount == D("0.00")  # 29 days old: still confirmed

    time_machine.move_to(START + timedelta(days=2), tick=False)  # 31 days old now
    late = paid_top_up(profile.user)
    assert (late.vat_amount, late.unconfirmed_vat_id) == (D("19.00"), NUMBER)


def test_no_answer_keeps_a_rejection(vies_says, time_machine):
    profile = checked(german_business(), vies_says, INVALID, time_machine=time_machine)
    vies_says(DOWN)
    profile_vat_id_vies_check(profile_id=profile.pk)
    profile.refresh_from_db()
    assert profile.vat_id_status == VatIdStatus.INVALID
    assert paid_top_up(profile.user).unconfirmed_vat_id == ""  # no refund promised for a rejected number


def test_the_setting_says_how_long_a_valid_answer_lasts(vies_says, time_machine, settings):
    settings.VIES_VALID_FOR_DAYS = 7
    profile = checked(german_business(), vies_says, VALID, days_ago=8, time_machine=time_machine)
    assert paid_top_up(profile.user).vat_amount == D("19.00")
    settings.VIES_VALID_FOR_DAYS = 8
    assert paid_top_up(profile.user).vat_amount == D("0.00")


@pytest.mark.parametrize(
    ("fields", "vat"),
    [
        ({"billing_country": "PT", "vat_id": "PT501964843"}, D("23.00")),  # the platform's own country
        ({"billing_type": "individual", "company_name": ""}, D("19.00")),  # a consumer's number: nothing
        ({"billing_country": "US", "vat_id": ""}, D("0.00")),  # outside the EU
    ],
)
def test_no_refund_is_promised_where_a_confirmed_number_would_change_nothing(fields, vat):
    profile = ProfileFactory(**{
        "billing_country": "DE", "billing_type": "business", "company_name": "GPU Labs", "vat_id": NUMBER,
        "vat_id_status": VatIdStatus.UNKNOWN, **fields,
    })
    quote = top_up_quote(profile=profile, amount=D("100.00"), currency="EUR")
    assert (quote.vat_amount, quote.unconfirmed_vat_id, quote.reason) == (vat, "", "")


# --- the quote and the top-up page say why ----------------------------------------------------------


@pytest.mark.parametrize("language", ["pt", "fr", "en"])
def test_the_quote_says_why_vat_is_added(vies_says, time_machine, language):
    profile = checked(german_business(language), vies_says, DOWN, time_machine=time_machine)
    with translation.override(language):
        quote = top_up_quote(profile=profile, amount=D("100.00"), currency="EUR")
    assert (quote.vat_kind, quote.vat_amount, quote.total, quote.unconfirmed_vat_id) == (
        VatKind.STANDARD, D("19.00"), D("119.00"), NUMBER
    )
    assert quote.reason == REASON[language]


@pytest.mark.parametrize("language", ["pt", "fr"])
def test_the_top_up_pages_say_why_vat_is_added(vies_says, time_machine, language):
    profile = checked(german_business(language), vies_says, NO_VERDICT, time_machine=time_machine)
    client = signed_in(profile.user)

    form_page = unescape(client.get(f"/{language}/account/top-up/").content.decode())
    assert f'<p class="notice" data-testid="vat-reason">{REASON[language]}</p>' in form_page
    # Each amount offered shows its total with the 19 % added.
    assert formatting.money(D("119.00"), "EUR", language=language) in form_page

    top_up = top_up_create(user=profile.user, amount_text="100", currency="EUR", provider="bank",
                           form_token=uuid.uuid4())
    detail = unescape(client.get(f"/{language}/account/top-ups/{top_up.pk}/").content.decode())
    assert REASON[language] in detail
    assert formatting.money(D("119.00"), "EUR", language=language) in detail


def test_a_confirmed_number_shows_no_reason(vies_says, time_machine):
    profile = checked(german_business("fr"), vies_says, VALID, time_machine=time_machine)
    page = unescape(signed_in(profile.user).get("/fr/account/top-up/").content.decode())
    assert 'data-testid="vat-reason"' not in page
    assert "Autoliquidation" in page


# --- VIES confirms the number later: the VAT goes back, once ---------------------------------------


def test_vies_confirming_the_number_later_refunds_the_vat_once_with_a_credit_note(
    vies_says, time_machine, django_capture_on_commit_callbacks, outbox_sent
):
    profile = checked(german_business("pt"), vies_says, NO_VERDICT, time_machine=time_machine)
    top_up = paid_top_up(profile.user)
    assert (top_up.vat_amount, Wallet.objects.get(user=profile.user).balance) == (D("19.00"), D("100.00"))
    outbox_sent()  # the receipt
    mail.outbox.clear()

    vies_says(VALID)
    with django_capture_on_commit_callbacks(execute=True):
        assert profile_vat_id_vies_check(profile_id=profile.pk) == VatIdStatus.VALID

    refund = TopUpVatRefund.objects.get()
    assert (refund.top_up, refund.currency, refund.vat_amount, refund.vat_id, refund.confirmed_at) == (
        top_up, "EUR", D("19.00"), NUMBER, START
    )
    posted = refund.ledger_transaction
    assert (posted.kind, posted.idempotency_key) == (
        LedgerTransaction.Kind.REFUND, vat_refund_idempotency_key(top_up_id=top_up.pk)
    )
    assert posted.idempotency_key == f"top-up:{top_up.pk}:vat-refund"
    assert entries_by_code(posted) == {"vat_payable:EUR": D("-19.00"), wallet_code(profile.user): D("19.00")}
    assert Wallet.objects.get(user=profile.user).balance == D("119.00")
    assert balance("vat_payable:EUR") == D("0.00")

    note = CreditNote.objects.get()
    invoice = Invoice.objects.get(top_up=top_up)
    assert (note.number, note.year, note.sequence) == ("EXC-CN-2026-000001", 2026, 1)
    assert (note.vat_refund, note.refund, note.invoice) == (refund, None, invoice)
    assert (note.currency, note.net, note.vat_kind, note.vat_rate, note.vat_amount, note.total) == (
        "EUR", D("0.00"), VatKind.STANDARD, D("19.00"), D("19.00"), D("19.00")
    )
    assert (note.buyer, note.seller) == (invoice.buyer, invoice.seller)

    [email] = outbox_sent()
    assert email.to == [profile.user.email]
    assert email.subject == f"EverXCloud: o IVA do seu carregamento {top_up.reference} foi reembolsado"
    vat = formatting.money(D("19.00"), "EUR", language="pt")
    held = formatting.money(D("119.00"), "EUR", language="pt")
    assert (
        f"O serviço VIES da UE confirmou o seu número de IVA {NUMBER}, pelo que o seu carregamento "
        f"{top_up.reference} fica sujeito a autoliquidação. Devolvemos ao seu saldo EverXCloud o IVA que "
        f"pagou, {vat}."
    ) in email.body
    assert f"O seu saldo é agora de {held}." in email.body
    assert f"/pt/account/credit-notes/{note.number}/" in email.body

    # VIES says "valid" again (the next refresh), and billing is asked again: nothing moves twice.
    before = books()
    with django_capture_on_commit_callbacks(execute=True):
        profile_vat_id_vies_check(profile_id=profile.pk)
        assert top_ups_vat_refund_confirmed(user_id=profile.user_id) == []
        assert top_up_vat_refund(top_up_id=top_up.pk) is None
    assert books() == before


def test_every_top_up_charged_while_the_number_awaited_vies_is_refunded(vies_says, time_machine):
    profile = checked(german_business(), vies_says, DOWN, time_machine=time_machine)
    first, second = paid_top_up(profile.user, "100"), paid_top_up(profile.user, "33.33")  # 6.33 VAT
    vies_says(VALID)
    profile_vat_id_vies_check(profile_id=profile.pk)
    refunds = {refund.top_up_id: refund.vat_amount for refund in TopUpVatRefund.objects.all()}
    assert refunds == {first.pk: D("19.00"), second.pk: D("6.33")}
    assert Wallet.objects.get(user=profile.user).balance == D("133.33") + D("25.33")
    assert sorted(CreditNote.objects.values_list("sequence", flat=True)) == [1, 2]


def test_a_stale_answer_confirmed_again_refunds_what_was_charged_meanwhile(vies_says, time_machine):
    profile = checked(german_business(), vies_says, VALID, days_ago=31, time_machine=time_machine)
    top_up = paid_top_up(profile.user)
    assert top_up.unconfirmed_vat_id == NUMBER
    vies_says(VALID)
    profile_vat_id_vies_check(profile_id=profile.pk)  # the daily refresh asks again
    assert TopUpVatRefund.objects.get().vat_amount == D("19.00")


def test_a_top_up_paid_after_vies_confirmed_is_refunded_as_it_is_paid(vies_says, time_machine):
    profile = checked(german_business(), vies_says, NO_VERDICT, time_machine=time_machine)
    pending = top_up_create(user=profile.user, amount_text="100", currency="EUR", provider="bank",
                            form_token=uuid.uuid4())
    assert pending.total == D("119.00")  # what the buyer transfers
    vies_says(VALID)
    profile_vat_id_vies_check(profile_id=profile.pk)
    assert not TopUpVatRefund.objects.exists()  # nothing paid yet, nothing to give back

    top_up_credit_bank_transfer(reference=pending.reference, operator=operator_make("finance"),
                                reason="On the statement")

    assert TopUpVatRefund.objects.get(top_up=pending).vat_amount == D("19.00")
    assert Wallet.objects.get(user=profile.user).balance == D("119.00")


@pytest.mark.parametrize(
    ("operator_refund", "vat_back"),
    [("50", D("9.50")), ("100", None)],  # half refunded by an operator: half the VAT is left
)
def test_the_vat_refund_gives_back_only_the_vat_still_held(
    vies_says, time_machine, operator_refund, vat_back
):
    profile = checked(german_business(), vies_says, DOWN, time_machine=time_machine)
    top_up = paid_top_up(profile.user)
    top_up_refund(top_up_id=top_up.pk, operator=operator_make("finance"), amount_text=operator_refund,
                  reason="Asked", request_key=uuid.uuid4().hex)
    vies_says(VALID)
    profile_vat_id_vies_check(profile_id=profile.pk)
    refund = TopUpVatRefund.objects.filter(top_up=top_up).first()
    assert (refund.vat_amount if refund else None) == vat_back
    assert balance("vat_payable:EUR") == D("0.00")


def test_an_operator_refund_after_the_vat_refund_gives_back_no_vat(vies_says, time_machine):
    profile = checked(german_business(), vies_says, DOWN, time_machine=time_machine)
    top_up = paid_top_up(profile.user)
    vies_says(VALID)
    profile_vat_id_vies_check(profile_id=profile.pk)
    refund = top_up_refund(top_up_id=top_up.pk, operator=operator_make("finance"), amount_text="100",
                           reason="Leaving", request_key=uuid.uuid4().hex)
    assert (refund.amount, refund.vat_amount, refund.total) == (D("100.00"), D("0.00"), D("100.00"))
    assert entries_by_code(refund.ledger_transaction) == {
        wallet_code(profile.user): D("-100.00"), "clearing:sandbox:EUR": D("100.00"),
    }
    assert Wallet.objects.get(user=profile.user).balance == D("19.00")  # the VAT VIES's answer gave back


# --- nothing moves for a top-up that was not charged for that reason --------------------------------


def test_no_vat_refund_for_a_number_vies_rejected(vies_says, time_machine):
    profile = checked(german_business(), vies_says, INVALID, time_machine=time_machine)
    paid_top_up(profile.user)
    before = books()
    vies_says(VALID)
    profile_vat_id_vies_check(profile_id=profile.pk)
    assert books() == before


def test_no_vat_refund_for_a_reverse_charged_top_up(vies_says, time_machine):
    profile = checked(german_business(), vies_says, VALID, time_machine=time_machine)
    paid_top_up(profile.user)
    before = books()
    profile_vat_id_vies_check(profile_id=profile.pk)
    assert books() == before


def test_no_vat_refund_when_vies_confirms_another_number(vies_says, time_machine):
    profile = checked(german_business(), vies_says, DOWN, time_machine=time_machine)
    top_up = paid_top_up(profile.user)
    profile_update(user=profile.user, fields={"vat_id": "DE136695976"})
    before = books()
    vies_says(VALID)
    profile_vat_id_vies_check(profile_id=profile.pk)
    assert Profile.objects.get(pk=profile.pk).vat_id_status == VatIdStatus.VALID
    assert books() == before
    assert TopUp.objects.get(pk=top_up.pk).unconfirmed_vat_id == NUMBER


def test_no_vat_refund_for_a_consumer_or_when_vies_does_not_confirm(vies_says, time_machine):
    consumer = ProfileFactory(billing_country="DE")
    paid_top_up(consumer.user)
    business = checked(german_business(), vies_says, DOWN, time_machine=time_machine)
    paid_top_up(business.user)
    before = books()
    for answer in (NO_VERDICT, DOWN, INVALID):
        vies_says(answer)
        profile_vat_id_vies_check(profile_id=business.pk)
    assert top_ups_vat_refund_confirmed(user_id=consumer.user_id) == []
    assert top_ups_vat_refund_confirmed(user_id=business.user_id) == []  # VIES now says invalid
    assert books() == before


def test_bad_input_moves_nothing(vies_says, time_machine):
    profile = checked(german_business(), vies_says, DOWN, time_machine=time_machine)
    paid_top_up(profile.user)
    before = books()
    assert top_up_vat_refund(top_up_id=999_999_999) is None
    assert top_ups_vat_refund_confirmed(user_id=999_999_999) == []
    assert profile_vat_id_vies_check(profile_id=999_999_999) == VatIdStatus.NONE
    assert books() == before


@pytest.mark.django_db(transaction=True)
def test_two_confirmations_at_the_same_moment_refund_once(vies_says, time_machine):
    profile = checked(german_business(), vies_says, DOWN, time_machine=time_machine)
    top_up = paid_top_up(profile.user)
    Profile.objects.filter(pk=profile.pk).update(vat_id_status=VatIdStatus.VALID, vat_id_checked_at=START)
    results, errors = run_together(4, lambda index: top_ups_vat_refund_confirmed(user_id=profile.user_id))
    assert not errors
    assert sum(len(made) for made in results) == 1
    assert TopUpVatRefund.objects.get().top_up == top_up
    assert LedgerTransaction.objects.filter(idempotency_key=f"top-up:{top_up.pk}:vat-refund").count() == 1
    assert Wallet.objects.get(user=profile.user).balance == D("119.00")


def test_billing_listens_to_the_confirmations_of_accounts():
    assert vies._hook is top_ups_vat_refund_confirmed


# --- what the buyer reads afterwards -------------------------------------------------------------------


def test_the_buyer_reads_the_vat_credit_note_and_the_top_up_in_french(vies_says, time_machine):
    profile = checked(german_business("fr"), vies_says, DOWN, time_machine=time_machine)
    top_up = paid_top_up(profile.user)
    vies_says(VALID)
    profile_vat_id_vies_check(profile_id=profile.pk)
    note = CreditNote.objects.get()
    client = signed_in(profile.user)

    page = document_page_lines(client.get(f"/fr/account/credit-notes/{note.number}/").content.decode())
    invoice = Invoice.objects.get(top_up=top_up)
    assert page[:3] == [
        f"Avoir {note.number}", f"Rectifie la facture {invoice.number}", "Émise le 1er décembre 2026"
    ]
    assert page[-4:] == [
        f"Remboursement du solde prépayé pour des heures GPU sur EverXCloud 0,00{NBSP}€",
        f"TVA (19{NBSP}%) 19,00{NBSP}€",
        f"Total remboursé 19,00{NBSP}€",
        f"VIES a confirmé le numéro de TVA {NUMBER}{NBSP}: la TVA facturée sur la facture rectifiée est "
        f"créditée sur le solde de l'acheteur. Autoliquidation{NBSP}: TVA due par le preneur, article 196 de "
        "la directive 2006/112/CE du Conseil.",
    ]
    pdf = pdf_lines(client.get(f"/fr/account/credit-notes/{note.number}/pdf/").content)
    assert spaced(pdf[:3]) == spaced(page[:3])
    assert " ".join(spaced(pdf)).endswith(" ".join(spaced(page[-1:])))

    detail = unescape(client.get(f"/fr/account/top-ups/{top_up.pk}/").content.decode())
    assert (
        f"VIES a confirmé votre numéro de TVA {NUMBER}{NBSP}: la TVA de ce rechargement, 19,00{NBSP}€, "
        f"vous a été remboursée sur votre solde par l'avoir {note.number}."
    ) in detail
    assert REASON["fr"] not in detail
    overview = client.get("/fr/account/").content.decode()
    assert f"/fr/account/credit-notes/{note.number}/" in overview
    assert f"{top_up.reference}" in overview
    assert not TopUpRefund.objects.exists()
