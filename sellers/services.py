"""Every write to sellers and their servers."""

from django.db import transaction

from catalog.models import GpuModel

from .models import Seller, Server, ServerStatus


@transaction.atomic
def seller_ensure(*, slug: str, name: str, country: str) -> Seller:
    seller, _created = Seller.objects.get_or_create(
        slug=slug, defaults={"name": name, "country": country}
    )
    return seller


@transaction.atomic
def server_ensure(
    *, seller: Seller, name: str, gpu_model: GpuModel, gpu_count: int, region: str,
    host: str = "", status: str = ServerStatus.PENDING,
) -> Server:
    server, _created = Server.objects.get_or_create(
        seller=seller,
        name=name,
        defaults={
            "gpu_model": gpu_model, "gpu_count": gpu_count, "region": region, "host": host,
            "status": status,
        },
    )
    return server
