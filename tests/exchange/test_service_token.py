"""A container rental's service token (issue 22, templates: "Jupyter on 8888 with a per-rental token
shown once"): made when the rental matches, carried to the agent with the template's variable, and
given to the buyer once, on the rental page or through the API; afterwards only the container
has it."""

import importlib
from datetime import timedelta
from decimal import Decimal

import pytest
from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from exchange.exceptions import RentalNotFound, ServiceTokenUnavailable
from exchange.models import Rental
from exchange.services import agent_heartbeat_receive, offer_post, rental_service_token_reveal
from sellers.models import ContainerTemplate, ServerTemplate
from tests.api_tokens import token_client
from tests.factories import ContainerTemplateFactory, OfferFactory, RentalFactory, ServerFactory, UserFactory
from tests.threads import run_together

from .agents_support import enrolled, report_for
from .support import place, signed_in

pytestmark = pytest.mark.django_db

D = Decimal
NBSP = "\u00a0"
TOKEN = "kM3r9QeX0b7TzY2wVn5LcA8dHs1uPjFo"
TOKEN_PATH = "/etc/everx/service-token"


@pytest.fixture
def h100(gpu_catalog):
    return gpu_catalog["h100-sxm"]


@pytest.fixture
def jupyter():
    return ContainerTemplateFactory(slug="jupyter", ports=[22, 8888], token_env="JUPYTER_TOKEN")


def container_rental(server, template, *, state="running", token=TOKEN, **fields):
    now = timezone.now()
    running = state == "running"
    offer = server.offers.first() or OfferFactory(server=server, gpus_offered=8)
    return RentalFactory(
        offer=offer, gpus=1, state=state, started_at=now,
        paid_through=now + timedelta(hours=1), delivered_at=now if running else None,
        username="evx-9" if running else "", isolation_level="container", container_template=template,
        service_token=token, **fields,
    )


@pytest.fixture
def rental(h100, jupyter):
    server = ServerFactory(gpu_model=h100, isolation_level="container", host="gpu1.example.com")
    return container_rental(server, jupyter, service_ports={"8888": 41004})


def shown_at(rental):
    return Rental.objects.values_list("service_token_shown_at", flat=True).get(pk=rental.pk)


# --- made at the match, carried to the agent ---------------------------------------------------------


@pytest.mark.usefixtures("balances")
def test_a_rental_matched_on_a_container_server_gets_a_token_of_its_own_and_others_none(
    open_market, h100, ssh_key, jupyter
):
    containers = [ServerFactory(gpu_model=h100, isolation_level="container") for _ in range(2)]
    for server in containers:
        ServerTemplate.objects.create(server=server, template=jupyter, since=timezone.now())
        offer_post(server=server, gpus=8, price_usd=D("1.00"))
    offer_post(server=ServerFactory(gpu_model=h100, isolation_level="shared"), gpus=8, price_usd=D("2.00"))

    first, second = (place(UserFactory(), h100, ssh_key, price="1.00", container_template=jupyter).rental
                     for _ in range(2))
    shared = place(UserFactory(), h100, ssh_key, price="3.00", isolation_levels="shared").rental

    tokens = dict(Rental.objects.values_list("pk", "service_token"))
    assert len(tokens[first.pk]) == len(tokens[second.pk]) == 32  # 24 random bytes, URL-safe
    assert tokens[first.pk] != tokens[second.pk]
    assert tokens[shared.pk] == ""


def test_the_desired_state_carries_the_token_and_the_template_s_variable(h100, jupyter):
    plain = ContainerTemplateFactory(slug="plain")
    server, secret = enrolled(h100, isolation_level="container")
    rental = container_rental(server, jupyter, state="starting")

    answer = agent_heartbeat_receive(secret=secret, report=report_for(server, logins=[(rental, [0])]),
                                     address="192.0.2.7")

    assert [(login.template, login.service_token) for login in answer.logins] == [(jupyter.digest, TOKEN)]
    assert {spec.image: spec.token_env for spec in answer.templates} == {
        jupyter.image: "JUPYTER_TOKEN", plain.image: "",
    }


def test_live_container_rentals_from_before_tokens_get_one_from_the_migration(h100, jupyter):
    server = ServerFactory(gpu_model=h100, isolation_level="container")
    live, ended = container_rental(server, jupyter, token=""), container_rental(server, jupyter, token="")
    Rental.objects.filter(pk=ended.pk).update(state="ended", ended_at=timezone.now(), end_reason="completed")
    migration = importlib.import_module("exchange.migrations.0016_rental_service_token")

    migration.live_container_rentals_token(apps, None)

    tokens = dict(Rental.objects.values_list("pk", "service_token"))
    assert len(tokens[live.pk]) == 32
    assert tokens[ended.pk] == ""


def test_the_database_keeps_tokens_to_container_rentals(h100):
    rental = RentalFactory(offer=OfferFactory(server=ServerFactory(gpu_model=h100)), isolation_level="shared")
    changes = (({"service_token": TOKEN}, "exchange_rental_token_in_container"),
               ({"service_token_shown_at": timezone.now()}, "exchange_rental_token_shown_exists"))
    for change, constraint in changes:
        with pytest.raises(IntegrityError, match=constraint), transaction.atomic():
            Rental.objects.filter(pk=rental.pk).update(**change)


@pytest.mark.parametrize("variable", ["JUPYTER TOKEN", "1TOKEN", "TOKEN=x", "É", "T" * 65])
def test_a_template_s_variable_must_be_an_environment_variable_s_name(variable):
    template = ContainerTemplateFactory.build(token_env=variable)

    with pytest.raises(ValidationError) as refused:
        template.clean()

    assert refused.value.message_dict == {
        "token_env": ["Write the name of an environment variable, such as JUPYTER_TOKEN."],
    }
    if len(variable) <= 64:  # the column's length refuses the longer one
        with pytest.raises(IntegrityError, match="sellers_template_token_env"), transaction.atomic():
            ContainerTemplate.objects.filter(pk=ContainerTemplateFactory().pk).update(token_env=variable)


# --- given once ------------------------------------------------------------------------------------


def test_the_token_is_given_once_and_then_refused_with_where_to_read_it(rental):
    given = rental_service_token_reveal(buyer=rental.buyer, rental_id=rental.pk)
    first = shown_at(rental)

    with pytest.raises(ServiceTokenUnavailable) as refused:
        rental_service_token_reveal(buyer=rental.buyer, rental_id=rental.pk)

    assert given.service_token == TOKEN and first is not None
    assert refused.value.code == "service_token_shown"
    assert TOKEN_PATH in str(refused.value.message)
    assert shown_at(rental) == first


def test_another_buyer_s_or_an_ended_rental_is_not_found_and_nothing_changes(rental, h100, jupyter):
    with pytest.raises(RentalNotFound):
        rental_service_token_reveal(buyer=UserFactory(), rental_id=rental.pk)
    ended = container_rental(rental.server, jupyter, state="starting")
    Rental.objects.filter(pk=ended.pk).update(state="ended", ended_at=timezone.now(), end_reason="completed")
    with pytest.raises(RentalNotFound):
        rental_service_token_reveal(buyer=ended.buyer, rental_id=ended.pk)

    assert shown_at(rental) is None and shown_at(ended) is None


def test_a_template_without_a_variable_has_no_token_to_give(rental):
    ContainerTemplate.objects.filter(pk=rental.container_template_id).update(token_env="")

    with pytest.raises(ServiceTokenUnavailable) as refused:
        rental_service_token_reveal(buyer=rental.buyer, rental_id=rental.pk)

    assert refused.value.code == "service_token_none"
    assert shown_at(rental) is None


@pytest.mark.django_db(transaction=True)
def test_two_requests_at_once_give_the_token_to_one_of_them(h100, jupyter):
    server = ServerFactory(gpu_model=h100, isolation_level="container")
    rental = container_rental(server, jupyter)

    results, errors = run_together(2, lambda _index: rental_service_token_reveal(
        buyer=rental.buyer, rental_id=rental.pk).service_token)

    assert results == [TOKEN]
    assert [error.code for error in errors] == ["service_token_shown"]


# --- the rental page ----------------------------------------------------------------------------------


def test_the_rental_page_offers_the_token_once_in_french(rental, django_assert_max_num_queries):
    client = signed_in(rental.buyer)
    page = f"/fr/account/rentals/{rental.pk}/"

    with django_assert_max_num_queries(15):
        html = client.get(page).content.decode()
    assert "Jeton des services" in html
    assert ("Les services web de votre conteneur, comme Jupyter, demandent ce jeton. Il n'est affiché "
            f"qu'une fois{NBSP}: gardez-le là où vous gardez vos mots de passe.") in html
    assert f'action="/fr/account/rentals/{rental.pk}/token/"' in html
    assert TOKEN not in html

    answer = client.post(f"/fr/account/rentals/{rental.pk}/token/")

    shown = answer.content.decode()
    assert answer.status_code == 200
    assert "no-store" in answer["Cache-Control"]
    assert f'data-testid="service-token">{TOKEN}</pre>' in shown
    assert f"Copiez-le maintenant{NBSP}: il ne sera plus affiché." in shown
    assert f"dans la variable JUPYTER_TOKEN et dans le fichier {TOKEN_PATH}." in shown

    html = client.get(page).content.decode()
    assert TOKEN not in html and 'data-testid="token-reveal"' not in html
    assert f"Vous l'avez perdu{NBSP}? Connectez-vous en SSH et lisez-le dans {TOKEN_PATH}." in html


def test_asking_again_goes_back_to_the_rental_and_says_why_in_portuguese(rental):
    client = signed_in(rental.buyer)
    client.post(f"/pt/account/rentals/{rental.pk}/token/")

    answer = client.post(f"/pt/account/rentals/{rental.pk}/token/", follow=True)

    html = answer.content.decode()
    assert answer.redirect_chain == [(f"/pt/account/rentals/{rental.pk}/", 302)]
    assert ("O token deste aluguer já foi mostrado. Inicie sessão por SSH e leia-o em "
            f"{TOKEN_PATH}.") in html
    assert TOKEN not in html


def test_another_buyer_gets_404_and_a_get_405(rental):
    other = signed_in(UserFactory())

    assert other.post(f"/fr/account/rentals/{rental.pk}/token/").status_code == 404
    assert signed_in(rental.buyer).get(f"/fr/account/rentals/{rental.pk}/token/").status_code == 405
    assert shown_at(rental) is None


def test_a_rental_whose_template_takes_no_token_shows_no_token_section(rental):
    ContainerTemplate.objects.filter(pk=rental.container_template_id).update(token_env="")

    html = signed_in(rental.buyer).get(f"/fr/account/rentals/{rental.pk}/").content.decode()

    assert "Jeton des services" not in html


# --- the API ------------------------------------------------------------------------------------------


def test_the_api_gives_the_token_once_then_409_in_french(rental):
    api = token_client(rental.buyer, "read", "trade")
    path = f"/api/v1/rentals/{rental.pk}"
    assert api.get(path).json()["service_token"] == "unshown"

    given = api.post(f"{path}/service-token")
    again = api.post(f"{path}/service-token", HTTP_ACCEPT_LANGUAGE="fr")

    assert given.status_code == 200
    body = given.json()
    assert (body["token"], body["variable"], body["path"]) == (TOKEN, "JUPYTER_TOKEN", TOKEN_PATH)
    assert body["shown_at"].endswith("Z")
    assert "no-store" in given["Cache-Control"]
    assert again.status_code == 409
    assert again.json()["code"] == "service_token_shown"
    assert again.json()["detail"] == ("Le jeton de cette location a déjà été affiché. Connectez-vous en "
                                      f"SSH et lisez-le dans {TOKEN_PATH}.")
    assert api.get(path).json()["service_token"] == "shown"


def test_the_api_answers_404_for_another_s_rental_and_403_without_the_trade_scope(rental):
    path = f"/api/v1/rentals/{rental.pk}/service-token"
    assert token_client(UserFactory(), "trade").post(path).status_code == 404
    assert token_client(rental.buyer, "read").post(path).status_code == 403
    assert shown_at(rental) is None


def test_the_api_says_none_for_a_rental_whose_template_takes_no_token(rental):
    ContainerTemplate.objects.filter(pk=rental.container_template_id).update(token_env="")
    api = token_client(rental.buyer, "read", "trade")

    refused = api.post(f"/api/v1/rentals/{rental.pk}/service-token")

    assert (refused.status_code, refused.json()["code"]) == (409, "service_token_none")
    assert api.get(f"/api/v1/rentals/{rental.pk}").json()["service_token"] == "none"
