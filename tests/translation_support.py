"""What tests of words in the three languages share."""

from django.utils import timezone, translation

LANGUAGES = ("en", "pt", "fr")


def names(obj) -> dict[str, str]:
    """`str(obj)`, what the admin calls it, in each language, dates in UTC."""
    with timezone.override("UTC"):
        labels = {}
        for language in LANGUAGES:
            with translation.override(language):
                labels[language] = str(obj)
        return labels


def label_cases(labels: dict[str, dict]) -> list[tuple[str, object, str]]:
    """(language, choice, its expected label) of a {language: {choice: label}} table, for
    `pytest.mark.parametrize`."""
    return [(language, choice, expected)
            for language, table in labels.items() for choice, expected in table.items()]
