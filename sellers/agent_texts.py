"""The words and commands the seller portal shows about a server's host agent: the mismatch between
the registration and what the agent sees, in sentences of the active language, its uptime, and the
exact commands that install and enroll it."""

import shlex
from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal

from babel.dates import format_timedelta
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from marketplace import formatting

# The agent reports memory in MiB, the catalog in GB: a mismatch may carry either. No GPU has a
# thousand gigabytes, so a figure from 1024 up is MiB.
_MIB_FROM = 1024
AGENT_VENV = "/opt/everx-agent"
TOKEN_PLACEHOLDER = "evxa_…"  # noqa: S105 (where the seller pastes the token, not a secret)


def _memory(value) -> str:
    try:
        amount = Decimal(str(value))
    except ArithmeticError:
        return str(value)
    if amount >= _MIB_FROM:
        amount = (amount / 1024).quantize(Decimal("1"), rounding=ROUND_HALF_UP)
    return formatting.gigabytes(amount)


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def mismatch_describe(*, item: dict) -> str:
    """One difference between the registration and the agent's report (`ServerAgent.mismatch`), as
    a sentence."""
    code, index = item.get("code"), item.get("index")
    expected, seen = item.get("expected"), item.get("seen")
    if code == "count" and _count(expected) is not None:
        return ngettext(
            "Registered %(expected)s GPU, the agent sees %(seen)s.",
            "Registered %(expected)s GPUs, the agent sees %(seen)s.", expected,
        ) % {"expected": formatting.number(expected), "seen": formatting.number(_count(seen) or 0)}
    if code == "model" and index is not None:
        return _("GPU %(index)s is a %(seen)s, the registration says %(expected)s.") % {
            "index": index, "seen": seen, "expected": expected,
        }
    if code == "model":
        return _("The agent sees %(seen)s, the registration says %(expected)s.") % {
            "seen": seen, "expected": expected,
        }
    if code == "memory" and index is not None:
        return _("GPU %(index)s has %(seen)s of memory, the registered model has %(expected)s.") % {
            "index": index, "seen": _memory(seen), "expected": _memory(expected),
        }
    if code == "memory":
        return _("The GPUs have %(seen)s of memory, the registered model has %(expected)s.") % {
            "seen": _memory(seen), "expected": _memory(expected),
        }
    if code == "ecc" and _count(seen) is not None:
        return ngettext(
            "GPU %(index)s reports %(errors)s uncorrected memory (ECC) error.",
            "GPU %(index)s reports %(errors)s uncorrected memory (ECC) errors.", seen,
        ) % {"index": index, "errors": formatting.number(seen)}
    if code == "missing":
        return _("GPU %(index)s is missing from what the agent sees.") % {"index": index}
    if code == "gpu_error":
        # The agent's own words (English, from nvidia-smi): quoted as they came.
        detail = item.get("seen") or item.get("detail") or ""
        return _("The agent could not read the GPUs: %(detail)s") % {"detail": detail}
    return _("What the agent sees does not match the registration.")


def mismatch_sentences(*, mismatch: list) -> list[str]:
    return [mismatch_describe(item=item) for item in mismatch if isinstance(item, dict)]


def uptime_words(*, seconds: int | None) -> str:
    """`3 days`, `3 dias`, `3 jours`; a dash when the agent did not say."""
    if seconds is None:
        return "—"
    return format_timedelta(timedelta(seconds=seconds), locale=formatting.babel_locale())


def agent_install_commands(*, site_url: str, wheel_filename: str) -> list[str]:
    """Install the agent from the exchange into its own virtual environment (the system's Python
    stays untouched, whatever its distribution allows pip to do) and put its command on root's
    PATH."""
    wheel_url = f"{site_url}/agent/{wheel_filename}"
    return [
        f"sudo python3 -m venv {AGENT_VENV}",
        f"sudo {AGENT_VENV}/bin/pip install --upgrade {shlex.quote(wheel_url)}",
        f"sudo ln -sf {AGENT_VENV}/bin/everx-agent /usr/local/bin/everx-agent",
    ]


def agent_enroll_command(*, site_url: str, secret: str | None) -> str:
    """With the token's secret when it is shown (once), else with a placeholder where it goes."""
    token = shlex.quote(secret) if secret else TOKEN_PLACEHOLDER
    return f"sudo everx-agent enroll --url {shlex.quote(site_url)} --token {token}"
