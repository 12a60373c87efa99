"""Saved SSH keys on the trade page's order forms: both forms offer the buyer's own keys (never
another buyer's), an order takes the key chosen, and a key pasted can be saved under a name once
the order is placed. Bad input places nothing and saves nothing."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519
from django.contrib.messages import get_messages
from django.utils import translation
from django.utils.html import escape
from django.utils.translation import gettext

from billing.services import fx_rates_load
from exchange.models import Bid, Rental, SshKey
from exchange.services import ssh_key_add
from tests.exchange.support import (
    VECTOR_FINGERPRINT,
    VECTOR_KEY,
    bid_form,
    buyer_with,
    openssh,
    orders_state,
    signed_in,
)

pytestmark = pytest.mark.django_db

TRADE = "/fr/trade/h100-sxm/"


@pytest.fixture
def rates():
    fx_rates_load(rates={"EUR": Decimal("0.92"), "GBP": Decimal("0.79")},
                  valid_from=datetime(2026, 1, 1, tzinfo=UTC), source="test")


def french(message: str) -> str:
    with translation.override("fr"):
        return gettext(message)


def state() -> tuple:
    return orders_state("max_price_usd"), list(SshKey.objects.order_by("pk").values_list("pk", "name"))


def resting_bid(**overrides):
    """A bid that rests (below every ask of the demo book), with no key unless given."""
    return bid_form("", max_price_usd="0,50") | overrides


def test_both_forms_offer_the_buyers_own_keys_first_chosen(client, demo_book, rates, ed25519_public_key):
    buyer = buyer_with()
    laptop = ssh_key_add(buyer=buyer, name="Portable", public_key=VECTOR_KEY)
    ssh_key_add(buyer=buyer_with(), name="Someone else's", public_key=ed25519_public_key)
    html = signed_in(buyer).get(TRADE).content.decode()
    for form in ("buy", "bid"):
        assert f'<input type="radio" name="ssh_key" value="{laptop.pk}"' in html
        assert f'id="{form}_ssh_key_0" required checked' in html or f'id="{form}_ssh_key_0" checked' in html
    assert html.count(f"Portable · {VECTOR_FINGERPRINT}") == 2
    assert "Someone else" not in html
    assert escape(french("Another key, pasted below")) in html
    # A visitor, or a buyer without saved keys, pastes a key.
    for page in (client.get(TRADE), signed_in(buyer_with()).get(TRADE)):
        assert 'name="ssh_key"' not in page.content.decode()
        assert 'name="ssh_public_key"' in page.content.decode()


def test_a_bid_takes_the_saved_key_chosen(demo_book, rates, open_market):
    buyer = buyer_with()
    key = ssh_key_add(buyer=buyer, name="Portable", public_key=VECTOR_KEY)
    response = signed_in(buyer).post(f"{TRADE}bid/", resting_bid(ssh_key=str(key.pk)))
    assert response["Location"] == "/fr/account/orders/"
    assert Bid.objects.get(buyer=buyer).ssh_public_key == key.public_key


def test_a_saved_key_wins_over_a_pasted_one_and_is_not_saved_again(
    demo_book, rates, open_market, ed25519_public_key
):
    buyer = buyer_with()
    key = ssh_key_add(buyer=buyer, name="Portable", public_key=VECTOR_KEY)
    signed_in(buyer).post(f"{TRADE}bid/", resting_bid(
        ssh_key=str(key.pk), ssh_public_key=ed25519_public_key, save_key_as="Bureau",
    ))
    assert Bid.objects.get(buyer=buyer).ssh_public_key == key.public_key
    assert list(SshKey.objects.filter(buyer=buyer).values_list("name", flat=True)) == ["Portable"]


def test_a_pasted_key_is_saved_under_its_name_once_the_order_is_placed(
    demo_book, rates, open_market, ed25519_public_key
):
    buyer = buyer_with()
    client = signed_in(buyer)
    response = client.post(f"{TRADE}bid/", resting_bid(
        ssh_key="", ssh_public_key=ed25519_public_key, save_key_as="  Mon   portable ",
    ))
    assert response.status_code == 302
    saved = SshKey.objects.get(buyer=buyer)
    assert saved.name == "Mon portable" and saved.public_key == Bid.objects.get(buyer=buyer).ssh_public_key
    shown = [str(message) for message in get_messages(response.wsgi_request)]
    assert french("Your key is saved as “%(name)s”: your next orders offer it.") % {
        "name": "Mon portable"} in shown
    # The next order offers it.
    assert f'value="{saved.pk}"' in client.get(TRADE).content.decode()
    # Pasted and named again, it is not saved twice, and the order stands.
    again = resting_bid(ssh_public_key=ed25519_public_key, save_key_as="Autre")
    response = client.post(f"{TRADE}bid/", again)
    assert response.status_code == 302 and Bid.objects.filter(buyer=buyer).count() == 2
    assert SshKey.objects.filter(buyer=buyer).count() == 1


@pytest.mark.parametrize(("overrides", "field", "message"), [
    ({"ssh_public_key": ""}, "ssh_public_key",
     "Paste your SSH public key: the rental's server lets only this key in."),
    ({"save_key_as": "a" * 101}, "save_key_as", None),
    ({"ssh_public_key": "ssh-ed25519 AAAA"}, "ssh_public_key", None),
])
def test_bad_input_places_nothing_and_saves_nothing(
    demo_book, rates, open_market, ed25519_public_key, overrides, field, message
):
    buyer = buyer_with()
    before = state()
    data = resting_bid(ssh_public_key=ed25519_public_key, save_key_as="Portable") | overrides
    response = signed_in(buyer).post(f"{TRADE}bid/", data)
    assert response.status_code == 400
    html = response.content.decode()
    assert 'class="field-error"' in html
    if message:
        assert escape(french(message)) in html
    assert state() == before


def test_another_buyers_key_is_no_choice(demo_book, rates, open_market, ed25519_public_key):
    other = ssh_key_add(buyer=buyer_with(), name="Not yours", public_key=ed25519_public_key)
    buyer = buyer_with()
    ssh_key_add(buyer=buyer, name="Portable", public_key=VECTOR_KEY)
    stranger = buyer_with()
    before = state()
    for client in (signed_in(buyer), signed_in(stranger)):
        response = client.post(f"{TRADE}bid/", resting_bid(ssh_key=str(other.pk)))
        assert response.status_code == 400
        assert other.public_key not in response.content.decode()
    assert state() == before


def test_buy_now_with_a_saved_key_goes_through_the_confirmation(demo_book, rates, open_market):
    buyer = buyer_with("500")
    key = ssh_key_add(buyer=buyer, name="Portable", public_key=VECTOR_KEY)
    client = signed_in(buyer)
    data = {"gpus": "1", "hours": "", "region": "", "ssh_key": str(key.pk), "ssh_public_key": "",
            "form_token": bid_form("")["form_token"]}
    confirm = client.post(f"{TRADE}buy/", data)
    assert confirm.status_code == 200 and f'name="ssh_key" value="{key.pk}"' in confirm.content.decode()
    html = confirm.content.decode()
    price = html.split('name="confirmed_price_usd" value="')[1].split('"')[0]
    response = client.post(f"{TRADE}buy/", data | {"confirmed_price_usd": price})
    assert response.status_code == 302
    assert Rental.objects.get(buyer=buyer).ssh_public_key == key.public_key


def test_the_page_reads_the_keys_in_one_query(demo_book, rates, django_assert_max_num_queries):
    buyer = buyer_with()
    client = signed_in(buyer)
    ssh_key_add(buyer=buyer, name="Portable", public_key=VECTOR_KEY)
    client.get(TRADE)
    with django_assert_max_num_queries(40) as one:
        client.get(TRADE)
    for index in range(5):
        public_key = openssh(ed25519.Ed25519PrivateKey.generate().public_key())
        ssh_key_add(buyer=buyer, name=f"Clé {index}", public_key=public_key)
    with django_assert_max_num_queries(len(one.captured_queries)):
        client.get(TRADE)
