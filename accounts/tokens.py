"""The API tokens' secrets: how one is made, and how it is recognised from what a client sends."""

import hashlib
import secrets

TOKEN_START = "evx_"  # noqa: S105 (the visible start of every token, not a secret)
PREFIX_LENGTH = 12


def token_secret_new() -> str:
    """`evx_` and 40 URL-safe characters (240 random bits)."""
    return TOKEN_START + secrets.token_urlsafe(30)


def token_secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()
