"""Status labels agree with what they qualify: in French a server ("serveur") is "Actif", an
application ("candidature") "Approuvée"; in Portuguese a server ("servidor") is "Ativo", an
application ("candidatura") "Aprovada"."""

import pytest
from django.utils import translation

from sellers.models import ApplicationStatus, ServerStatus
from tests.translation_support import label_cases

LABELS = {
    "fr": {
        ServerStatus.ACTIVE: "Actif", ServerStatus.RETIRED: "Retiré",
        ServerStatus.PENDING: "En attente de vérification",
        ApplicationStatus.SUBMITTED: "Soumise", ApplicationStatus.APPROVED: "Approuvée",
        ApplicationStatus.REJECTED: "Refusée",
    },
    "pt": {
        ServerStatus.ACTIVE: "Ativo", ServerStatus.RETIRED: "Retirado de serviço",
        ServerStatus.PENDING: "A aguardar verificação",
        ApplicationStatus.SUBMITTED: "Submetida", ApplicationStatus.APPROVED: "Aprovada",
        ApplicationStatus.REJECTED: "Rejeitada",
    },
}


@pytest.mark.parametrize(
    ("language", "choice", "expected"),
    label_cases(LABELS),
    ids=lambda value: str(value),
)
def test_seller_status_labels_agree(language, choice, expected):
    with translation.override(language):
        assert str(choice.label) == expected
