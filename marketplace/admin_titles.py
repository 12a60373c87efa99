"""The admin's page titles that name a model or an app, French elision included.

Django's French catalog writes "Ajout de %s", "Modification de %s", "Affichage de %s" and
"Administration de %(app)s", whatever the name: "Ajout de utilisateur". French elides "de" before a
vowel or a mute h ("Ajout d’utilisateur", "Affichage d’offre", "Modification d’enchère"); the
admin site (marketplace/admin_site.py) rewrites those titles with `french_elided`.
"""

import unicodedata

# Words whose h is aspirated: French writes "de hausse", never "d’hausse". Only those a model or
# app name of ours could start with need to be here; every other h is mute ("d’historique").
ASPIRATED_H = ("hall", "hangar", "hasard", "haut", "hausse", "hiérarchie", "honte", "hors", "huit")

ELIDED = "d’"  # the typographic apostrophe, as Django's French catalog writes it


def elides(word: str) -> bool:
    """Whether French elides "de" (or "le", "que") before `word`: it starts with a vowel or a mute h."""
    word = word.strip().lower()
    if not word:
        return False
    first = unicodedata.normalize("NFD", word[0])[0]  # é -> e
    if first in "aeiouœæ":
        return True
    return first == "h" and not word.startswith(ASPIRATED_H)


def french_elided(title: str, name: str) -> str:
    """A French title that ends in "de <name>", "de" elided when the name calls for it:
    ("Ajout de utilisateur", "utilisateur") -> "Ajout d’utilisateur". Any other title is kept."""
    ending = f" de {name}"
    if name and title.endswith(ending) and elides(name):
        return f"{title[:-len(ending)]} {ELIDED}{name}"
    return title
