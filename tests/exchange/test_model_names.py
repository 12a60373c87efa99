"""What the admin calls the exchange's objects (their `str()`): whole sentences in the reader's
language, prices formatted for it, the GPU model and server names as they are."""

from decimal import Decimal

import pytest

from exchange.models import PriceAlert, RentalGpu
from tests.factories import (
    BidFactory,
    GpuModelFactory,
    OfferFactory,
    RentalFactory,
    SellerFactory,
    ServerFactory,
    UserFactory,
)
from tests.translation_support import names

pytestmark = pytest.mark.django_db

NBSP = "\u00a0"
NARROW = "\u202f"  # CLDR's French grouping: a narrow no-break space




@pytest.fixture
def h100():
    return GpuModelFactory(name="H100 SXM", slug="test-h100-sxm")


def test_a_rental_reads_its_number_size_and_price(h100):
    offer = OfferFactory(server=ServerFactory(gpu_model=h100), price_usd=Decimal("2.88"))
    rental = RentalFactory(offer=offer, gpus=8)
    n = rental.pk
    assert names(rental) == {
        "en": f"Rental #{n}: 8 × H100 SXM at $2.88 per GPU-hour",
        "pt": f"Aluguer n.º {n}: 8 × H100 SXM a US${NBSP}2,88 por hora de GPU",
        "fr": f"Location n°{NBSP}{n}{NBSP}: 8 × H100 SXM à 2,88{NBSP}$US par heure GPU",
    }
    gpu = RentalGpu.objects.filter(rental=rental).order_by("index").first()
    server = offer.server_id
    assert names(gpu) == {
        "en": f"Rental #{n}: GPU 0 of server #{server}",
        "pt": f"Aluguer n.º {n}: GPU 0 do servidor n.º {server}",
        "fr": f"Location n°{NBSP}{n}{NBSP}: GPU 0 du serveur n°{NBSP}{server}",
    }


def test_an_offer_counts_its_gpus_in_the_language():
    seller = SellerFactory(name="Alpha GPU Lda")
    one = OfferFactory(server=ServerFactory(seller=seller, name="lisbon-1"), gpus_offered=1,
                       price_usd=Decimal("1234.50"))
    four = OfferFactory(server=ServerFactory(seller=seller, name="lisbon-4"), gpus_offered=4)
    assert names(one) == {
        "en": "Offer of Alpha GPU Lda / lisbon-1: 1 GPU at $1,234.50 per GPU-hour",
        "pt": f"Oferta de Alpha GPU Lda / lisbon-1: 1 GPU a US${NBSP}1.234,50 por hora de GPU",
        "fr": f"Offre de Alpha GPU Lda / lisbon-1{NBSP}: 1 GPU à 1{NARROW}234,50{NBSP}$US par heure GPU",
    }
    assert names(four)["en"] == "Offer of Alpha GPU Lda / lisbon-4: 4 GPUs at $2.00 per GPU-hour"


def test_a_bid_and_a_price_alert_read_their_size_price_and_state(h100):
    bid = BidFactory(gpu_model=h100, gpus=2, max_price_usd=Decimal("1.50"))
    assert names(bid) == {
        "en": "Bid for 2 × H100 SXM at up to $1.50 per GPU-hour",
        "pt": f"Licitação de 2 × H100 SXM até US${NBSP}1,50 por hora de GPU",
        "fr": f"Enchère pour 2 × H100 SXM jusqu’à 1,50{NBSP}$US par heure GPU",
    }
    alert = PriceAlert.objects.create(
        buyer=UserFactory(), gpu_model=h100, gpus=4, threshold_usd=Decimal("1.20"), unsubscribe_token="t"
    )
    assert names(alert) == {
        "en": "Price alert for 4 × H100 SXM at $1.20 or less (Armed)",
        "pt": f"Alerta de preço para 4 × H100 SXM a US${NBSP}1,20 ou menos (Ativo)",
        "fr": f"Alerte de prix pour 4 × H100 SXM à 1,20{NBSP}$US ou moins (Active)",
    }
