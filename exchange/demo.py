"""The demo order book that `make run` loads: a few sellers with asks on every GPU model."""

import json
from decimal import Decimal
from pathlib import Path

from django.db import transaction

from catalog.models import GpuModel
from sellers.models import ServerStatus
from sellers.services import seller_ensure, server_ensure

from .models import Offer
from .services import offer_post

DEMO_FILE = Path(__file__).resolve().parent / "data" / "demo_orderbook.json"


@transaction.atomic
def demo_orderbook_load(*, path: Path = DEMO_FILE) -> int:
    """Create the demo sellers, servers and asks that are missing; returns the asks created.
    A server that already has an ask is left alone, so loading twice posts nothing new."""
    data = json.loads(path.read_text(encoding="utf-8"))
    sellers = {entry["slug"]: seller_ensure(**entry) for entry in data["sellers"]}
    gpus = {gpu.slug: gpu for gpu in GpuModel.objects.all()}
    posted = 0
    for entry in data["servers"]:
        gpu = gpus.get(entry["gpu"])
        if gpu is None:
            continue
        server = server_ensure(
            seller=sellers[entry["seller"]], name=entry["name"], gpu_model=gpu,
            gpu_count=entry["gpus"], region=entry["region"], status=ServerStatus.ACTIVE,
            host=f"{entry['name']}.{entry['seller']}.demo.everxcloud.example",
        )
        if Offer.objects.filter(server=server).exists():
            continue
        offer_post(
            server=server, gpus=entry["offer"]["gpus"],
            price_usd=Decimal(entry["offer"]["price_usd"]),
        )
        posted += 1
    return posted
