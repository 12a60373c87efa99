"""Our TOTP codes (demo/totp.py, standard library only) against RFC 6238 and allauth's own check."""

import base64

import pytest
from allauth.mfa.models import Authenticator

from demo.totp import PERIOD, totp_activate, totp_code, totp_secret_generate, totp_step
from tests.factories import UserFactory

# RFC 6238, appendix B: the SHA-1 seed, and the last six digits of its eight-digit codes.
RFC_SECRET = base64.b32encode(b"12345678901234567890").decode()


@pytest.mark.parametrize(
    ("at", "code"),
    [(59, "287082"), (1111111109, "081804"), (1111111111, "050471"), (1234567890, "005924"),
     (2000000000, "279037"), (20000000000, "353130")],
)
def test_the_rfc_6238_vectors(at, code):
    assert totp_code(secret=RFC_SECRET, step=totp_step(at=at)) == code


def test_a_step_is_thirty_seconds():
    assert (PERIOD, totp_step(at=59.9), totp_step(at=60), totp_step(at=89.9)) == (30, 1, 2, 2)


def test_a_secret_is_twenty_random_bytes_in_base32():
    secret = totp_secret_generate()
    assert len(base64.b32decode(secret)) == 20 and secret != totp_secret_generate()


@pytest.mark.django_db
def test_allauth_accepts_our_code_once_and_refuses_another():
    user = UserFactory()
    secret = totp_secret_generate()
    totp_activate(user=user, secret=secret)
    authenticator = Authenticator.objects.get(user=user, type=Authenticator.Type.TOTP)
    code = totp_code(secret=secret)
    # Not the code of any step allauth's tolerance accepts now.
    near = {totp_code(secret=secret, step=totp_step() + shift) for shift in (-1, 0, 1, 2)}
    wrong = next(f"{n:06d}" for n in range(10) if f"{n:06d}" not in near)
    assert not authenticator.wrap().validate_code(wrong)
    assert authenticator.wrap().validate_code(code)
    assert not authenticator.wrap().validate_code(code)  # a code is used once
