"""The emails issue 14 added, each written with its cause: the buyer's when a server failure ends a
rental (and what came back), and the seller owners' when an operator pays or rejects a payout.
Whole messages are compared, in the recipient's language."""

from datetime import timedelta
from decimal import Decimal

import pytest

from accounts.models import Profile
from billing.services import payout_mark_paid, payout_reject, payout_request, server_failure_report
from catalog.models import GpuModel
from marketplace.models import OutboxEmail
from sellers.models import MemberRole
from tests.billing.support import START, buyer_with, charged_rental, earn, member
from tests.factories import ExchangeRateFactory, RentalFactory, SellerFactory, operator_make

pytestmark = pytest.mark.django_db

NBSP = "\u00a0"
FAILED_AT = START + timedelta(minutes=20, seconds=30)  # 39 whole minutes of the paid hour unused


@pytest.fixture(autouse=True)
def _clock(time_machine):
    time_machine.move_to(START + timedelta(minutes=30), tick=False)
    ExchangeRateFactory(currency="EUR", rate=Decimal("0.92000000"))


def test_a_server_failure_tells_each_buyer_the_rental_ended_and_what_came_back(outbox_sent):
    paid = charged_rental("EUR")  # 2.65 EUR for the hour: 39/60 of it is 1.72
    Profile.objects.filter(user=paid.buyer).update(preferred_language="pt")
    GpuModel.objects.filter(pk=paid.gpu_model_id).update(name="L'Étoile & Co")
    unpaid = RentalFactory(buyer=buyer_with("USD", preferred_language="en"), offer=paid.offer,
                           started_at=START + timedelta(minutes=10))  # starting: nothing paid yet
    outbox_sent().clear()

    server_failure_report(server_id=paid.server_id, at=FAILED_AT)
    server_failure_report(server_id=paid.server_id, at=FAILED_AT)  # reported twice: told once

    by_recipient = {message.to[0]: message for message in outbox_sent()}
    assert len(outbox_sent()) == 2
    message = by_recipient[paid.buyer.email]
    assert message.subject == f"O seu aluguer EverXCloud {paid.pk} terminou"
    assert message.body == (
        "Olá,\n\n"
        f"O seu aluguer {paid.pk} de 1 × L'Étoile & Co terminou em 1 de dezembro de 2026 às 10:20 (UTC) "
        "porque o respetivo servidor falhou.\n\n"
        f"Devolvemos ao seu saldo os minutos não utilizados da hora que tinha pago, €{NBSP}1,72.\n\n"
        "Responda a este e-mail se tiver alguma questão.\n\n"
        "Obrigado por utilizar a EverXCloud.\n"
    )
    other = by_recipient[unpaid.buyer.email]
    assert other.subject == f"Your EverXCloud rental {unpaid.pk} has ended"
    assert f"Your rental {unpaid.pk} of 1 × L'Étoile & Co ended on " in other.body
    assert "because its server failed.\n\nReply to this email" in other.body  # nothing was paid
    assert set(OutboxEmail.objects.values_list("key", flat=True)) == {
        f"rental-ended:{paid.pk}", f"rental-ended:{unpaid.pk}"
    }


@pytest.fixture
def seller():
    seller = SellerFactory(name="Alpha GPU Lda")
    earn(seller, "300.00")
    return seller


def owners_and_a_member(seller):
    french, english = member(seller), member(seller)
    Profile.objects.update_or_create(user=french, defaults={"preferred_language": "fr"})
    Profile.objects.update_or_create(user=english, defaults={"preferred_language": "en"})
    member(seller, role=MemberRole.MEMBER)  # not an owner: not told
    return french, english


def test_a_paid_payout_tells_each_owner_in_their_language(seller, outbox_sent):
    french, english = owners_and_a_member(seller)
    payout = payout_request(seller_id=seller.pk, requested_by=french, amount_text="120.50")

    payout_mark_paid(payout_id=payout.pk, operator=operator_make("finance"), reason="SEPA 2026-12-01 #7")

    messages = {message.to[0]: message for message in outbox_sent()}
    assert set(messages) == {french.email, english.email}
    assert messages[french.email].subject == f"EverXCloud a versé 120,50{NBSP}$US à Alpha GPU Lda"
    assert messages[french.email].body == (
        "Bonjour,\n\n"
        f"Nous avons effectué le versement {payout.pk} de Alpha GPU Lda, d'un montant de 120,50{NBSP}$US, "
        "par virement bancaire sur le compte indiqué dans ses coordonnées de versement. Il peut falloir "
        "quelques jours ouvrés pour qu'il arrive.\n\n"
        f"Référence du virement bancaire{NBSP}: SEPA 2026-12-01 #7\n\n"
        f"Vos versements{NBSP}: http://testserver/fr/seller/payouts/\n\n"
        "Merci d'utiliser EverXCloud.\n"
    )
    assert messages[english.email].subject == "EverXCloud has paid out $120.50 to Alpha GPU Lda"
    # The transfer's reference, so that the seller finds the payment on its statement.
    assert "Reference of the bank transfer: SEPA 2026-12-01 #7" in messages[english.email].body


def test_a_rejected_payout_tells_each_owner_why(seller, outbox_sent):
    french, english = owners_and_a_member(seller)
    Profile.objects.filter(user=english).update(preferred_language="pt")
    payout = payout_request(seller_id=seller.pk, requested_by=english, amount_text="60")

    payout_reject(payout_id=payout.pk, operator=operator_make("finance"), reason="The IBAN is closed.")

    messages = {message.to[0]: message for message in outbox_sent()}
    assert messages[english.email].subject == f"A EverXCloud não pagou US${NBSP}60,00 a Alpha GPU Lda"
    assert messages[english.email].body == (
        "Olá,\n\n"
        f"Não efetuámos o pagamento n.º {payout.pk} ao vendedor Alpha GPU Lda, no valor de US${NBSP}60,00: "
        "o montante voltou aos ganhos disponíveis e pode pedir um novo pagamento.\n\n"
        "O motivo: The IBAN is closed.\n\n"
        "Responda a este e-mail se tiver alguma questão.\n\n"
        "Os seus pagamentos ao vendedor: http://testserver/pt/seller/payouts/\n\n"
        "Obrigado por utilizar a EverXCloud.\n"
    )
    assert messages[french.email].subject == f"EverXCloud n'a pas versé 60,00{NBSP}$US à Alpha GPU Lda"
    assert f"Le motif{NBSP}: The IBAN is closed." in messages[french.email].body
    assert set(OutboxEmail.objects.values_list("key", flat=True)) == {
        f"payout-rejected:{payout.pk}:{french.pk}", f"payout-rejected:{payout.pk}:{english.pk}"
    }
