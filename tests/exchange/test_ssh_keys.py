import warnings

import pytest
from cryptography.hazmat.primitives.asymmetric import dsa

from exchange.exceptions import SshKeyInvalid
from exchange.ssh_keys import ACCEPTED_KEY_TYPES, MAX_KEY_LENGTH, ssh_public_key_validate

from .support import openssh


@pytest.mark.parametrize("kind", ["ed25519", "p256", "p384", "p521", "rsa2048"])
def test_accepted_key_types_come_back_normalised(ssh_keys, kind):
    key = ssh_keys[kind]
    assert ssh_public_key_validate(f"  {key}   me@laptop  \n") == f"{key} me@laptop"
    assert ssh_public_key_validate(key + "\r\n") == key


def test_comment_whitespace_is_collapsed(ssh_keys):
    key = ssh_keys["ed25519"]
    assert ssh_public_key_validate(f"{key}  Joana   Ferreira\t(work)") == f"{key} Joana Ferreira (work)"


def _code(text) -> str:
    with pytest.raises(SshKeyInvalid) as refused:
        ssh_public_key_validate(text)
    return refused.value.code


def test_rsa_under_2048_bits_is_too_weak(ssh_keys):
    assert _code(ssh_keys["rsa1024"]) == "ssh_key_too_weak"


def test_dsa_and_unknown_types_are_refused_naming_the_accepted_ones():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dss = openssh(dsa.generate_private_key(key_size=1024).public_key())  # noqa: S505 - SSH's only DSA size
    assert dss.startswith("ssh-dss ")
    with pytest.raises(SshKeyInvalid) as refused:
        ssh_public_key_validate(dss)
    assert refused.value.code == "ssh_key_type"
    assert all(name in str(refused.value.message) for name in ACCEPTED_KEY_TYPES)
    assert _code("sk-ssh-ed25519@openssh.com AAAAGnNrLXNzaC1lZDI1NTE5QG9wZW5zc2guY29t") == "ssh_key_type"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "garbage",
        "ssh-ed25519",
        "ssh-ed25519 not-base64!!",
        "ssh-rsa AAAA not-a-key",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        None,
        b"ssh-ed25519 AAAA",
    ],
)
def test_garbage_is_not_a_key(text):
    assert _code(text) == "ssh_key_invalid"


def test_header_and_body_must_agree(ssh_keys):
    blob = ssh_keys["ed25519"].split()[1]
    assert _code(f"ssh-rsa {blob}") == "ssh_key_invalid"


def test_authorized_keys_options_are_refused(ssh_keys):
    assert _code(f'command="/bin/sh" {ssh_keys["ed25519"]}') == "ssh_key_invalid"


def test_one_key_only(ssh_keys):
    assert _code(f"{ssh_keys['ed25519']}\n{ssh_keys['p256']}") == "ssh_key_several"


def test_control_characters_in_the_comment_are_refused(ssh_keys):
    assert _code(f"{ssh_keys['ed25519']} me\x00@laptop") == "ssh_key_invalid"


def test_too_long(ssh_keys):
    assert _code(ssh_keys["ed25519"] + " " + "x" * MAX_KEY_LENGTH) == "ssh_key_too_long"
