"""Two-factor codes (TOTP, RFC 6238) computed with the standard library, for the demo operators
and the browser tests.

allauth stores a TOTP authenticator as `{"secret": adapter.encrypt(base32 secret)}` and checks a
code with HMAC-SHA1 over 30-second steps, 6 digits (its defaults, which our settings keep); this
module writes the same row through allauth's public adapter and computes the same codes.
"""

import base64
import hashlib
import hmac
import secrets
import time

from allauth.mfa.adapter import get_adapter
from allauth.mfa.models import Authenticator

PERIOD = 30
DIGITS = 6


def totp_secret_generate() -> str:
    """A new random secret, base32 as allauth keeps it (160 bits, as RFC 4226 recommends)."""
    return base64.b32encode(secrets.token_bytes(20)).decode("ascii")


def totp_step(*, at: float | None = None) -> int:
    """The number of the 30-second step that `at` (a Unix time, now by default) falls in."""
    return int((time.time() if at is None else at) // PERIOD)


def totp_code(*, secret: str, step: int | None = None) -> str:
    """The code of `secret` for `step` (the current one by default): RFC 4226's HOTP of the step."""
    key = base64.b32decode(secret.encode("ascii"), casefold=True)
    counter = totp_step() if step is None else step
    digest = hmac.new(key, counter.to_bytes(8, "big"), hashlib.sha1).digest()
    offset = digest[-1] & 0x0F
    value = int.from_bytes(digest[offset:offset + 4], "big") & 0x7FFFFFFF
    return f"{value % 10**DIGITS:0{DIGITS}d}"


def totp_activate(*, user, secret: str) -> Authenticator:
    """Turn two-factor authentication on for `user` with `secret`, as allauth's own set-up does."""
    return Authenticator.objects.create(
        user=user, type=Authenticator.Type.TOTP, data={"secret": get_adapter().encrypt(secret)}
    )
