"""The exchange's operations of the API: public market data (docs/api.md). Entry points only."""

from typing import Annotated, Literal

from django.http import HttpResponse
from django.utils.translation import gettext_lazy as _
from ninja import Field, Query, Router, Schema

from catalog.selectors import gpu_model_get, gpu_models_all
from marketplace.api_support import (
    ApiProblem,
    Money,
    Page,
    ShareText,
    UtcTime,
    page_of,
    problems,
    public_read,
    share,
    usd,
)
from sellers.isolation import IsolationLevel, levels_of_text
from sellers.selectors import container_template_default, container_templates_published

from . import selectors
from .exceptions import BidRejected
from .services import isolation_filter_parse, min_reliability_parse

router = Router(tags=["market"])


def _decimal_text(value) -> str | None:
    return None if value is None else f"{value:.2f}"


def _gpu_or_404(slug: str):
    gpu = gpu_model_get(slug=slug)
    if gpu is None:
        raise ApiProblem(404, "gpu_model_not_found", _("We do not list this GPU."))
    return gpu


class LevelOut(Schema):
    price: str
    gpus: int


class PerGpuOut(Schema):
    cpu_cores: int | None = Field(examples=[8], description="vCPUs; null when unknown.")
    memory_gib: int | None = Field(examples=[64], description="Memory in GiB; null when unknown.")
    disk_gb: int | None = Field(examples=[500], description="Disk in GB; null when unknown.")


class AskOfferOut(Schema):
    """One offer behind a price level of asks, and how reliable its server has been."""

    gpus: int = Field(examples=[4], description="GPUs this offer can sell now.")
    reliability: ShareText = Field(
        description="The server's reliability over the last days, a share from 0 to 1; null while "
                    "the server is new (no score yet)."
    )
    reliability_uptime: ShareText = Field(
        description="The share of minutes the server was listed with its agent reporting."
    )
    reliability_delivery: ShareText = Field(description="The share of its rentals delivered in time.")
    isolation: str = Field(
        examples=["shared"], json_schema_extra={"enum": IsolationLevel.values},
        description="The isolation level the server is sold at: container, shared or whole (the market "
                    "rules); a whole server fills only an order of all its GPUs.",
    )
    per_gpu: PerGpuOut | None = Field(description="What a rental gets with each GPU; null when unknown.")
    templates: list[str] = Field(
        examples=[["pytorch"]], description="A container server: the container templates it holds, which "
                                            "orders naming one of them may run there (GET /templates).",
    )


class AskLevelOut(LevelOut):
    offers: list[AskOfferOut] = Field(
        description="The level's first offers, in the order matching serves them (the oldest first)."
    )
    more_offers: int = Field(examples=[0], description="Offers at this price beyond those listed.")


def _per_gpu_out(per_gpu) -> dict | None:
    if per_gpu is None:
        return None
    return {"cpu_cores": per_gpu.cpu_cores, "memory_gib": per_gpu.memory_gib, "disk_gb": per_gpu.disk_gb}


def _offers_out(level) -> list[dict]:
    return [
        {"gpus": offer.gpus, "reliability": share(offer.reliability),
         "reliability_uptime": share(offer.uptime), "reliability_delivery": share(offer.delivery),
         "isolation": offer.isolation_level, "per_gpu": _per_gpu_out(offer.per_gpu),
         "templates": [template.slug for template in offer.templates]}
        for offer in level.offers
    ]


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
    asks: list[AskLevelOut]
    bids: list[LevelOut]
    last_trades: list[TradeOut]


@router.get(
    "/markets/{slug}", response={200: MarketDataOut, **problems(404, 429)}, auth=None,
    operation_id="market_get",
    summary="One GPU model's market: best prices, the book's top levels and the last trades",
)
def market_get(request, slug: str, response: HttpResponse):
    gpu = _gpu_or_404(slug)
    book = selectors.order_book(gpu_model_id=gpu.pk)
    trades = selectors.trades_recent(gpu_model_id=gpu.pk, limit=20)
    public_read(response)
    return {
        "gpu_model": gpu.slug, "currency": "USD", "unit": "GPU-hour",
        "market_open": selectors.market_is_open(),
        "best_bid": _decimal_text(book.best_bid), "best_ask": _decimal_text(book.best_ask),
        "spread": _decimal_text(book.spread),
        "asks": [
            {"price": _decimal_text(level.price), "gpus": level.gpus, "offers": _offers_out(level),
             "more_offers": level.more_offers}
            for level in book.asks
        ],
        "bids": [{"price": _decimal_text(level.price), "gpus": level.gpus} for level in book.bids],
        "last_trades": [{"time": trade.time, "price": _decimal_text(trade.price), "gpus": trade.gpus}
                        for trade in trades],
    }


# --- every market, the book, trades and candles (public) -----------------------------------------


class LastTradeOut(Schema):
    price: Money
    gpus: int = Field(examples=[2])
    time: UtcTime


class MarketOut(Schema):
    gpu_model: str = Field(examples=["h100-sxm"])
    market_open: bool
    best_bid: Money | None = Field(description="The highest open bid per GPU-hour, null without one.")
    best_ask: Money | None = Field(
        description="The lowest offer with free GPUs per GPU-hour, null without one."
    )
    last_trade: LastTradeOut | None
    gpus_on_offer: int = Field(examples=[12], description="GPUs of this model that offers can sell now.")


@router.get(
    "/markets", response={200: Page[MarketOut], **problems(400, 422, 429)},
    auth=None, operation_id="markets_list",
    summary="Every GPU model's market: best bid, best ask, last trade and GPUs on offer",
)
def markets_list(request, response: HttpResponse, cursor: str | None = None, limit: int | None = None):
    gpus, next_cursor = page_of(gpu_models_all(), cursor=cursor, limit=limit)
    summaries = selectors.markets_summary()
    is_open = selectors.market_is_open()
    public_read(response)
    items = []
    for gpu in gpus:
        summary = summaries.get(gpu.pk)
        last = summary.last_trade if summary else None
        items.append({
            "gpu_model": gpu.slug, "market_open": is_open,
            "best_bid": usd(summary.best_bid) if summary else None,
            "best_ask": usd(summary.best_ask) if summary else None,
            "last_trade": {"price": usd(last.price), "gpus": last.gpus, "time": last.time} if last else None,
            "gpus_on_offer": summary.gpus_on_offer if summary else 0,
        })
    return {"items": items, "next_cursor": next_cursor}


class BookLevelOut(Schema):
    price: Money
    gpus: int = Field(examples=[8])


class BookAskOut(BookLevelOut):
    offers: list[AskOfferOut] = Field(
        description="The level's first offers, in the order matching serves them (the oldest first), "
                    "each with its server's reliability."
    )
    more_offers: int = Field(examples=[0], description="Offers at this price beyond those listed.")


class BookOut(Schema):
    gpu_model: str = Field(examples=["h100-sxm"])
    min_reliability: ShareText = Field(
        description="The minimum asked for (asks of servers at least this reliable only); null for all."
    )
    isolation: list[str] | None = Field(
        examples=[None],
        description="The isolation levels asked for (asks of servers at these only); null for all.",
    )
    asks: list[BookAskOut] = Field(
        description="Cheapest first: the GPUs offers can sell now at each price."
    )
    bids: list[BookLevelOut] = Field(description="Highest first: the GPUs open bids want at each price.")


def _isolation_filter(text: str | None) -> str | None:
    """The book's isolation filter: a 400 problem for anything but a list of levels."""
    try:
        return isolation_filter_parse([text] if text is not None else [])
    except BidRejected as refused:
        raise ApiProblem(400, "isolation_filter_invalid", refused.message) from None


@router.get(
    "/markets/{slug}/book", response={200: BookOut, **problems(404, 422, 429)},
    auth=None, operation_id="market_book",
    summary="The order book of one GPU model: price levels of asks and bids with their GPUs",
)
def market_book(
    request, slug: str, response: HttpResponse, depth: Annotated[int, Query(ge=1, le=50)] = 10,
    min_reliability: Annotated[str | None, Query(
        max_length=20, description="Only asks of servers at least this reliable: a share from 0 to 1 "
                                   "(\"0.95\"), at most 3 decimals. New servers never are.",
    )] = None,
    isolation: Annotated[str | None, Query(
        description="Only asks of servers sold at these isolation levels, comma-separated "
                    "(\"container,whole\"): container, shared, whole.",
    )] = None,
):
    gpu = _gpu_or_404(slug)
    minimum = min_reliability_parse(min_reliability)
    levels = _isolation_filter(isolation)
    book = selectors.order_book(
        gpu_model_id=gpu.pk, levels=depth, min_reliability=minimum, isolation_levels=levels
    )
    public_read(response)
    return {
        "gpu_model": gpu.slug, "min_reliability": share(minimum),
        "isolation": list(levels_of_text(levels)) if levels is not None else None,
        "asks": [
            {"price": usd(level.price), "gpus": level.gpus, "offers": _offers_out(level),
             "more_offers": level.more_offers}
            for level in book.asks
        ],
        "bids": [{"price": usd(level.price), "gpus": level.gpus} for level in book.bids],
    }


class MarketTradeOut(Schema):
    time: UtcTime
    price: Money
    gpus: int = Field(examples=[1])


@router.get(
    "/markets/{slug}/trades", response={200: Page[MarketTradeOut], **problems(400, 404, 422, 429)}, auth=None,
    operation_id="market_trades", summary="The trades of one GPU model, newest first",
)
def market_trades(
    request, slug: str, response: HttpResponse, cursor: str | None = None, limit: int | None = None
):
    gpu = _gpu_or_404(slug)
    trades, next_cursor = page_of(selectors.trades_of_market(gpu_model_id=gpu.pk), cursor=cursor, limit=limit)
    public_read(response)
    return {
        "items": [
            {"time": trade.started_at, "price": usd(trade.price_usd), "gpus": trade.gpus} for trade in trades
        ],
        "next_cursor": next_cursor,
    }


class CandleOut(Schema):
    start: UtcTime = Field(description="The first instant of the hour or day (UTC).")
    open: Money
    high: Money
    low: Money
    close: Money
    volume: int = Field(examples=[6], description="GPUs traded: the sum of the trades' GPUs.")
    trades: int = Field(examples=[3])


class CandlesOut(Schema):
    gpu_model: str = Field(examples=["h100-sxm"])
    interval: str = Field(examples=["hour"])
    candles: list[CandleOut] = Field(description="Oldest first; intervals without a trade are left out.")


@router.get(
    "/markets/{slug}/candles", response={200: CandlesOut, **problems(404, 422, 429)}, auth=None,
    operation_id="market_candles",
    summary="Price candles of one GPU model per hour or per day (UTC): open, high, low, close, volume",
)
def market_candles(
    request, slug: str, response: HttpResponse,
    interval: Literal["hour", "day"] = "hour", limit: Annotated[int, Query(ge=1, le=500)] = 48,
):
    gpu = _gpu_or_404(slug)
    candles = selectors.price_candles(gpu_model_id=gpu.pk, interval=interval, limit=limit)
    public_read(response)
    return {
        "gpu_model": gpu.slug, "interval": interval,
        "candles": [
            {"start": candle.start, "open": usd(candle.open), "high": usd(candle.high),
             "low": usd(candle.low), "close": usd(candle.close), "volume": candle.volume,
             "trades": candle.trades}
            for candle in candles
        ],
    }


class TemplateOut(Schema):
    slug: str = Field(examples=["pytorch"], description="What an order's `template` names.")
    name: str = Field(examples=["PyTorch with CUDA"], description="In the request's language.")
    description: str = Field(description="In the request's language.")
    image: str = Field(description="The image, pinned by its digest.")
    min_driver: str = Field(
        examples=["550.54"], description="The oldest GPU driver it runs on; empty for any."
    )
    ports: list[int] = Field(examples=[[22, 8888]], description="The ports it serves; 22 is its sshd.")
    disk_gb: int = Field(examples=[40], description="The disk it needs; servers with less per GPU lack it.")
    default: bool = Field(description="What an order that names no template runs.")
    takes_token: bool = Field(description="Whether its container asks for the rental's own token "
                              "(Jupyter's), given once by POST /rentals/{id}/service-token.")


@router.get(
    "/templates", response={200: list[TemplateOut], **problems(429)}, auth=None,
    operation_id="templates_list",
    summary="The container templates a rental sold as container can run, in the operators' order",
)
def templates_list(request, response: HttpResponse):
    templates = container_templates_published()
    default = container_template_default(templates)
    public_read(response)
    return [
        {"slug": template.slug, "name": template.name, "description": template.description,
         "image": template.image, "min_driver": template.min_driver, "ports": template.ports,
         "disk_gb": template.disk_gb, "default": template == default, "takes_token": bool(template.token_env)}
        for template in templates
    ]
