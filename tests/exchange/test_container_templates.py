"""Container templates on the exchange: which a server holds (from its agent's report), how orders
choose one and fill only where it is held, what the desired state carries to the agent, and the
API's and the trade page's answers to a template that is not listed."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone, translation
from django.utils.html import escape
from django.utils.translation import gettext

from billing.services import fx_rates_load
from exchange.exceptions import BidRejected
from exchange.models import Bid, Rental
from exchange.services import (
    agent_heartbeat_receive,
    container_template_choose,
    container_templates_held_refresh,
    offer_post,
)
from sellers.models import ContainerTemplate, ServerTemplate
from tests.factories import (
    ContainerTemplateFactory,
    GpuModelFactory,
    OfferFactory,
    RentalFactory,
    ServerFactory,
    UserFactory,
)

from .agents_support import enrolled, isolation_of, report_for
from .support import bid_form, buyer_with, orders_state, place, signed_in

pytestmark = pytest.mark.django_db

D = Decimal
REFUSAL = "Choose one of the container templates listed."
NBSP = "\u00a0"


def container_report(server, *digests):
    return isolation_of(server, container={
        "runtime": "podman", "runtime_version": "4.3.1", "toolkit_version": "1.17.8", "gpus_by_uuid": True,
        "self_test": True, "disk_limited": True, "templates": list(digests),
    })


def receive(secret, report):
    return agent_heartbeat_receive(secret=secret, report=report, address="192.0.2.7")


def held(server) -> list[str]:
    return sorted(ServerTemplate.objects.filter(server=server).values_list("template__slug", flat=True))


@pytest.fixture
def h100(gpu_catalog):
    return gpu_catalog["h100-sxm"]


# --- which templates a server holds --------------------------------------------------------------


def test_a_server_holds_the_published_templates_its_report_names(h100):
    pytorch = ContainerTemplateFactory(slug="pytorch")
    jupyter = ContainerTemplateFactory(slug="jupyter")
    hidden = ContainerTemplateFactory(slug="hidden", published=False)
    server, secret = enrolled(h100)

    receive(secret, report_for(server, isolation=container_report(
        server, pytorch.digest, hidden.digest, "sha256:" + "ab" * 32)))

    server.refresh_from_db()
    assert (server.isolation_level, held(server)) == ("container", ["pytorch"])

    receive(secret, report_for(server, isolation=container_report(server, jupyter.digest)))
    assert held(server) == ["jupyter"]

    receive(secret, report_for(server, isolation=container_report(server)))
    assert held(server) == []


def test_a_template_published_after_its_server_reported_it_is_held_at_once(h100):
    later = ContainerTemplateFactory(slug="later", published=False)
    server, secret = enrolled(h100)
    receive(secret, report_for(server, isolation=container_report(server, later.digest)))
    assert held(server) == []

    ContainerTemplate.objects.filter(pk=later.pk).update(published=True)
    assert container_templates_held_refresh() == 1

    assert held(server) == ["later"]  # the agent sends the same report again: nothing to store
    assert container_templates_held_refresh() == 0


def test_a_template_needing_more_disk_than_a_gpu_s_share_is_not_held(h100):
    # 3500 GB less the 50 GB reserve, over 8 GPUs: 431 GB a GPU.
    fits = ContainerTemplateFactory(slug="fits", disk_gb=431)
    too_big = ContainerTemplateFactory(slug="too-big", disk_gb=432)
    server, secret = enrolled(h100)

    receive(secret, report_for(server, isolation=container_report(server, fits.digest, too_big.digest)))

    assert held(server) == ["fits"]


# --- orders choose a template -----------------------------------------------------------------------


def test_an_order_naming_no_template_runs_the_operators_default():
    ContainerTemplateFactory(slug="first")
    default = ContainerTemplateFactory(slug="default", is_default=True)
    assert container_template_choose(None) == default
    assert container_template_choose("") == default


def test_without_a_default_the_first_published_template_is_chosen():
    first = ContainerTemplateFactory(slug="first", position=0)
    ContainerTemplateFactory(slug="second", position=1)
    assert container_template_choose(None) == first


def test_without_published_templates_an_order_names_none():
    ContainerTemplateFactory(published=False)
    assert container_template_choose(None) is None


@pytest.mark.parametrize("slug", ["nope", "hidden", "x" * 500, "pytorch\x00"])
def test_a_template_that_is_not_published_is_refused(slug):
    ContainerTemplateFactory(slug="pytorch")
    ContainerTemplateFactory(slug="hidden", published=False)
    with pytest.raises(BidRejected) as refused:
        container_template_choose(slug)
    assert (refused.value.code, str(refused.value.message)) == ("template_invalid", REFUSAL)


@pytest.mark.usefixtures("balances")
def test_a_container_server_fills_only_orders_for_a_template_it_holds(open_market, h100, ssh_key):
    pytorch, jupyter = ContainerTemplateFactory(slug="pytorch"), ContainerTemplateFactory(slug="jupyter")
    cheap = ServerFactory(gpu_model=h100, isolation_level="container")
    dear = ServerFactory(gpu_model=h100, isolation_level="container")
    ServerTemplate.objects.create(server=cheap, template=pytorch, since="2026-12-04T00:00:00Z")
    ServerTemplate.objects.create(server=dear, template=jupyter, since="2026-12-04T00:00:00Z")
    offer_post(server=cheap, gpus=8, price_usd=D("1.00"))
    offer_post(server=dear, gpus=8, price_usd=D("2.00"))

    placed = place(UserFactory(), h100, ssh_key, price="3.00", container_template=jupyter)

    rental = Rental.objects.get(pk=placed.rental.pk)
    assert (rental.server_id, rental.price_usd, rental.container_template) == (dear.pk, D("2.00"), jupyter)
    assert Bid.objects.get(pk=placed.bid.pk).container_template == jupyter


@pytest.mark.usefixtures("balances")
def test_an_order_for_a_template_no_server_holds_rests(open_market, h100, ssh_key):
    ServerFactory(gpu_model=h100, isolation_level="container")
    offer_post(server=ServerFactory.create(gpu_model=h100, isolation_level="container"), gpus=8,
               price_usd=D("1.00"))

    placed = place(UserFactory(), h100, ssh_key, price="3.00", isolation_levels="container",
                   container_template=ContainerTemplateFactory())

    assert (placed.rental, placed.bid.state) == (None, "open")


@pytest.mark.usefixtures("balances")
def test_a_shared_server_fills_an_order_naming_a_template_and_its_rental_runs_none(open_market, h100,
                                                                                     ssh_key):
    template = ContainerTemplateFactory()
    offer_post(server=ServerFactory(gpu_model=h100, isolation_level="shared"), gpus=8, price_usd=D("1.00"))

    placed = place(UserFactory(), h100, ssh_key, price="3.00", container_template=template)

    assert Rental.objects.get(pk=placed.rental.pk).container_template is None


@pytest.mark.usefixtures("balances")
def test_an_order_refusing_containers_keeps_no_template(open_market, h100, ssh_key):
    ServerFactory(gpu_model=h100)
    placed = place(UserFactory(), h100, ssh_key, price="3.00", isolation_levels="shared",
                   container_template=ContainerTemplateFactory())
    assert Bid.objects.get(pk=placed.bid.pk).container_template is None


# --- the desired state ------------------------------------------------------------------------------


def test_the_desired_state_carries_the_templates_and_each_container_rental_s_digest(h100):
    published = ContainerTemplateFactory(slug="published", ports=[22, 8888], min_driver="550.54")
    retired = ContainerTemplateFactory(slug="retired")
    ContainerTemplateFactory(slug="never-used", published=False)
    server, secret = enrolled(h100, isolation_level="container")
    now = timezone.now()
    rental = RentalFactory(offer=OfferFactory(server=server, gpus_offered=8), gpus=1, state="starting",
                           started_at=now, paid_through=now + timedelta(hours=1), delivered_at=None,
                           username="", isolation_level="container", container_template=retired)
    retired.published = False
    retired.save()

    answer = receive(secret, report_for(server, logins=[(rental, [0])]))

    assert [(spec.image, spec.ports, spec.min_driver) for spec in answer.templates] == [
        (published.image, [22, 8888], "550.54"), (retired.image, [22], ""),
    ]
    assert [login.template for login in answer.logins] == [retired.digest]


# --- the API and the trade page ----------------------------------------------------------------------


def test_the_api_lists_the_published_templates_in_the_request_s_language(client):
    ContainerTemplateFactory(slug="pytorch", name_fr="PyTorch avec CUDA", is_default=True, ports=[22, 8888])
    ContainerTemplateFactory(slug="hidden", published=False)

    listed = client.get("/api/v1/templates", HTTP_ACCEPT_LANGUAGE="fr").json()

    assert [(item["slug"], item["name"], item["ports"], item["default"]) for item in listed] == [
        ("pytorch", "PyTorch avec CUDA", [22, 8888], True),
    ]


TRADE = "/fr/trade/h200/"


@pytest.fixture
def template_book(open_market):
    """Two container servers of H200s: the cheaper one holds PyTorch, the dearer one Jupyter."""
    fx_rates_load(rates={"EUR": D("0.92")}, valid_from=datetime(2026, 1, 1, tzinfo=UTC), source="test")
    gpu = GpuModelFactory(slug="h200")
    pytorch = ContainerTemplateFactory(slug="pytorch", name_fr="PyTorch avec CUDA", is_default=True)
    jupyter = ContainerTemplateFactory(slug="jupyter", name_fr="Jupyter Lab")
    for price, template in (("2.00", pytorch), ("2.50", jupyter)):
        server = ServerFactory(gpu_model=gpu, isolation_level="container")
        ServerTemplate.objects.create(server=server, template=template, since=timezone.now())
        OfferFactory(server=server, gpus_offered=8, price_usd=D(price))
    return {"pytorch": pytorch, "jupyter": jupyter}


def test_the_order_forms_offer_the_templates_the_default_chosen_and_the_book_names_them(
    client, template_book, django_assert_max_num_queries
):
    with django_assert_max_num_queries(40):
        html = client.get(TRADE).content.decode()
    for prefix in ("buy", "bid"):
        select = (f'<select name="template" aria-describedby="{prefix}_template_helptext" '
                  f'id="{prefix}_template">')
        assert select in html
    assert '<option value="pytorch" selected>PyTorch avec CUDA</option>' in html
    assert '<option value="jupyter">Jupyter Lab</option>' in html
    assert f"modèles{NBSP}: PyTorch avec CUDA" in html
    assert f"modèles{NBSP}: Jupyter Lab" in html


def test_buying_with_a_template_confirms_it_and_runs_it(template_book, ed25519_public_key):
    buyer = buyer_with()
    client = signed_in(buyer)
    data = {"gpus": "1", "hours": "", "region": "", "template": "jupyter",
            "ssh_public_key": ed25519_public_key, "form_token": "6f1f3a52-8d0e-4b59-9a57-2f0c7f1e4b14"}
    html = client.post(f"{TRADE}buy/", data).content.decode()
    assert f"2,50{NBSP}$US" in html  # the cheaper server holds PyTorch only
    assert '<dd data-testid="confirm-template">Jupyter Lab</dd>' in html
    assert '<input type="hidden" name="template" value="jupyter">' in html

    response = client.post(f"{TRADE}buy/", data | {"confirmed_price_usd": "2.50", "form": "buy"})

    assert response.status_code == 302
    rental = Bid.objects.get(buyer=buyer).rental
    assert rental.container_template == template_book["jupyter"]
    page = client.get(response["Location"]).content.decode()
    assert '<dd data-testid="rental-template">Jupyter Lab</dd>' in page


@pytest.mark.parametrize(("shown", "changed"), [("2,00", False), ("1,80", True)])
def test_a_template_held_by_a_dearer_server_is_no_change_of_the_book(template_book, ed25519_public_key,
                                                                     shown, changed):
    """The page showed the book's best, 2.00, held by a PyTorch server: Jupyter's 2.50 is the
    buyer's choice, not the book moving; a book that did move since still says so."""
    data = {"gpus": "1", "hours": "", "region": "", "template": "jupyter", "price_1": shown,
            "ssh_public_key": ed25519_public_key, "form_token": "6f1f3a52-8d0e-4b59-9a57-2f0c7f1e4b14"}
    html = signed_in(buyer_with()).post(f"{TRADE}buy/", data).content.decode()
    assert f"2,50{NBSP}$US" in html
    with translation.override("fr"):
        message = gettext("The best offer changed since the page showed it: check the new price.")
    assert (message in html) is changed


@pytest.mark.parametrize("path", ["bid/", "buy/"])
@pytest.mark.parametrize("sent", ["nope", "x" * 5000, "PYTORCH"])
def test_a_template_not_listed_places_nothing_and_says_why_in_french(template_book, ed25519_public_key,
                                                                     path, sent):
    buyer = buyer_with()
    before = orders_state()
    data = bid_form(ed25519_public_key, gpus="1", max_price_usd="3,00") | {"template": sent}

    response = signed_in(buyer).post(f"{TRADE}{path}", data)

    assert response.status_code == 400
    with translation.override("fr"):
        assert escape(gettext(REFUSAL)) in response.content.decode()
        assert gettext(REFUSAL) != REFUSAL
    assert orders_state() == before
