"""The "API tokens" page of the account: the user's tokens (never anyone else's), a form that
creates one (the sell scope only for a seller's member with two-factor authentication), the secret
shown once on a page nobody caches, and revoking after a confirmation. And the admin's list."""

from datetime import UTC, date, datetime, timedelta
from html import unescape

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone, translation

from accounts.models import ApiToken
from accounts.services import MAX_API_TOKENS, api_token_create, api_token_revoke
from accounts.tokens import token_secret_hash
from tests.admin_support import operator_client
from tests.factories import SellerFactory, UserFactory
from tests.sellers.support import member

pytestmark = pytest.mark.django_db


def url(name, language="en", **kwargs):
    with translation.override(language):
        return reverse(name, kwargs=kwargs or None)


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def page(client, language="en") -> str:
    response = client.get(url("accounts:api-tokens", language))
    assert response.status_code == 200
    return unescape(response.content.decode())


def create(client, language="en", **data):
    fields = {"name": "laptop", "scopes": ["read"], "expires_on": ""} | data
    return client.post(url("accounts:api-tokens", language), fields)


def test_the_page_needs_a_signed_in_user(client):
    response = client.get(url("accounts:api-tokens"))
    assert response.status_code == 302 and "/account/login/" in response["Location"]


def test_the_account_navigation_links_the_page():
    client = signed_in(UserFactory())
    html = client.get(url("accounts:overview")).content.decode()
    assert html.count(f'href="{url("accounts:api-tokens")}"') >= 1


def test_creating_a_token_shows_its_secret_once_on_a_page_nobody_keeps():
    user = UserFactory()
    client = signed_in(user)
    response = create(client, name="training cluster", scopes=["read", "trade"])
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"] and "private" in response["Cache-Control"]
    token = ApiToken.objects.get(user=user)
    html = unescape(response.content.decode())
    secret = response.context["secret"]
    assert secret in html and token_secret_hash(secret) == token.secret_hash
    assert "this is the only time we show it" in html
    assert (token.name, token.scopes, token.expires_at) == ("training cluster", ["read", "trade"], None)
    # The list shows the token by its prefix, never the secret again.
    listing = page(client)
    assert secret not in listing and f"{token.prefix}…" in listing and "training cluster" in listing


def test_a_last_day_expires_the_token_at_its_end():
    user = UserFactory()
    day = date.today() + timedelta(days=10)
    create(signed_in(user), expires_on=day.isoformat())
    expected = datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
    assert ApiToken.objects.get(user=user).expires_at == expected


@pytest.mark.parametrize(("data", "message"), [
    ({"name": ""}, "This field is required."),
    ({"scopes": []}, "Choose at least one scope."),
    ({"scopes": ["sell"]}, "Select a valid choice."),
    ({"scopes": ["admin"]}, "Select a valid choice."),
    ({"expires_on": "2020-01-01"}, "The expiry must be in the future."),
    ({"expires_on": "9999-12-31"}, "Choose a day within the next ten years."),
    ({"expires_on": "tomorrow"}, "Enter a valid date."),
    ({"name": "   "}, "This field is required."),
])
def test_a_refused_token_is_a_form_error_and_creates_nothing(data, message):
    user = UserFactory()
    response = create(signed_in(user), **data)
    assert response.status_code == 400
    assert message in unescape(response.content.decode())
    assert not ApiToken.objects.exists()


def test_the_service_limit_is_shown_as_a_form_error_in_french():
    user = UserFactory()
    for number in range(MAX_API_TOKENS):
        api_token_create(user=user, name=f"t{number}", scopes=["read"])
    response = create(signed_in(user), "fr")
    assert response.status_code == 400
    assert f"Vous avez {MAX_API_TOKENS} jetons actifs" in unescape(response.content.decode())
    assert ApiToken.objects.count() == MAX_API_TOKENS


def test_the_sell_scope_is_offered_only_to_a_seller_member_with_two_factor_authentication():
    buyer_page = page(signed_in(UserFactory()))
    assert 'value="sell"' not in buyer_page
    assert "The sell scope is for members of a seller" in buyer_page
    no_mfa = member(SellerFactory(), mfa=False)
    assert 'value="sell"' not in page(signed_in(no_mfa))

    seller = SellerFactory(name="Lisbon GPU Lda")
    owner = member(seller)
    client = signed_in(owner)
    assert 'value="sell"' in page(client)
    create(client, name="portal bot", scopes=["sell"])
    token = ApiToken.objects.get(user=owner)
    assert token.seller == seller and token.scopes == ["sell"]
    assert "sell for Lisbon GPU Lda" in page(client)


def test_the_list_shows_each_state_last_use_and_only_the_users_tokens():
    user = UserFactory()
    active, _secret = api_token_create(user=user, name="active one", scopes=["read"])
    expired, _secret = api_token_create(user=user, name="expired one", scopes=["trade"],
                                        expires_at=timezone.now() + timedelta(hours=1))
    revoked, _secret = api_token_create(user=user, name="revoked one", scopes=["read"])
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(hours=1))
    api_token_revoke(user=user, token_id=revoked.pk)
    ApiToken.objects.filter(pk=active.pk).update(
        last_used_at=timezone.now(), last_used_address="198.51.100.7"
    )
    api_token_create(user=UserFactory(), name="someone else's", scopes=["read"])
    client = signed_in(user)
    response = client.get(url("accounts:api-tokens", "pt"))
    html = unescape(response.content.decode())
    assert "someone else's" not in html
    rows = {token.name: state for token, state in response.context["tokens"]}
    assert rows == {"active one": "active", "expired one": "expired", "revoked one": "revoked"}
    for text in ("Ativo", "Expirado", "Revogado", "a partir de 198.51.100.7", "Ainda não usado", "Nunca"):
        assert text in html, text


def test_the_page_runs_a_fixed_number_of_queries(django_assert_max_num_queries):
    seller = SellerFactory()
    owner = member(seller)

    def make(count):
        for number in range(count):
            api_token_create(user=owner, name=f"t{number}", scopes=["sell"] if number % 2 else ["read"],
                             seller_id=seller.pk if number % 2 else None)

    client = signed_in(owner)
    make(3)
    with django_assert_max_num_queries(12) as three:
        page(client)
    make(27)
    with django_assert_max_num_queries(len(three.captured_queries)):
        page(client)


def test_revoking_asks_first_then_revokes():
    user = UserFactory()
    token, secret = api_token_create(user=user, name="old laptop", scopes=["read"])
    client = signed_in(user)
    revoke = url("accounts:api-token-revoke", pk=token.pk)
    assert revoke in page(client)
    confirm = client.get(revoke)
    assert confirm.status_code == 200
    assert f"Revoke the token “old laptop” ({token.prefix}…)?" in unescape(confirm.content.decode())
    token.refresh_from_db()
    assert token.revoked_at is None
    response = client.post(revoke)
    assert response.status_code == 302 and response["Location"] == url("accounts:api-tokens")
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert "The token “old laptop” is revoked." in unescape(client.get(response["Location"]).content.decode())
    assert client.get(revoke).status_code == 200  # says it is already revoked
    assert client.post(revoke).status_code == 302  # again: no change


def test_revoking_needs_the_csrf_token():
    user = UserFactory()
    token, _secret = api_token_create(user=user, name="x", scopes=["read"])
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.post(url("accounts:api-token-revoke", pk=token.pk)).status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is None


@pytest.mark.parametrize("method", ["get", "post"])
def test_another_users_token_is_404(method):
    token, _secret = api_token_create(user=UserFactory(), name="theirs", scopes=["read"])
    client = signed_in(UserFactory())
    response = getattr(client, method)(url("accounts:api-token-revoke", pk=token.pk))
    assert response.status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None
    assert getattr(client, method)(url("accounts:api-token-revoke", pk=10**20)).status_code == 404


@pytest.mark.parametrize("language", ["en", "pt", "fr"])
def test_the_page_in_each_language(language):
    client = signed_in(UserFactory())
    html = page(client, language)
    title = {"en": "API tokens", "pt": "Tokens da API", "fr": "Jetons d'API"}[language]
    assert f"<h1>{title}</h1>" in html


# --- the admin --------------------------------------------------------------------------------

def test_the_admin_lists_tokens_without_their_secret_and_revokes_them(client):
    operator_client(client)
    token, secret = api_token_create(user=UserFactory(email="buyer@example.com"), name="ci", scopes=["read"])
    changelist = url("admin:accounts_apitoken_changelist")
    response = client.get(changelist)
    html = response.content.decode()
    assert response.status_code == 200
    assert "buyer@example.com" in html and token.prefix in html
    assert token.secret_hash not in html and secret not in html
    detail = client.get(url("admin:accounts_apitoken_change", object_id=token.pk)).content.decode()
    assert token.secret_hash not in detail
    response = client.post(changelist, {"action": "revoke", "_selected_action": [token.pk]})
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
