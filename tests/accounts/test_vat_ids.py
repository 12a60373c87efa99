import pytest

from accounts.vat_ids import VatIdInvalid, vat_id_validate


@pytest.mark.parametrize(
    ("country", "typed", "normalised"),
    [
        ("PT", "PT 500 000 000", "PT500000000"),
        ("PT", "500000000", "PT500000000"),
        ("DE", "DE136695976", "DE136695976"),
        ("GR", "EL094259216", "EL094259216"),
        ("GB", "GB980780684", "GB980780684"),
    ],
)
def test_valid_numbers_are_normalised(country, typed, normalised):
    assert vat_id_validate(country=country, number=typed).number == normalised


def test_bad_checksum_names_the_expected_format():
    with pytest.raises(VatIdInvalid) as invalid:
        vat_id_validate(country="PT", number="PT500000001")
    assert invalid.value.pattern == "PT999999999"
    assert not invalid.value.wrong_country


def test_number_of_another_country():
    with pytest.raises(VatIdInvalid) as invalid:
        vat_id_validate(country="FR", number="DE136695976")
    assert invalid.value.wrong_country


def test_countries_without_a_checker_accept_the_number():
    assert vat_id_validate(country="US", number="12-3456789").number == "123456789"
