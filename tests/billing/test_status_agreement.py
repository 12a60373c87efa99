"""Status labels agree with what they qualify: in French a payout ("versement") and a top-up
("rechargement") are masculine ("Refusé", "Payé", "Annulé"); in Portuguese a payout ("pagamento")
and a top-up ("carregamento") too ("Recusado", "Pago", "Cancelado")."""

import pytest
from django.utils import translation

from accounts.models import VatIdStatus
from billing.models import PayoutStatus, TopUpStatus
from tests.translation_support import label_cases

LABELS = {
    "fr": {
        PayoutStatus.REQUESTED: "Demandé", PayoutStatus.PAID: "Payé", PayoutStatus.REJECTED: "Refusé",
        TopUpStatus.PENDING: "En attente de paiement", TopUpStatus.PAID: "Payé",
        TopUpStatus.CANCELLED: "Annulé", TopUpStatus.FAILED: "Échec du paiement",
        VatIdStatus.UNCHECKED: "Pas encore vérifié", VatIdStatus.INVALID: "Rejeté par VIES",
    },
    "pt": {
        PayoutStatus.REQUESTED: "Pedido", PayoutStatus.PAID: "Pago", PayoutStatus.REJECTED: "Recusado",
        TopUpStatus.PENDING: "A aguardar pagamento", TopUpStatus.PAID: "Pago",
        TopUpStatus.CANCELLED: "Cancelado", TopUpStatus.FAILED: "Pagamento falhado",
        VatIdStatus.UNCHECKED: "Ainda não verificado", VatIdStatus.INVALID: "Rejeitado pelo VIES",
    },
}


@pytest.mark.parametrize(
    ("language", "choice", "expected"),
    label_cases(LABELS),
    ids=lambda value: str(value),
)
def test_billing_status_labels_agree(language, choice, expected):
    with translation.override(language):
        assert str(choice.label) == expected
