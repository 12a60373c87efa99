"""schemathesis against the live test server: every operation of the served OpenAPI document, with
generated requests, called with a valid token of the scope it needs (a funded buyer's read+trade
token; a seller member's sell token, with two-factor authentication). No answer is a 5xx, and
every answer conforms to the document: its status, its media type and its body.

Bounded in time: a fixed number of examples per operation, derandomized, no shrinking.
"""

from datetime import timedelta

import pytest
import schemathesis
from django.utils import timezone
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from accounts.services import api_token_create
from billing.models import Invoice
from exchange.models import Market
from tests.exchange.support import buyer_with
from tests.factories import OfferFactory, RentalFactory, SellerFactory, ServerFactory
from tests.sellers.support import person

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLES_PER_OPERATION = 10
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture
def seeded(gpu_catalog, ed25519_public_key) -> dict:
    """The market open with offers on it, a funded buyer with a running and an ended rental, a
    seller with a server and an offer. Returns a token for each, `buyer` (read and trade) and
    `seller` (sell), and the objects that path parameters name, by the path segment before them."""
    Market.objects.update_or_create(pk=Market.SINGLETON_ID, defaults={"is_open": True})
    buyer = buyer_with(amount="500", currency="USD")
    seller = SellerFactory()
    owner = person(seller)
    server = ServerFactory(seller=seller, gpu_model=gpu_catalog["h100-sxm"])
    offer = OfferFactory(server=server, price_usd="2.40")
    OfferFactory(server=ServerFactory(gpu_model=gpu_catalog["l40s"]), price_usd="0.90")
    now = timezone.now()
    rental = RentalFactory(buyer=buyer, offer=offer, state="running", paid_through=now + timedelta(hours=1),
                           ssh_public_key=ed25519_public_key)
    hour_ago = now - timedelta(hours=1)
    RentalFactory(buyer=buyer, offer=offer, state="ended", started_at=hour_ago - timedelta(hours=1),
                  paid_through=hour_ago, ended_at=hour_ago, end_reason="stopped")
    invoice = Invoice.objects.filter(top_up__user=buyer).first()
    _token, buyer_secret = api_token_create(user=buyer, name="schemathesis", scopes=["read", "trade"])
    _token, seller_secret = api_token_create(
        user=owner, name="schemathesis", scopes=["sell"], seller_id=seller.pk
    )
    objects = {"gpus": "h100-sxm", "markets": "h100-sxm", "rentals": rental.pk, "bids": rental.bid_id,
               "servers": server.pk, "offers": offer.pk}
    if invoice is not None:
        objects["invoices"] = invoice.number
    return {"tokens": {"buyer": buyer_secret, "seller": seller_secret}, "objects": objects}


def required_scopes(operation) -> set[str]:
    """The scopes the operation's security requirement names (empty: public or any token)."""
    requirements = operation.definition.raw.get("security") or []
    return {scope for requirement in requirements for scopes in requirement.values() for scope in scopes}


def headers_for(operation, tokens: dict[str, str]) -> dict[str, str]:
    if not operation.definition.raw.get("security"):
        return {}
    token = tokens["seller"] if "sell" in required_scopes(operation) else tokens["buyer"]
    return {"Authorization": f"Bearer {token}"}


def known_path_parameters(path: str, objects: dict) -> dict | None:
    """Path parameters that name a seeded object (`/rentals/{id}/stop`: the rental), or None when
    some parameter names nothing seeded."""
    parts = path.split("/")
    found, wanted = {}, 0
    for position, part in enumerate(parts):
        if part.startswith("{") and part.endswith("}"):
            wanted += 1
            if parts[position - 1] in objects:
                found[part[1:-1]] = objects[parts[position - 1]]
    return found if wanted and len(found) == wanted else None


def strategies_for(operation, objects: dict) -> list[tuple[str, object]]:
    """Generated requests (valid and not), the same aimed at seeded objects, and the document's
    own examples."""
    found = [("valid", operation.as_strategy(generation_mode=GenerationMode.POSITIVE)),
             ("invalid", operation.as_strategy(generation_mode=GenerationMode.NEGATIVE))]
    known = known_path_parameters(operation.path, objects)
    if known:
        found.append(("seeded", operation.as_strategy(generation_mode=GenerationMode.POSITIVE,
                                                      path_parameters=known)))
    found += [("example", strategy) for strategy in operation.get_strategies_from_examples()]
    return found


def exercise(strategy, *, base_url: str, headers: dict[str, str]) -> int:
    """Call with requests the strategy draws; returns how many were sent."""
    sent = []

    @settings(
        max_examples=EXAMPLES_PER_OPERATION, derandomize=True, deadline=None, database=None,
        phases=[Phase.generate], suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case):
        sent.append(case)
        case.call_and_validate(base_url=base_url, headers=headers, checks=CHECKS)

    run()
    return len(sent)


def test_every_operation_answers_as_its_document_says(live_server, seeded, settings):
    # Hundreds of requests a minute from two tokens: limits that never refuse one, for this test.
    settings.API_RATE_LIMIT_PER_MINUTE = settings.API_WRITE_RATE_LIMIT_PER_MINUTE = 10**9
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/v1/openapi.json")
    failures, sent = {}, {}
    for result in schema.get_all_operations():
        operation = result.ok()
        headers = headers_for(operation, seeded["tokens"])
        for kind, strategy in strategies_for(operation, seeded["objects"]):
            label = f"{operation.label} ({kind})"
            try:
                sent[label] = exercise(strategy, base_url=live_server.url, headers=headers)
            except Unsatisfiable:
                if kind != "invalid":  # only a string in the path: nothing invalid to send
                    failures[label] = "no request could be generated"
            except (Exception, FailureGroup) as failure:  # every failing operation is reported
                failures[label] = f"{type(failure).__name__}: {failure}"[:3000]
    assert failures == {}, "\n\n".join(f"{label}: {failure}" for label, failure in failures.items())
    assert sent and all(sent.values()), sent
