"""Every email the site sends, rendered in English, Portuguese and French and compared whole (subject
and body) with a snapshot in `email_snapshots/`, so that a change of wording, of a translation or of
the way an amount or a date is written shows in review as a diff a reader can judge.

Each case gives its template the context its sender gives it (read the service named in the case),
with fixed values: a fixed moment, fixed amounts formatted through `marketplace.formatting` in the
language rendered, links made by `absolute_url` and `reverse` as the senders make them, so that the
output depends on the templates and the catalogs only. allauth's emails go through our adapter, which
adds the site and the subject's prefix. Run with UPDATE_SNAPSHOTS=1 to write the snapshots instead of
comparing them, then read the diff.
"""

import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from allauth.account import app_settings as allauth_settings
from django.conf import settings
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.formats import date_format
from django.utils.translation import gettext

from accounts.adapter import AccountAdapter
from accounts.models import User
from exchange.ssh_keys import ssh_connect_command
from marketplace import formatting
from marketplace.emails import absolute_url, email_render
from sellers.isolation import FACTS, IsolationLevel

SNAPSHOTS = Path(__file__).parent / "email_snapshots"
LANGUAGES = ("en", "pt", "fr")
UPDATE = os.environ.get("UPDATE_SNAPSHOTS") == "1"
SITE_URL = "https://everxcloud.example"

# One moment for every date an email writes, in UTC as the senders have it from the database (the
# templates say "(UTC)" after it). December: a month whose name Portuguese writes in lower case.
AT = datetime(2026, 12, 3, 14, 5, tzinfo=UTC)
GPU = "H100 SXM"
RENTAL = SimpleNamespace(pk=4821, gpus=2)
BUYER_EMAIL = "joana.ferreira@example.com"


def _datetime(value: datetime) -> str:
    # The senders write their dates so (billing.services.refunds, exchange.services.agent_watch).
    return date_format(value, "DATETIME_FORMAT")


def _rental_ended(**extra: Any) -> dict[str, Any]:
    """billing.services.refunds._rental_ended_email and its siblings in charging and agents."""
    return {"number": RENTAL.pk, "gpus": RENTAL.gpus, "gpu": GPU, "ended_at": _datetime(AT), **extra}


def _refund(amount: str = "1.87") -> str:
    return formatting.money(Decimal(amount), "EUR")


def _payout(**extra: Any) -> dict[str, Any]:
    """billing.services.payouts._decision_email."""
    return {
        "number": 317, "name": "Lisboa GPU Lda.", "amount": formatting.usd(Decimal("1284.50")),
        "reason": "", "bank_reference": "", "url": absolute_url(reverse("sellers:portal-payouts")),
        **extra,
    }


def _top_up_refund(*, vat: bool) -> dict[str, Any]:
    """billing.services.corrections._refund_email."""
    number = "EXC-2026-000043"
    return {
        "reference": "EXC-7KQ2M9XD",
        "amount": formatting.money(Decimal("40.00"), "EUR"),
        "vat": formatting.money(Decimal("9.20"), "EUR") if vat else "",
        "total": formatting.money(Decimal("49.20") if vat else Decimal("40.00"), "EUR"),
        "balance": formatting.money(Decimal("1060.00"), "EUR"),
        "number": number, "url": absolute_url(reverse("billing:credit-note", kwargs={"number": number})),
    }


def _low_balance(*, hours: int) -> dict[str, Any]:
    """billing.services.warnings._warning_email, for a wallet in euros."""
    return {
        "hours": hours, "hours_text": formatting.number(hours),
        "balance": formatting.money(Decimal("12.40") if hours else Decimal("1.05"), "EUR"),
        "rate": formatting.usd(Decimal("4.98")), "rate_wallet": formatting.money(Decimal("4.58"), "EUR"),
        "top_up_url": absolute_url(reverse("billing:top-up")),
    }


def _server_unreachable(*, last_heard: bool, rentals: int) -> dict[str, Any]:
    """exchange.services.agent_watch.server_unreachable_record."""
    return {
        "server": "gpu-node-07", "seller": "Lisboa GPU Lda.",
        "last_heard": _datetime(AT) if last_heard else "", "rentals": rentals,
        "url": absolute_url(reverse("sellers:portal-server", args=[12])),
    }


def _isolation_fell(*, whole: bool, withdrawn: int) -> dict[str, Any]:
    """exchange.services.isolation._level_fell_email."""
    return {
        "server": "gpu-node-07",
        "before": (IsolationLevel.SHARED if whole else IsolationLevel.CONTAINER).label,
        "level": (IsolationLevel.WHOLE if whole else IsolationLevel.SHARED).label,
        "whole": whole, "withdrawn": withdrawn,
        # As sellers.isolation.level_shortfall says them: the facts a shared server lacks, or why
        # container mode no longer holds.
        "reasons": [str(FACTS["tmp_private"]), str(FACTS["host_login_closed"])] if whole
        else [gettext("The container self-test failed.")],
        "url": absolute_url(reverse("sellers:portal-server", args=[12])),
    }


def _seller(*, suspended: bool) -> dict[str, Any]:
    """exchange.services.servers._seller_status_email: the seller itself."""
    return {"seller": SimpleNamespace(
        name="Lisboa GPU Lda.", suspended_at=AT if suspended else None,
        suspension_reason="Two servers were reported with GPUs that did not match their offers.",
    )}


def _decision(status: str) -> dict[str, Any]:
    """sellers.services._decision_email."""
    application = SimpleNamespace(
        status=status, legal_name="Lisboa GPU Lda.",
        rejection_reason="The company registration number does not match the legal name.",
        operator_question="Which data centre hosts your servers?",
    )
    return {
        "application": application, "application_url": absolute_url(reverse("sellers:apply")),
        "portal_url": absolute_url(reverse("sellers:portal")),
    }


def _price_alert(gpus: int) -> dict[str, Any]:
    """exchange.services.alerts._price_alert_email."""
    return {
        "gpu": GPU, "gpus": gpus, "price": formatting.usd(Decimal("1.89")),
        "threshold": formatting.usd(Decimal("2.00")),
        "trade_url": absolute_url(reverse("exchange:trade", kwargs={"slug": "h100-sxm"})),
        "alerts_url": absolute_url(reverse("exchange:price-alerts")),
        "unsubscribe_url": absolute_url(
            reverse("exchange:price-alert-unsubscribe", kwargs={"token": "Zk3pQ8rT2vXw"})
        ),
    }


# Case name -> (template, context). A name is the template's, with "--variant" where a template says
# different things in different cases (each branch is a sentence of its own to translate).
CASES: dict[str, tuple[str, Callable[[], Mapping[str, Any]]]] = {
    # billing.services.top_ups._receipt_email
    "billing/email/receipt": ("billing/email/receipt", lambda: {
        "invoice": SimpleNamespace(number="EXC-2026-000042"),
        "amount": formatting.money(Decimal("1000.00"), "EUR"),
        "total": formatting.money(Decimal("1230.00"), "EUR"),
        "invoice_url": absolute_url(reverse("billing:invoice", kwargs={"number": "EXC-2026-000042"})),
    }),
    "billing/email/top_up_refund": ("billing/email/top_up_refund", lambda: _top_up_refund(vat=True)),
    "billing/email/top_up_refund--without-vat": (
        "billing/email/top_up_refund", lambda: _top_up_refund(vat=False)
    ),
    # billing.services.vat_refunds._vat_refund_email
    "billing/email/vat_refund": ("billing/email/vat_refund", lambda: {
        "reference": "EXC-7KQ2M9XD", "vat_id": "PT509999990",
        "vat": formatting.money(Decimal("230.00"), "EUR"),
        "balance": formatting.money(Decimal("1230.00"), "EUR"),
        "number": "EXC-2026-000044",
        "url": absolute_url(reverse("billing:credit-note", kwargs={"number": "EXC-2026-000044"})),
    }),
    "billing/email/low_balance": ("billing/email/low_balance", lambda: _low_balance(hours=2)),
    "billing/email/low_balance--one-hour": ("billing/email/low_balance", lambda: _low_balance(hours=1)),
    "billing/email/low_balance--no-hour": ("billing/email/low_balance", lambda: _low_balance(hours=0)),
    "billing/email/rental_ended_by_operator": (
        "billing/email/rental_ended_by_operator", lambda: _rental_ended(amount=_refund())
    ),
    "billing/email/rental_ended_by_operator--nothing-back": (
        "billing/email/rental_ended_by_operator", lambda: _rental_ended(amount="")
    ),
    "billing/email/rental_server_failure": (
        "billing/email/rental_server_failure", lambda: _rental_ended(amount=_refund())
    ),
    # billing.services.refunds, for a GPU found failed under the rental
    "billing/email/rental_gpu_failure": (
        "billing/email/rental_gpu_failure", lambda: _rental_ended(amount=_refund())
    ),
    # billing.services.agents._rental_isolation_lost: its server lost the level it was sold with
    "billing/email/rental_isolation_lost": (
        "billing/email/rental_isolation_lost", lambda: _rental_ended(amount=_refund())
    ),
    # billing.services.agents._not_delivered_email: the whole first hour back
    "billing/email/rental_not_delivered": (
        "billing/email/rental_not_delivered", lambda: _rental_ended(amount=_refund("9.16"))
    ),
    # billing.services.charging._rental_unpaid_email
    "billing/email/rental_unpaid": ("billing/email/rental_unpaid", lambda: _rental_ended(
        did_not_start=False, url=absolute_url(reverse("billing:top-up"))
    )),
    "billing/email/rental_unpaid--did-not-start": ("billing/email/rental_unpaid", lambda: _rental_ended(
        did_not_start=True, url=absolute_url(reverse("billing:top-up"))
    )),
    "billing/email/payout_paid": (
        "billing/email/payout_paid", lambda: _payout(bank_reference="PT50-20261203-0317")
    ),
    "billing/email/payout_paid--no-reference": ("billing/email/payout_paid", lambda: _payout()),
    "billing/email/payout_rejected": ("billing/email/payout_rejected", lambda: _payout(
        reason="The IBAN in the payout details belongs to another company."
    )),
    # exchange.services.market._bid_cancelled_email
    "exchange/email/bid_cancelled": ("exchange/email/bid_cancelled", lambda: {
        "bid": SimpleNamespace(gpus=4, gpu_model=SimpleNamespace(name=GPU)),
        "price": formatting.usd(Decimal("2.15")), "top_up_url": absolute_url(reverse("billing:top-up")),
    }),
    "exchange/email/price_alert": ("exchange/email/price_alert", lambda: _price_alert(8)),
    "exchange/email/price_alert--one-gpu": ("exchange/email/price_alert", lambda: _price_alert(1)),
    # exchange.services.agents._rental_ready_email
    "exchange/email/rental_ready": ("exchange/email/rental_ready", lambda: {
        "rental": RENTAL, "gpu": GPU,
        "ssh_command": ssh_connect_command(
            host="gpu-node-07.lisboa-gpu.example", port=2222, username="evx-4821"
        ),
        "rental_url": absolute_url(reverse("exchange:rental", args=[RENTAL.pk])),
    }),
    "exchange/email/rental_ready--known-hosts": ("exchange/email/rental_ready", lambda: {
        "rental": RENTAL, "gpu": GPU,
        "ssh_command": ssh_connect_command(
            host="gpu-node-07.lisboa-gpu.example", port=41003, username="evx-4821"
        ),
        "known_hosts": "[gpu-node-07.lisboa-gpu.example]:41003 ssh-ed25519 "
                       "AAAAC3NzaC1lZDI1NTE5AAAAIHxnZ3pXq0m1XbVdyQwLzfZbCq8YtE0R3w1b7J2h9kQs",
        "rental_url": absolute_url(reverse("exchange:rental", args=[RENTAL.pk])),
    }),
    "exchange/email/seller_status": ("exchange/email/seller_status", lambda: _seller(suspended=True)),
    "exchange/email/seller_status--reinstated": (
        "exchange/email/seller_status", lambda: _seller(suspended=False)
    ),
    "exchange/email/server_unreachable": (
        "exchange/email/server_unreachable", lambda: _server_unreachable(last_heard=True, rentals=3)
    ),
    "exchange/email/server_unreachable--one-rental": (
        "exchange/email/server_unreachable", lambda: _server_unreachable(last_heard=True, rentals=1)
    ),
    "exchange/email/server_unreachable--never-heard": (
        "exchange/email/server_unreachable", lambda: _server_unreachable(last_heard=False, rentals=0)
    ),
    "exchange/email/isolation_fell": (
        "exchange/email/isolation_fell", lambda: _isolation_fell(whole=True, withdrawn=2)
    ),
    "exchange/email/isolation_fell--one-offer": (
        "exchange/email/isolation_fell", lambda: _isolation_fell(whole=True, withdrawn=1)
    ),
    "exchange/email/isolation_fell--to-shared": (
        "exchange/email/isolation_fell", lambda: _isolation_fell(whole=False, withdrawn=0)
    ),
    "sellers/email/decision": ("sellers/email/decision", lambda: _decision("approved")),
    "sellers/email/decision--rejected": ("sellers/email/decision", lambda: _decision("rejected")),
    "sellers/email/decision--needs-info": ("sellers/email/decision", lambda: _decision("needs_info")),
    # sellers.services._invitation_email
    "sellers/email/invitation": ("sellers/email/invitation", lambda: {
        "invitation": SimpleNamespace(
            email="rui.santos@example.com", seller=SimpleNamespace(name="Lisboa GPU Lda.")
        ),
        "invitation_url": absolute_url(reverse("sellers:invitation", args=[58])),
    }),
}

# allauth's emails, with the context allauth gives its adapter (allauth.account.adapter and
# allauth.account.internal.flows); our adapter adds the site and the subject's prefix.
ALLAUTH_KEY = "Mjk:1vXyZa:confirm-key"


def _confirmation() -> dict[str, Any]:
    return {
        "user": User(email=BUYER_EMAIL), "key": ALLAUTH_KEY,
        "activate_url": absolute_url(reverse("account_confirm_email", args=[ALLAUTH_KEY])),
    }


ALLAUTH_CASES: dict[str, Callable[[], Mapping[str, Any]]] = {
    "account/email/email_confirmation_signup": _confirmation,
    "account/email/email_confirmation": _confirmation,
    "account/email/password_reset_key": lambda: {
        "user": User(email=BUYER_EMAIL),
        "password_reset_url": absolute_url(
            reverse("account_reset_password_from_key", kwargs={"uidb36": "2f", "key": "cz4k-1a2b3c4d5e6f"})
        ),
        "request": None,
    },
    "account/email/unknown_account": lambda: {
        "signup_url": absolute_url(reverse("account_signup")), "request": None,
    },
    "account/email/account_already_exists": lambda: {
        "signup_url": absolute_url(reverse("account_signup")),
        "password_reset_url": absolute_url(reverse("account_reset_password")),
    },
}


def _allauth_render(template: str, context: Mapping[str, Any]) -> tuple[str, str, str]:
    """What our adapter hands `email_send` for this allauth email, rendered as it renders it."""
    with mock.patch("accounts.adapter.email_send") as send:
        AccountAdapter().send_mail(template, BUYER_EMAIL, dict(context))
    [call] = send.call_args_list
    return email_render(template=call.kwargs["template"], context=call.kwargs["context"])


def _snapshot(subject: str, body: str, html: str) -> str:
    text = f"Subject: {subject}\n\n{body}"
    return text + (f"\n----- HTML -----\n{html}" if html else "")


def _rendered(case: str, language: str) -> str:
    with override_settings(SITE_URL=SITE_URL), translation.override(language), timezone.override("UTC"):
        if case in ALLAUTH_CASES:
            rendered = _allauth_render(case, ALLAUTH_CASES[case]())
        else:
            template, context = CASES[case]
            rendered = email_render(template=template, context=context())
    return _snapshot(*rendered)


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("case", [*CASES, *ALLAUTH_CASES])
def test_the_email_reads_as_its_snapshot(case, language):
    text = _rendered(case, language)
    path = SNAPSHOTS / f"{case}.{language}.txt"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"No snapshot {path.relative_to(SNAPSHOTS)}: run the test with UPDATE_SNAPSHOTS=1"
    assert text == path.read_text(encoding="utf-8")


def _email_templates() -> set[str]:
    """Each email of ours by its template prefix: every `<prefix>_subject.txt` and
    `<prefix>_message.txt` in the project's template folders (the site's and each app's), but for
    the layouts emails extend (`base_message.txt`), which are no email of their own."""
    root = Path(settings.BASE_DIR)
    folders = [Path(folder) for folder in settings.TEMPLATES[0]["DIRS"]]
    folders += [path for path in root.glob("*/templates") if path.is_dir()]
    prefixes = set()
    for folder in folders:
        for suffix in ("_subject.txt", "_message.txt", "_message.html"):
            for path in folder.rglob(f"*{suffix}"):
                if path.name.startswith("base_"):
                    continue
                prefixes.add(path.relative_to(folder).as_posix().removesuffix(suffix))
    return prefixes


def test_every_email_template_has_a_snapshot_case():
    templates = _email_templates()
    assert templates, "no email template found: has the template folder moved?"
    covered = {template for template, _context in CASES.values()} | set(ALLAUTH_CASES)
    assert sorted(templates - covered) == [], "give each new email a case in CASES"
    assert sorted({template for template, _context in CASES.values()} - templates) == []


def test_allauth_sends_no_email_without_a_case():
    """With these settings on, allauth sends emails that have no case here (its notifications of a
    changed password or address, sign-in and reset codes): add their cases before turning one on."""
    assert not allauth_settings.EMAIL_NOTIFICATIONS
    assert not allauth_settings.LOGIN_BY_CODE_ENABLED
    assert not allauth_settings.PASSWORD_RESET_BY_CODE_ENABLED
    assert not allauth_settings.EMAIL_VERIFICATION_BY_CODE_ENABLED


def test_no_snapshot_is_left_without_its_case():
    """A case renamed or removed takes its snapshots with it."""
    expected = {f"{case}.{language}.txt" for case in [*CASES, *ALLAUTH_CASES] for language in LANGUAGES}
    stored = {path.relative_to(SNAPSHOTS).as_posix() for path in SNAPSHOTS.rglob("*.txt")}
    assert sorted(stored - expected) == []
