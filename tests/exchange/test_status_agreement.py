"""Status labels agree with what they qualify: in French a bid ("enchère") is "Annulée", an offer
("offre") "Active", a rental ("location") "Terminée"; in Portuguese a bid ("licitação") is
"Cancelada", a rental ("aluguer") "Terminado"."""

import pytest
from django.utils import translation
from django.utils.html import escape

from exchange.models import BidCancelReason, BidState, OfferState, PriceAlertState, RentalState
from tests.exchange.support import signed_in
from tests.factories import BidFactory, ProfileFactory
from tests.translation_support import label_cases

LABELS = {
    "fr": {
        BidState.OPEN: "Ouverte", BidState.FILLED: "Exécutée", BidState.CANCELLED: "Annulée",
        BidState.EXPIRED: "Expirée",
        BidCancelReason.BUYER: "Annulée par l'acheteur",
        BidCancelReason.OPERATOR: "Annulée par un opérateur",
        OfferState.ACTIVE: "Active", OfferState.WITHDRAWN: "Retirée",
        RentalState.RUNNING: "En cours", RentalState.ENDED: "Terminée",
        PriceAlertState.ARMED: "Active", PriceAlertState.TRIGGERED: "Déclenchée",
    },
    "pt": {
        BidState.OPEN: "Em aberto", BidState.FILLED: "Executada", BidState.CANCELLED: "Cancelada",
        BidState.EXPIRED: "Expirada",
        BidCancelReason.BUYER: "Cancelada pelo comprador",
        BidCancelReason.OPERATOR: "Cancelada por um operador",
        OfferState.ACTIVE: "Ativa", OfferState.WITHDRAWN: "Retirada",
        RentalState.RUNNING: "Em curso", RentalState.ENDED: "Terminado",
        PriceAlertState.ARMED: "Ativo", PriceAlertState.TRIGGERED: "Disparado",
    },
}


@pytest.mark.parametrize(
    ("language", "choice", "expected"),
    label_cases(LABELS),
    ids=lambda value: str(value),
)
def test_exchange_status_labels_agree(language, choice, expected):
    with translation.override(language):
        assert str(choice.label) == expected


def test_english_labels_are_unchanged():
    with translation.override("en"):
        assert str(BidState.CANCELLED.label) == "Cancelled"
        assert str(OfferState.ACTIVE.label) == "Active"


@pytest.mark.django_db
def test_french_orders_page_shows_a_cancelled_bid_as_annulee():
    buyer = ProfileFactory(preferred_language="fr").user
    bid = BidFactory(buyer=buyer, time_in_force="bid", state=BidState.CANCELLED,
                     cancel_reason=BidCancelReason.BUYER)
    response = signed_in(buyer).get("/fr/account/orders/")
    html = response.content.decode()
    assert response.status_code == 200
    assert f'data-bid="{bid.pk}"' in html
    assert escape("Annulée · Annulée par l'acheteur") in html
    assert "Annulé " not in html and "Annulé<" not in html
