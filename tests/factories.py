from datetime import UTC, datetime
from decimal import Decimal

import factory

from catalog.models import GpuModel
from exchange.models import Offer
from sellers.models import ContainerTemplate, Region, Seller, Server


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
    status = "active"
    host = factory.LazyAttribute(lambda server: f"{server.name}.example.test")
    # As after its agent's first heartbeat matched the registration (`agent_verified=False`: never).
    agent_verified_at = factory.LazyFunction(lambda: datetime.now(UTC))
    # As after a report that reaches "shared server" (sellers.isolation): most tests share servers;
    # a "whole server" offers all its GPUs or nothing. Per GPU of 8: 8 vCPU, 64 GiB, 500 GB.
    isolation_level = "shared"
    sellable_cpu_cores = 64
    sellable_memory_mib = 512 * 1024
    sellable_disk_gb = 4000


class ContainerTemplateFactory(factory.django.DjangoModelFactory):
    """A published template, its image pinned by a digest of its own."""

    class Meta:
        model = ContainerTemplate

    slug = factory.Sequence(lambda n: f"template-{n}")
    name_en = factory.Sequence(lambda n: f"Template {n}")
    name_pt = factory.Sequence(lambda n: f"Modelo {n}")
    name_fr = factory.Sequence(lambda n: f"Modèle {n}")
    description_en = "An image for the tests."
    description_pt = "Uma imagem para os testes."
    description_fr = "Une image pour les tests."
    image = factory.Sequence(lambda n: f"registry.example.test/everx/test@sha256:{n:064x}")
    ports = factory.LazyFunction(lambda: [22])
    disk_gb = 20
    published = True
    position = factory.Sequence(lambda n: n)


class OfferFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Offer

    server = factory.SubFactory(ServerFactory)
    gpus_offered = 4
    price_usd = Decimal("2.00")


# --- billing ----------------------------------------------------------------------------------

class WalletFactory(factory.django.DjangoModelFactory):
    """An empty wallet. Money reaches it through the ledger (billing.ledger.ledger_post) only."""

    class Meta:
        model = "accounts.Wallet"

    user = factory.SubFactory("tests.factories.UserFactory")
    currency = "EUR"
    balance = Decimal("0.00")


class ExchangeRateFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "billing.ExchangeRate"

    currency = "EUR"
    rate = Decimal("0.92000000")
    valid_from = factory.LazyFunction(lambda: datetime(2026, 11, 1, tzinfo=UTC))
    source = "tests"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "accounts.User"
        skip_postgeneration_save = True

    email = factory.Sequence(lambda n: f"user{n}@example.com")
    password = factory.PostGenerationMethodCall("set_password", "gpu-hours-2026!")

    @factory.post_generation
    def verified(self, create, extracted, **kwargs):
        """Users from the factory have a confirmed email address, as after sign-up."""
        if create:
            from allauth.account.models import EmailAddress

            self.save()
            EmailAddress.objects.create(user=self, email=self.email, primary=True, verified=True)


class ProfileFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "accounts.Profile"
        django_get_or_create = ("user",)

    user = factory.SubFactory(UserFactory)
    name = "Joana Ferreira"
    preferred_language = "pt"
    billing_type = "individual"
    billing_country = "PT"
    address = "Rua Augusta 10, Lisboa"


# --- rentals (built directly, without the matching engine) -------------------------------------

class BidFactory(factory.django.DjangoModelFactory):
    """A filled bid, as the matching engine leaves it behind a rental."""

    class Meta:
        model = "exchange.Bid"

    buyer = factory.SubFactory(UserFactory)
    gpu_model = factory.SubFactory(GpuModelFactory)
    gpus = 1
    max_price_usd = Decimal("2.00")
    hours = None
    time_in_force = "buy_now"
    ssh_public_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG9nBZ8K3p8V0dTt tests@example.com"
    state = "filled"
    form_token = factory.Faker("uuid4", cast_to=None)


class RentalFactory(factory.django.DjangoModelFactory):
    """A rental on the offer's server, with the server's rented GPUs counted as the exchange does
    (a rental that has not ended holds its GPUs)."""

    class Meta:
        model = "exchange.Rental"
        skip_postgeneration_save = True

    buyer = factory.SubFactory(UserFactory)
    offer = factory.SubFactory(OfferFactory)
    server = factory.SelfAttribute("offer.server")
    gpu_model = factory.SelfAttribute("server.gpu_model")
    gpus = 1
    price_usd = factory.SelfAttribute("offer.price_usd")
    hours = None
    bid = factory.SubFactory(
        BidFactory,
        buyer=factory.SelfAttribute("..buyer"),
        gpu_model=factory.SelfAttribute("..gpu_model"),
        gpus=factory.SelfAttribute("..gpus"),
        max_price_usd=factory.SelfAttribute("..price_usd"),
        hours=factory.SelfAttribute("..hours"),
    )
    state = "starting"
    started_at = factory.LazyFunction(lambda: datetime.now(UTC))
    paid_through = None
    ssh_public_key = factory.SelfAttribute("bid.ssh_public_key")
    # As after the server's agent reported the login ready at once (`delivered_at=None`: not yet).
    delivered_at = factory.SelfAttribute("started_at")
    username = factory.Sequence(lambda n: f"evx-test{n}")

    @factory.post_generation
    def hold_gpus(self, create, extracted, **kwargs):
        """A rental that has not ended holds its GPUs: the server's count and the lowest free
        indices, as matching gives them."""
        if create and self.state != "ended":
            from django.db.models import F

            from exchange.models import RentalGpu

            Server.objects.filter(pk=self.server_id).update(gpus_rented=F("gpus_rented") + self.gpus)
            self.server.refresh_from_db(fields=["gpus_rented"])
            held = set(
                RentalGpu.objects.filter(server_id=self.server_id, released_at__isnull=True).values_list(
                    "index", flat=True
                )
            )
            free = [index for index in range(self.server.gpu_count) if index not in held]
            RentalGpu.objects.bulk_create(
                RentalGpu(rental=self, server_id=self.server_id, index=index) for index in free[: self.gpus]
            )


# --- operators ---------------------------------------------------------------------------------


def operator_make(role: str | None = None, **fields):
    """A staff user with a role: "support" or "finance" (the groups of accounts.roles), or a
    superuser when `role` is None. The groups come from a migration; transactional tests empty
    the tables between tests, so they are synced here first."""
    from django.apps import apps
    from django.contrib.auth.models import Group

    from accounts.roles import operator_groups_sync

    if role is None:
        return UserFactory(is_staff=True, is_superuser=True, **fields)
    operator_groups_sync(apps)
    user = UserFactory(is_staff=True, **fields)
    user.groups.add(Group.objects.get(name=role))
    return user
