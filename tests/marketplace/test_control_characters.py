"""Control characters are refused before any view reads them (a translated 400 that changes
nothing), and what a form shows back of its values is always markup a page can hold."""

import pytest
from django import forms

from exchange.models import Bid
from marketplace.forms import DisplayBoundField
from tests.factories import ProfileFactory

pytestmark = pytest.mark.django_db

REFUSED_FR = "Requête incomprise"


@pytest.mark.parametrize("query", ["?next=%00", "?sort=price%01", "?%00=1", "?gpus=1&gpus=%7F"])
def test_a_query_with_a_control_character_is_refused_in_the_page_language(client, query):
    response = client.get("/fr/compare/" + query)
    assert response.status_code == 400
    page = response.content.decode()
    assert REFUSED_FR in page
    assert "\x00" not in page and "\x01" not in page


def test_a_form_with_a_control_character_is_refused_and_places_nothing(client, demo_book):
    client.force_login(ProfileFactory(preferred_language="pt").user)
    sent = {"gpus": "1", "max_price_usd": "0,50\x00", "hours": "2"}
    response = client.post("/pt/trade/h100-sxm/bid/", sent)
    assert response.status_code == 400
    assert "Pedido não compreendido" in response.content.decode()
    assert Bid.objects.count() == 0


def test_tabs_and_line_breaks_are_still_sent_to_the_view(client):
    # An SSH key pasted over several lines is a textarea's business, not a refusal.
    assert client.get("/fr/compare/?q=a%0Ab%09c").status_code == 200


class _Form(forms.Form):
    host = forms.CharField()
    note = forms.CharField(widget=forms.Textarea)
    expires_at = forms.DateTimeField(widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))


def test_a_one_line_field_shows_line_breaks_as_spaces_and_a_textarea_keeps_them():
    form = _Form({"host": "gpu1.example.com\nid", "note": "one\ntwo", "expires_at": "x"})
    assert isinstance(form["host"], DisplayBoundField)
    assert 'value="gpu1.example.com id"' in str(form["host"])
    assert "one\ntwo" in str(form["note"])
    assert form.data["host"] == "gpu1.example.com\nid"  # validated as sent


@pytest.mark.parametrize("sent, shown", [
    ("-Infinity", 'value=""'), ("１００", 'value=""'), ("2026-12-01T10:30", 'value="2026-12-01T10:30"'),
])
def test_a_date_and_time_field_shows_only_what_a_browser_can_read(sent, shown):
    form = _Form({"host": "h", "note": "n", "expires_at": sent})
    assert shown in str(form["expires_at"])
