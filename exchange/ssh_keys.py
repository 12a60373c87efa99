"""SSH for a rental: the public key a buyer gives, and the command the buyer copies to connect.

A rental's server lets the key in (it ends up in `authorized_keys`), so the text is checked
strictly: one line, `type base64 [comment]`, no `authorized_keys` options in front, the key
decoded by `cryptography`, and a comment without control characters.

The command is pasted into the buyer's shell: every part is quoted, whatever the seller typed.

The server's side: the host key its agent reports for the rentals' own sshds (checked on every
heartbeat, so without loading it), the `known_hosts` line a buyer adds to check it, and the banner
the exchange reads before it delivers a rental.
"""

import base64
import binascii
import hashlib
import ipaddress
import re
import shlex
import socket
import struct
import time

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.utils.translation import gettext_lazy as _

from .exceptions import SshKeyInvalid

ACCEPTED_KEY_TYPES = (
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-rsa",
)
RSA_MIN_BITS = 2048
MAX_KEY_LENGTH = 16 * 1024


def _types_text() -> str:
    return ", ".join(ACCEPTED_KEY_TYPES)


def _invalid() -> SshKeyInvalid:
    return SshKeyInvalid(
        _(
            "This is not an SSH public key. Paste the one line of your public key file, "
            "for example ~/.ssh/id_ed25519.pub (accepted types: %(types)s)."
        )
        % {"types": _types_text()},
        code="ssh_key_invalid",
    )


def ssh_public_key_validate(text: str) -> str:
    """The key normalised to `type base64 [comment]`, or `SshKeyInvalid` with one of the codes
    `ssh_key_invalid` (not a key), `ssh_key_type` (a type we do not accept: DSA, ed448, security
    keys...), `ssh_key_too_weak` (RSA under 2048 bits), `ssh_key_too_long`, `ssh_key_several`."""
    if not isinstance(text, str):
        raise _invalid()
    text = text.strip()
    if len(text) > MAX_KEY_LENGTH:
        raise SshKeyInvalid(
            _("An SSH public key is at most %(max)d characters long.") % {"max": MAX_KEY_LENGTH},
            code="ssh_key_too_long",
        )
    if not text:
        raise _invalid()
    if "\n" in text or "\r" in text:
        raise SshKeyInvalid(
            _("Paste one SSH public key only, on one line."), code="ssh_key_several"
        )
    parts = text.split(None, 2)
    if len(parts) < 2:
        raise _invalid()
    key_type, blob = parts[0], parts[1]
    comment = " ".join(parts[2].split()) if len(parts) == 3 else ""
    if key_type not in ACCEPTED_KEY_TYPES:
        if key_type.startswith(("ssh-", "ecdsa-", "sk-")):
            raise SshKeyInvalid(
                _("This type of SSH key is not accepted. Use one of: %(types)s (RSA with at least "
                  "2048 bits).") % {"types": _types_text()},
                code="ssh_key_type",
            )
        raise _invalid()
    if not comment.isprintable():
        raise _invalid()
    try:
        key = serialization.load_ssh_public_key(f"{key_type} {blob}".encode("ascii"))
    except (ValueError, UnsupportedAlgorithm, UnicodeEncodeError):
        raise _invalid() from None
    if isinstance(key, rsa.RSAPublicKey) and key.key_size < RSA_MIN_BITS:
        raise SshKeyInvalid(
            _("This RSA key has %(bits)d bits; RSA keys need at least %(min)d bits. An ed25519 key "
              "is shorter and safer.") % {"bits": key.key_size, "min": RSA_MIN_BITS},
            code="ssh_key_too_weak",
        )
    canonical = key.public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode("ascii")
    if canonical.split(" ", 1)[0] != key_type:
        raise _invalid()
    return f"{canonical} {comment}" if comment else canonical


def ssh_key_fingerprint(public_key: str) -> str:
    """OpenSSH's fingerprint of a validated key: `SHA256:` and the unpadded base64 of the digest
    of the key's bytes (what `ssh-keygen -lf` prints)."""
    blob = base64.b64decode(public_key.split()[1])
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode("ascii").rstrip("=")
    return f"SHA256:{digest}"


# A POSIX user name as useradd takes it: the portable characters, not starting with a hyphen.
POSIX_USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}", re.ASCII)


def ssh_connect_command(*, host: str, port: int, username: str) -> str:
    """`ssh -p 22 evx12@gpu1.example.com`, each argument quoted for a POSIX shell (`shlex`), so
    that the host, checked when the seller registered it, can only ever be ssh's destination,
    even if it holds `$(...)`, quotes or spaces. Raises ValueError for a user name or a port the
    exchange never makes."""
    if not POSIX_USER_NAME.fullmatch(username):
        raise ValueError(f"Not a POSIX user name: {username!r}")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"Not a TCP port: {port!r}")
    return shlex.join(["ssh", "-p", str(port), f"{username}@{host}"])


MAX_HOST_KEY_LENGTH = 1000
# `type base64 [comment]` on one line of printable ASCII: what `ssh-keygen` writes in a .pub file.
HOST_KEY_LINE = re.compile(r"(?P<type>[a-z0-9-]+) (?P<blob>[A-Za-z0-9+/]+={0,2})(?: [\x20-\x7e]*)?", re.ASCII)
# The strings of each type's body (RFC 4253 6.6, RFC 5656 3.1, RFC 8709 4): its name, then the key.
HOST_KEY_PARTS = {"ssh-ed25519": 2, "ecdsa-sha2-nistp256": 3, "ecdsa-sha2-nistp384": 3,
                  "ecdsa-sha2-nistp521": 3, "ssh-rsa": 3}


def _ssh_strings(blob: bytes) -> list[bytes] | None:
    """The length-prefixed strings `blob` is made of, or None when it is not exactly that."""
    parts, at = [], 0
    while at < len(blob):
        if at + 4 > len(blob):
            return None
        (length,) = struct.unpack_from(">I", blob, at)
        at += 4 + length
        if at > len(blob):
            return None
        parts.append(blob[at - length:at])
    return parts


def ssh_host_key_valid(text) -> bool:
    """True for a server's public host key as the agent reports it: one line of at most
    MAX_HOST_KEY_LENGTH characters, one of ACCEPTED_KEY_TYPES, whose base64 body is that type's
    strings, the first naming the same type (cheap enough for every heartbeat: no key is loaded)."""
    if not isinstance(text, str) or len(text) > MAX_HOST_KEY_LENGTH:
        return False
    line = HOST_KEY_LINE.fullmatch(text)
    if line is None or line["type"] not in ACCEPTED_KEY_TYPES:
        return False
    try:
        parts = _ssh_strings(base64.b64decode(line["blob"], validate=True))
    except binascii.Error:
        return False
    return (parts is not None and len(parts) == HOST_KEY_PARTS[line["type"]]
            and parts[0] == line["type"].encode("ascii") and all(parts[1:]))


def ssh_known_hosts_line(*, host: str, port: int, host_key: str) -> str:
    """The line of `~/.ssh/known_hosts` that makes ssh check it reaches this server: the host as
    ssh names it (`[host]:port` for a port other than 22, as OpenSSH writes it), the key's type
    and body (its comment left out)."""
    key_type, blob = host_key.split()[:2]
    name = host if port == 22 else f"[{host}]:{port}"
    return f"{name} {key_type} {blob}"


SSH_BANNER_MAX = 255  # RFC 4253 4.2: the version line, CR LF included


def _address_of(host: str, port: int, *, public_only: bool) -> str | None:
    """The first address `host` resolves to, None when it resolves to none (or, `public_only`, to
    no public one). The exchange connects to the address it checked, so a name that resolves
    elsewhere a moment later (DNS rebinding) cannot turn the probe to the exchange's own network."""
    for *_kind, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        if not public_only or ipaddress.ip_address(address[0]).is_global:
            return address[0]
    return None


def ssh_banner_read(*, host: str, port: int, timeout: float, public_only: bool = True) -> str | None:
    """The first line an SSH-2 server sends (`SSH-2.0-OpenSSH_9.2p1 Debian-2`), read from `host`
    and `port` within `timeout` seconds; None when nothing listens, nothing answers in time, the
    line is not an SSH-2 version line (RFC 4253 4.2, `SSH-1.99-` counting too), or, `public_only`,
    the host has no public address (a seller's host naming the exchange's private network would
    otherwise make the probe a scanner of it). Nothing is sent: an SSH server speaks first."""
    deadline = time.monotonic() + timeout
    received = b""
    try:
        address = _address_of(host, port, public_only=public_only)
        if address is None:
            return None
        with socket.create_connection((address, port), timeout=timeout) as connected:
            while b"\n" not in received and len(received) < SSH_BANNER_MAX:
                connected.settimeout(max(deadline - time.monotonic(), 0.001))
                chunk = connected.recv(SSH_BANNER_MAX - len(received))
                if not chunk:
                    break
                received += chunk
    # Refused, unreachable, timed out, a name that resolves to nothing (or to what is no address).
    except (OSError, UnicodeError, ValueError):
        return None
    line, newline, _rest = received.partition(b"\n")
    line = line.removesuffix(b"\r")
    if not newline or not line.startswith((b"SSH-2.0-", b"SSH-1.99-")):
        return None
    text = line.decode("ascii", errors="replace")
    return text if text.isprintable() else None
