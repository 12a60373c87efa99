"""The exchange's operations of the API: public market data (docs/api.md). Entry points only."""

from django.http import HttpResponse
from ninja import Router, Schema

from catalog.selectors import gpu_model_get
from marketplace.api_support import ApiProblem, UtcTime

from . import selectors

router = Router(tags=["market"])


def _decimal_text(value) -> str | None:
    return None if value is None else f"{value:.2f}"


def _public(response: HttpResponse) -> None:
    """Public market data: any site may read it, caches may keep it a few seconds."""
    response["Access-Control-Allow-Origin"] = "*"
    response["Cache-Control"] = "public, max-age=5"


def _gpu_or_404(slug: str):
    gpu = gpu_model_get(slug=slug)
    if gpu is None:
        raise ApiProblem(404, "gpu_model_not_found", "We do not list this GPU.")
    return gpu


class LevelOut(Schema):
    price: str
    gpus: int


class TradeOut(Schema):
    time: UtcTime
    price: str
    gpus: int


class MarketDataOut(Schema):
    gpu_model: str
    currency: str
    unit: str
    market_open: bool
    best_bid: str | None
    best_ask: str | None
    spread: str | None
    asks: list[LevelOut]
    bids: list[LevelOut]
    last_trades: list[TradeOut]


@router.get(
    "/markets/{slug}", response=MarketDataOut, auth=None, operation_id="market_get",
    summary="One GPU model's market: best prices, the book's top levels and the last trades",
)
def market_get(request, slug: str, response: HttpResponse):
    gpu = _gpu_or_404(slug)
    book = selectors.order_book(gpu_model_id=gpu.pk)
    trades = selectors.trades_recent(gpu_model_id=gpu.pk, limit=20)
    _public(response)
    return {
        "gpu_model": gpu.slug, "currency": "USD", "unit": "GPU-hour",
        "market_open": selectors.market_is_open(),
        "best_bid": _decimal_text(book.best_bid), "best_ask": _decimal_text(book.best_ask),
        "spread": _decimal_text(book.spread),
        "asks": [{"price": _decimal_text(level.price), "gpus": level.gpus} for level in book.asks],
        "bids": [{"price": _decimal_text(level.price), "gpus": level.gpus} for level in book.bids],
        "last_trades": [{"time": trade.time, "price": _decimal_text(trade.price), "gpus": trade.gpus}
                        for trade in trades],
    }
