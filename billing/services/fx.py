"""Exchange rates that operators maintain: loaded from a rates file (the command, an upload in the
admin) or saved one by one, each recorded in the audit log. Reading the current rate and converting
at it is `billing.selectors.fx`.
"""

import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from accounts.models import AuditAction
from accounts.services import audit_record, instance_save_audited, operator_require
from marketplace.money import CURRENCIES

from ..exceptions import RatesFileInvalid
from ..models import ExchangeRate
from ..selectors.fx import BASE_CURRENCY

RATE_PLACES = 8


@dataclass(frozen=True)
class RatesFile:
    rates: dict[str, Decimal]
    valid_from: datetime
    source: str


def _rate_checked(currency: str, rate) -> Decimal:
    if currency not in CURRENCIES:
        raise ValueError(f"Unknown currency {currency!r}.")
    if isinstance(rate, float):
        raise TypeError("Rates are Decimal (or text), never float.")
    try:
        value = Decimal(str(rate))
    except InvalidOperation:
        raise ValueError(f"The rate of {currency} is not a number: {rate!r}.") from None
    if not value.is_finite() or value <= 0:
        raise ValueError(f"The rate of {currency} must be a positive number, not {rate!r}.")
    if value != value.quantize(Decimal(1).scaleb(-RATE_PLACES)):
        raise ValueError(f"The rate of {currency} has more than {RATE_PLACES} decimals: {rate!r}.")
    if value >= Decimal(10) ** (18 - RATE_PLACES):
        raise ValueError(f"The rate of {currency} is too large: {rate!r}.")
    if currency == BASE_CURRENCY and value != 1:
        raise ValueError("One US dollar is one US dollar.")
    return value.quantize(Decimal(1).scaleb(-RATE_PLACES))


@transaction.atomic
def fx_rates_load(*, rates: dict[str, Decimal], valid_from: datetime, source: str) -> int:
    """Add one rate row per currency valid from `valid_from`; return how many were new.

    Loading the same (currency, valid_from, rate) again adds nothing. A different rate for the
    same moment is a correction: it is added, and being newer it wins. USD is skipped (always 1).
    """
    if timezone.is_naive(valid_from):
        raise ValueError("valid_from needs a time zone.")
    checked = {currency: _rate_checked(currency, rate) for currency, rate in rates.items()}
    added = 0
    for currency, rate in sorted(checked.items()):
        if currency == BASE_CURRENCY:
            continue
        _row, created = ExchangeRate.objects.get_or_create(
            currency=currency, valid_from=valid_from, rate=rate, defaults={"source": source}
        )
        added += created
    return added


def fx_rates_read(*, path: Path) -> RatesFile:
    """Read a rates file: {"base": "USD", "valid_from": ISO 8601, "source": "...", "rates": {...}}.

    Rates are read as text (or JSON numbers parsed as Decimal), never through float.
    """
    return fx_rates_parse(text=path.read_text(encoding="utf-8"), name=path.name)


def fx_rates_parse(*, text: str, name: str) -> RatesFile:
    """The rates in a rates file's text (see `fx_rates_read`). Raises ValueError, KeyError,
    TypeError for a file that is not one."""
    data = json.loads(text, parse_float=Decimal)
    if not isinstance(data, dict) or not isinstance(data.get("rates"), dict):
        raise ValueError("A rates file is a JSON object with a \"rates\" object.")
    if data.get("base", BASE_CURRENCY) != BASE_CURRENCY:
        raise ValueError(f"Rates must be given per {BASE_CURRENCY}, not per {data.get('base')!r}.")
    valid_from = datetime.fromisoformat(data["valid_from"])
    if timezone.is_naive(valid_from):
        raise ValueError("valid_from needs a time zone, for example 2026-11-01T00:00:00Z.")
    rates = {currency: _rate_checked(currency, rate) for currency, rate in data["rates"].items()}
    return RatesFile(rates=rates, valid_from=valid_from, source=str(data.get("source", name))[:200])


def exchange_rate_save(*, operator, rate: ExchangeRate, changed: list[str]) -> ExchangeRate:
    """An operator's new rate (or an edit of one no conversion has used: the admin makes used rows
    read-only), recorded in the audit log. Raises `OperatorNotAllowed`."""
    permission = "billing.change_exchangerate" if rate.pk else "billing.add_exchangerate"
    return instance_save_audited(
        operator=operator, instance=rate, changed=changed, permission=permission,
        action=AuditAction.EXCHANGE_RATE_CHANGE,
    )


@transaction.atomic
def exchange_rates_load_by_operator(*, operator, content: bytes, name: str, reason: str = "") -> int:
    """Load a rates file an operator uploaded (the format of `manage.py load_fx_rates`); returns how
    many rates were new. Raises `OperatorNotAllowed`, `RatesFileInvalid` (nothing loaded)."""
    operator_require(operator=operator, permission="billing.add_exchangerate")
    try:
        rates = fx_rates_parse(text=content.decode("utf-8"), name=name)
    except (UnicodeDecodeError, KeyError, TypeError, ValueError, RecursionError) as error:
        raise RatesFileInvalid(
            _("This is not a rates file: %(error)s") % {"error": error}
        ) from None
    added = fx_rates_load(rates=rates.rates, valid_from=rates.valid_from, source=rates.source)
    newest = ExchangeRate.objects.filter(valid_from=rates.valid_from).order_by("currency", "-id").first()
    if newest is None:
        raise RatesFileInvalid(_("This file has no rate other than the US dollar's."))
    audit_record(
        actor=operator, action=AuditAction.EXCHANGE_RATES_LOAD, target=newest, reason=reason,
        after={"file": name[:100], "valid_from": rates.valid_from, "added": added,
               "rates": dict(sorted(rates.rates.items()))},
    )
    return added
