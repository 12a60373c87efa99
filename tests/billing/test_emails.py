"""Billing's five emails, each rendered by marketplace.emails.email_send from its templates in the
buyer's language: the top-up receipt, the top-up refund, the rental ended by an operator, the rental
ended unpaid and the low-balance warning. Whole messages are compared; nothing is HTML-escaped."""

import uuid
from datetime import timedelta
from decimal import Decimal
from types import SimpleNamespace

import pytest
from django.core import mail
from django.utils import translation

from billing.services import (
    low_balance_warnings_send,
    rental_charge_next_hour,
    rental_end_by_operator,
    rentals_charge_due,
    top_up_create,
    top_up_pay_sandbox,
    top_up_refund,
)
from catalog.models import GpuModel
from marketplace.emails import email_render
from marketplace.models import OutboxEmail
from tests.billing.support import HOUR, START, buyer_with, rental_for
from tests.factories import ExchangeRateFactory, ProfileFactory, operator_make

pytestmark = pytest.mark.django_db

GPU = "L'Étoile & Co"  # an apostrophe and an ampersand, which HTML escaping would mangle


@pytest.fixture(autouse=True)
def _setup(time_machine):
    time_machine.move_to(START, tick=False)
    ExchangeRateFactory(currency="EUR", rate=Decimal("0.92000000"), valid_from=START - timedelta(days=1))


@pytest.fixture
def sent(django_capture_on_commit_callbacks, outbox_sent):
    """Run a service with its after-commit work (the Celery tasks, eager here) and return the one
    email it wrote, as the outbox sends it. What the steps before wrote is sent and set aside
    first: a receipt written while setting up is not the email of the service under test."""

    def run(service, **kwargs):
        outbox_sent().clear()
        with django_capture_on_commit_callbacks(execute=True):
            service(**kwargs)
        [message] = outbox_sent()
        assert message.alternatives == []  # plain text only: no HTML template for these
        return message

    return run


def paid_top_up(language: str):
    buyer = ProfileFactory(preferred_language=language, billing_country="PT").user  # 23 % VAT
    top_up = top_up_create(user=buyer, amount_text="100", currency="EUR", provider="sandbox",
                           form_token=uuid.uuid4())
    return buyer, top_up


def gpu_named(rental, name: str = GPU) -> None:
    GpuModel.objects.filter(pk=rental.gpu_model_id).update(name=name)


def test_the_receipt_in_english(sent):
    buyer, top_up = paid_top_up("en")

    message = sent(top_up_pay_sandbox, user=buyer, top_up_id=top_up.pk)

    number = top_up.invoice.number
    assert message.to == [buyer.email]
    assert message.subject == f"Your top-up is credited (invoice {number})"
    assert message.body == (
        "Hello,\n\n"
        "We have credited €100.00 to your EverXCloud wallet. You paid €123.00 in total.\n\n"
        f"Your invoice {number} is ready: http://testserver/en/account/invoices/{number}/\n\n"
        "Thank you for using EverXCloud.\n"
    )


def test_the_top_up_refund_in_french_keeps_the_no_break_space_of_its_subject(sent):
    buyer, top_up = paid_top_up("fr")
    top_up_pay_sandbox(user=buyer, top_up_id=top_up.pk)

    message = sent(
        top_up_refund, top_up_id=top_up.pk, operator=operator_make("finance"), amount_text="40",
        reason="Customer asked", request_key="k1",
    )

    reference, number = top_up.reference, top_up.refunds.get().credit_note.number
    assert message.subject == f"EverXCloud\u00a0: remboursement de votre rechargement {reference}"
    assert message.body == (
        "Bonjour,\n\n"
        f"Nous avons remboursé 40,00\u00a0€ de votre rechargement {reference}, ainsi que la TVA "
        "correspondante, 9,20\u00a0€\u00a0: 49,20\u00a0€ au total vous sont restitués par le moyen de "
        "paiement utilisé.\n\n"
        "Votre solde est désormais de 60,00\u00a0€.\n\n"
        f"Votre avoir {number}\u00a0: http://testserver/fr/account/credit-notes/{number}/\n\n"
        "Merci d'utiliser EverXCloud.\n"
    )


def test_the_rental_ended_by_an_operator_in_french_names_the_gpu_unescaped(sent):
    buyer = buyer_with("EUR", "50.00", preferred_language="fr")
    rental = rental_for(buyer, gpus=2)
    gpu_named(rental)
    rental_charge_next_hour(rental_id=rental.pk, now=START)

    message = sent(rental_end_by_operator, rental_id=rental.pk, operator=operator_make("finance"),
                   reason="Host under maintenance")

    assert message.subject == f"Votre location EverXCloud {rental.pk} est terminée"
    assert message.body == (
        "Bonjour,\n\n"
        f"EverXCloud a mis fin à votre location {rental.pk} de 2 × L'Étoile & Co le 1er décembre 2026 "
        "10:00 (UTC). Son serveur n'exécute plus votre travail.\n\n"
        "Les minutes inutilisées de l'heure que vous aviez payée, soit 5,30\u00a0€, ont été "
        "recréditées sur votre solde.\n\n"
        "Répondez à cet e-mail si vous avez la moindre question.\n\n"
        "Merci d'utiliser EverXCloud.\n"
    )


def test_a_rental_whose_first_hour_could_not_be_paid_in_french(sent):
    buyer = buyer_with("EUR", "1.00", preferred_language="fr")
    rental = rental_for(buyer, gpus=2)
    gpu_named(rental)

    message = sent(rental_charge_next_hour, rental_id=rental.pk, now=START)

    assert message.subject == f"Votre location EverXCloud {rental.pk} est terminée"
    assert message.body == (
        "Bonjour,\n\n"
        f"Votre location {rental.pk} de 2 × L'Étoile & Co n'a pas démarré\u00a0: votre solde ne "
        "permettait pas de payer sa première heure. Ses GPU ont été remis sur le marché.\n\n"
        "Rechargez votre solde pour louer à nouveau des GPU\u00a0: http://testserver/fr/account/top-up/\n\n"
        "Merci d'utiliser EverXCloud.\n"
    )


def test_a_rental_whose_next_hour_could_not_be_paid_in_portuguese(sent, time_machine):
    buyer = buyer_with("EUR", "3.00", preferred_language="pt")  # one hour at 2.65
    rental = rental_for(buyer)
    gpu_named(rental)
    rental_charge_next_hour(rental_id=rental.pk, now=START)
    time_machine.move_to(START + HOUR, tick=False)

    message = sent(rentals_charge_due)

    assert message.subject == f"O seu aluguer EverXCloud {rental.pk} terminou"
    assert message.body == (
        "Olá,\n\n"
        f"O seu aluguer {rental.pk} de 1 × L'Étoile & Co terminou em 1 de dezembro de 2026 às 11:00 "
        "(UTC) porque o seu saldo não foi suficiente para pagar a hora seguinte. As respetivas GPU "
        "voltaram ao mercado.\n\n"
        "Carregue o seu saldo para voltar a alugar GPU: http://testserver/pt/account/top-up/\n\n"
        "Obrigado por utilizar a EverXCloud.\n"
    )


def test_the_low_balance_warning_in_portuguese(sent, settings):
    settings.LOW_BALANCE_WARNING_HOURS = 3
    buyer = buyer_with("EUR", "8.00", preferred_language="pt")
    rental_charge_next_hour(rental_id=rental_for(buyer).pk, now=START)  # 5.35 left: two hours

    message = sent(low_balance_warnings_send, now=START)

    assert message.subject == "O seu saldo EverXCloud está a ficar baixo"
    assert message.body == (
        "Olá,\n\n"
        "O seu saldo EverXCloud de €\u00a05,35 cobre cerca de mais 2 horas dos seus alugueres em curso, "
        "que custam US$\u00a02,88 por hora no conjunto. À taxa de câmbio atual, isso corresponde a "
        "€\u00a02,65 por hora.\n\n"
        "Quando o seu saldo não puder pagar a hora seguinte de um aluguer, o aluguer termina nessa hora "
        "e as respetivas GPU voltam ao mercado.\n\n"
        "Carregue o seu saldo para manter os seus alugueres em curso: http://testserver/pt/account/top-up/\n\n"
        "Enviamos este aviso uma única vez e só voltamos a enviar outro se o seu saldo recuperar e depois "
        "voltar a ficar baixo.\n\n"
        "Obrigado por utilizar a EverXCloud.\n"
    )


# --- nothing escaped, whatever the values -------------------------------------------------------------

ODD = "D'Or & <Fils>"  # what a name, a reference or a number must never turn into &#x27;, &amp;, &lt;

TEMPLATES = {
    "billing/email/receipt": {
        "invoice": SimpleNamespace(number=ODD), "amount": ODD, "total": ODD, "invoice_url": ODD,
    },
    "billing/email/top_up_refund": {
        "reference": ODD, "amount": ODD, "vat": ODD, "total": ODD, "balance": ODD, "number": ODD, "url": ODD,
    },
    "billing/email/rental_ended_by_operator": {
        "number": ODD, "gpus": 2, "gpu": ODD, "ended_at": ODD, "amount": ODD,
    },
    "billing/email/rental_unpaid": {
        "number": ODD, "gpus": 2, "gpu": ODD, "ended_at": ODD, "did_not_start": False, "url": ODD,
    },
    "billing/email/low_balance": {
        "hours": 2, "hours_text": "2", "balance": ODD, "rate": ODD, "rate_wallet": ODD, "top_up_url": ODD,
    },
}


@pytest.mark.parametrize("language", ["en", "fr", "pt"])
@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_subjects_and_bodies_are_never_html_escaped(template, language):
    with translation.override(language):
        subject, body, html = email_render(template=template, context=TEMPLATES[template])

    if template != "billing/email/low_balance":  # the only subject without a value in it
        assert ODD in subject
    assert ODD in body and html == ""
    for escaped in ("&#x27;", "&#39;", "&amp;", "&lt;", "&gt;"):
        assert escaped not in subject and escaped not in body
    assert "\n" not in subject


# --- written only for what they are about ----------------------------------------------------------


def test_nothing_is_written_for_what_no_email_is_about(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        paid_top_up("en")  # not paid: no receipt
        running = rental_for(buyer_with("USD", "100.00"))
        rental_charge_next_hour(rental_id=running.pk, now=START)  # running: neither ended email

    assert OutboxEmail.objects.count() == 0
    assert mail.outbox == []
