"""The admin's texts that no package catalog gets right in Portuguese and French: the yes/no icons'
text, the permissions' names, the side bar, the password's help, and French elision in the titles
that name a model or an app ("Ajout d’utilisateur", where Django's French writes "Ajout de")."""

from html import unescape

import pytest
from django.apps import apps
from django.contrib.auth.models import Permission
from django.utils import translation
from django.utils.translation import gettext

from accounts.admin import permission_label
from accounts.models import User
from exchange.models import Bid, Offer
from marketplace.admin_titles import elides, french_elided
from tests.admin_support import operator_client
from tests.marketplace.crawl_support import html_segments
from tests.marketplace.test_admin_site import (  # noqa: F401  (books: the fixture)
    books,
    change_url,
    changelist,
    our_models,
    url,
)

pytestmark = pytest.mark.django_db


# --- French elision --------------------------------------------------------------------------------


@pytest.mark.parametrize("word", ["utilisateur", "offre", "enchère", "écriture", "avoir", "historique",
                                  "Authentification et autorisation", "œuvre", "Ordre"])
def test_french_elides_before_a_vowel_or_a_mute_h(word):
    assert elides(word)


@pytest.mark.parametrize("word", ["groupe", "taux de change", "portefeuille", "hausse", "haut débit",
                                  "hors-ligne", "", " "])
def test_french_keeps_de_before_a_consonant_or_an_aspirated_h(word):
    assert not elides(word)


def test_the_title_elides_de_before_the_name_only():
    assert french_elided("Ajout de utilisateur", "utilisateur") == "Ajout d’utilisateur"
    assert french_elided("Affichage de offre", "offre") == "Affichage d’offre"
    assert french_elided("Modification de enchère", "enchère") == "Modification d’enchère"
    assert french_elided("Ajout de groupe", "groupe") == "Ajout de groupe"
    # "de" elsewhere in the title, or a title that does not end with the name, is left as it is.
    assert french_elided("Historique de utilisateur : x", "utilisateur") == "Historique de utilisateur : x"
    assert french_elided("Ajout de entrée de offre", "offre") == "Ajout de entrée d’offre"
    assert french_elided("Ajout de utilisateur", "") == "Ajout de utilisateur"


def test_french_admin_titles_elide_de(client, books):  # noqa: F811
    operator_client(client)
    offer, bid = Offer.objects.first(), Bid.objects.first()
    expected = {
        url("admin:accounts_user_add", "fr"): "Ajout d’utilisateur",
        change_url(books.buyer, "fr"): "Modification d’utilisateur",
        change_url(offer, "fr"): "Affichage d’offre",
        change_url(bid, "fr"): "Affichage d’enchère",
        url("admin:app_list", "fr", app_label="auth"): "Administration d’Authentification et autorisation",
        url("admin:auth_group_add", "fr"): "Ajout de groupe",
    }
    for page, title in expected.items():
        html = unescape(client.get(page).content.decode())
        assert f"<h1>{title}</h1>" in html, page
        assert f"{title} | " in html.split("</title>", 1)[0], page


def test_portuguese_and_english_titles_are_djangos(client, books):  # noqa: F811
    operator_client(client)
    for language, title in (("pt", "Adicionar utilizador"), ("en", "Add user")):
        html = unescape(client.get(url("admin:accounts_user_add", language)).content.decode())
        assert f"<h1>{title}</h1>" in html


# --- the yes/no icons ------------------------------------------------------------------------------


@pytest.mark.parametrize(("language", "yes", "no"), [("en", "Yes", "No"), ("pt", "Sim", "Não"),
                                                      ("fr", "Oui", "Non")])
def test_the_yes_no_icons_say_yes_or_no_in_the_pages_language(client, books, language, yes, no):  # noqa: F811
    operator_client(client)
    html = client.get(changelist(User, language)).content.decode()
    assert f'icon-yes.svg" alt="{yes}"' in html and f'icon-no.svg" alt="{no}"' in html


@pytest.mark.parametrize("language", ["pt", "fr"])
def test_no_admin_page_writes_true_or_false(client, books, language):  # noqa: F811
    operator_client(client)
    english = {}
    for model in our_models():
        obj = model.objects.order_by("pk").first()
        for page in (changelist(model, language), change_url(obj, language)):
            html = client.get(page).content.decode()
            found = [word for word in ("True", "False", "None") if f'alt="{word}"' in html]
            if found:
                english[page] = found
    assert english == {}


# --- the permissions' names ------------------------------------------------------------------------


@pytest.mark.parametrize(("language", "labels"), [
    ("pt", ["Contas | utilizador | Pode adicionar utilizador", "Contas | carteira | Pode ver carteira"]),
    ("fr", ["Comptes | utilisateur | Peut ajouter utilisateur",
            "Comptes | portefeuille | Peut voir portefeuille",
            "Facturation | opération comptable | Peut supprimer opération comptable"]),
])
def test_the_group_and_user_forms_name_the_permissions_in_the_pages_language(client, books, language, labels):  # noqa: F811
    operator_client(client)
    with translation.override(language):
        custom = gettext("Can move money: credit, refund, adjust balances, pay out, end rentals")
    labels = [" ".join(label.split()) for label in [*labels, custom]]  # the page's text, spaces collapsed
    for page in (url("admin:auth_group_add", language), change_url(books.buyer, language)):
        segments = html_segments(client.get(page).content.decode())
        assert [label for label in labels if not any(label in segment for segment in segments)] == [], page
        assert [segment for segment in segments if "| Can " in segment] == [], page


def test_a_permission_without_a_model_keeps_its_stored_name():
    permission = Permission.objects.filter(content_type__app_label="auth", codename="add_group").first()
    with translation.override("fr"):
        assert permission_label(permission).endswith("| Peut ajouter groupe")
    permission.codename = "export_group"
    permission.name = "Can export group"
    with translation.override("fr"):
        assert permission_label(permission).endswith("| Can export group")


# --- the side bar and the password -----------------------------------------------------------------


@pytest.mark.parametrize("language", ["pt", "fr"])
def test_the_side_bar_names_the_second_factors_in_the_pages_language(client, books, language):  # noqa: F811
    operator_client(client)
    segments = html_segments(client.get(url("admin:index", language)).content.decode())
    assert "Authenticators" not in segments and "Authenticator" not in segments
    with translation.override(language):
        assert gettext("two-factor authenticators").capitalize() in segments


def test_the_users_password_help_is_portuguese(client, books):  # noqa: F811
    operator_client(client)
    english = "Raw passwords are not stored, so there is no way to see the user’s password."
    with translation.override("pt"):
        portuguese = gettext(english)
    assert portuguese != english
    html = unescape(client.get(change_url(books.buyer, "pt")).content.decode())
    assert portuguese in html and english not in html


OUR_APPS = ("accounts", "billing", "catalog", "exchange", "marketplace", "sellers")


def test_every_field_of_our_models_is_named_through_the_catalogs():
    """A field without a translated name shows English as the admin's column, filter and form label."""
    plain = [
        f"{model.__name__}.{field.name}"
        for model in apps.get_models() if model._meta.app_label in OUR_APPS and not model._meta.proxy
        for field in model._meta.concrete_fields if type(field.verbose_name) is str and field.name != "id"
    ]
    # django-money's currency column takes no name: its admin filter is titled by EntryCurrencyFilter.
    assert plain == ["LedgerEntry.currency"]


def test_the_ledger_entries_filter_by_currency_in_the_pages_language(client, books):  # noqa: F811
    operator_client(client, role=None)
    html = client.get("/fr/admin/billing/ledgerentry/").content.decode()
    assert "Par devise" in unescape(html) and "Par currency" not in html
    assert client.get("/fr/admin/billing/ledgerentry/?currency=EUR").status_code == 200
