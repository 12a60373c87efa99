"""The checks of slip_checks.py, each on text written right and on the same text slipped."""

import pytest

from tests.marketplace.slip_checks import (
    brazilian_country_names,
    brazilian_slips,
    money_slips,
    typography_slips,
)


@pytest.mark.parametrize(
    ("text", "slipped"),
    [
        ("Votre solde\u00a0: 12\u00a0$US", False), ("Votre solde\u202f: 12\u00a0$US", False),
        ("Votre solde : 12\u00a0$US", True), ("Votre solde: 12\u00a0$US", True),
        ("Vraiment\u00a0? Oui\u00a0!", False), ("Vraiment ? Oui", True), ("Oui !", True), ("Oui!", True),
        ("Deux offres\u00a0; une enchère", False), ("Deux offres ; une enchère", True),
        ("«\u00a0offre\u00a0»", False), ("« offre\u00a0»", True), ("«\u00a0offre »", True),
        ("«\u00a0offre»", True),
        ("Ouvert de 10:30 à 18:00", False), ("https://everxcloud.example/fr/", False),
        ("Voir /fr/marche/?gpu=h100&page=2", False), ("L'en-tête Authorization: Bearer", False),
        ("Idempotency-Key: 4f1c", False),
    ],
)
def test_french_punctuation_wants_its_no_break_space(text, slipped):
    assert bool(typography_slips(text)) is slipped


def test_a_brazilian_country_name_is_a_slip_and_the_european_one_is_not():
    assert brazilian_slips("Servidores na Polônia e no Irã") == ["Irã", "Polônia"]
    assert brazilian_slips("Servidores na Polónia e no Irão") == []
    # Only the names the two locales write otherwise, read from Babel, not a copy.
    names = brazilian_country_names()
    assert {"Polônia", "Irã", "Vietnã", "Quênia"} <= names
    assert not {"Polónia", "Portugal", "França", "São Martinho", "Costa do Marfim"} & names


def test_a_brazilian_word_is_a_slip_and_its_european_form_is_not():
    assert brazilian_slips("Faça o seu cadastro e salve o arquivo") == ["cadastro", "arquivo"]
    assert brazilian_slips("Habilitar a autenticação na seção Equipe") == ["equipe", "habilitar", "seção"]
    assert brazilian_slips("Ative a autenticação na secção Equipa; guarde o ficheiro") == []
    assert brazilian_slips("Os Usuários") == ["usuário", "usuários"]
    # An address is no word of the sentence.
    assert brazilian_slips("Escreva para contato@example.com ou veja /arquivo/2026") == []


@pytest.mark.parametrize(
    ("language", "right", "wrong"),
    [
        ("en", "Balance: $1,234.50, or €12.00", "Balance: $1.234,50"),
        ("en", "Refund -$0.63", "Refund 0,63 USD"),
        ("pt", "Saldo: US$\u00a01.234,50", "Saldo: US$ 1,234.50"),
        ("pt", "Total: €\u00a012,00", "Total: 0.69 EUR"),
        ("pt", "Saldo: US$\u00a00,33", "Saldo: $0,33"),
        ("fr", "Solde\u00a0: 1\u202f234,50\u00a0$US", "Solde\u00a0: 0.69 USD"),
        ("fr", "Remboursement de -0,63\u00a0€", "Remboursement de -0,63 €,00"),
        ("fr", "Solde\u00a0: 0,33\u00a0$US", "Solde\u00a0: $0,33"),
        ("fr", "Solde\u00a0: 12\u00a0£GB", "Solde\u00a0: 1.234,50\u00a0€"),
    ],
)
def test_an_amount_is_written_in_the_pages_number_format(language, right, wrong):
    assert money_slips(right, language) == []
    assert money_slips(wrong, language) != []


def test_a_number_without_a_currency_is_no_amount():
    assert money_slips("10.5 GB of memory, 1,008 GB/s", "fr") == []
    assert money_slips("Version 2.1, 3 GPUs", "pt") == []
