from decimal import Decimal

import factory

from catalog.models import GpuModel
from exchange.models import Offer
from sellers.models import Region, Seller, Server


class GpuModelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GpuModel
        django_get_or_create = ("slug",)

    name = factory.Sequence(lambda n: f"Test GPU {n}")
    slug = factory.Sequence(lambda n: f"test-gpu-{n}")
    architecture = "Hopper"
    memory_gb = 80
    memory_type = "HBM3"
    bandwidth_gb_s = 3350


class SellerFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Seller

    name = factory.Sequence(lambda n: f"Seller {n} Ltd")
    slug = factory.Sequence(lambda n: f"seller-{n}")
    country = "PT"


class ServerFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Server

    seller = factory.SubFactory(SellerFactory)
    gpu_model = factory.SubFactory(GpuModelFactory)
    name = factory.Sequence(lambda n: f"server-{n}")
    gpu_count = 8
    region = Region.EUROPE


class OfferFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Offer

    server = factory.SubFactory(ServerFactory)
    gpus_offered = 4
    price_usd = Decimal("2.00")
