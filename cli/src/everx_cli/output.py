"""How the command line shows what the API answered: JSON for scripts, tables for people."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .client import Money, to_json
from .i18n import NBSP, language, number, t, value_label

EMPTY = "—"


def json_print(data: Any) -> None:
    """The answer as JSON on stdout, amounts as the exact decimal strings the API sent."""
    typer.echo(json.dumps(to_json(data), ensure_ascii=False, indent=2))


def money_text(value: Money | Decimal | str | None, currency: str | None = None) -> str:
    """`2.88 USD`, `2,88 USD`; a French no-break space keeps the amount and its unit together."""
    if value is None:
        return EMPTY
    if isinstance(value, Money):
        value, currency = value.amount, value.currency
    text = number(value)
    if not currency:
        return text
    space = NBSP if language() == "fr" else " "
    return f"{text}{space}{currency}"


def share_text(value: str | None) -> str:
    """A share from 0 to 1 as the API sends it ("0.995") as a percentage, as CLDR writes it:
    99.5% / 99,5% / 99,5 %; "new" without one (a server without a score yet)."""
    if value is None:
        return t("new")
    percent = format((Decimal(value) * 100).normalize(), "f")
    return number(percent) + (NBSP + "%" if language() == "fr" else "%")


def when(value: str | None) -> str:
    """An RFC 3339 time, shorter: `2026-12-01 21:00 UTC`."""
    if not value:
        return EMPTY
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return str(value)
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def cell(value: Any, kind: str | None = None) -> str:
    """One value for a table: money, numbers and times in the language's writing, codes in words."""
    if value is None or value == "":
        return EMPTY
    if isinstance(value, bool):
        return t("yes") if value else t("no")
    if isinstance(value, Money):
        return money_text(value)
    if kind == "usd":
        return money_text(value, "USD")
    if isinstance(value, Decimal):
        return number(value)
    if kind == "time":
        return when(value)
    if kind is not None:
        return value_label(kind, value)
    if isinstance(value, (int, float)):
        return number(str(value))
    if isinstance(value, dict):
        return ", ".join(f"{name}: {cell(item)}" for name, item in value.items())
    if isinstance(value, list):
        return ", ".join(cell(item) for item in value)
    return str(value)


def console() -> Console:
    # Made for each command, so that it writes to the stdout of the moment (tests capture it).
    return Console(highlight=False, soft_wrap=False)


def table_print(columns: Sequence[tuple[str, str, str | None]], rows: Iterable[dict[str, Any]],
                *, title: str | None = None) -> None:
    """Rows of dicts as a table; each column is (header, key, kind), the key may be dotted."""
    table = Table(title=title, title_justify="left")
    for header, _key, kind in columns:
        numeric = kind in {"number", "usd"}
        table.add_column(header, justify="right" if numeric else "left")
    count = 0
    for row in rows:
        count += 1
        table.add_row(*(Text(cell(_lookup(row, key), None if kind == "number" else kind))
                        for _header, key, kind in columns))
    if count == 0:
        typer.echo(t("Nothing to show."))
        return
    console().print(table)


def details_print(rows: Iterable[tuple[str, Any, str | None]]) -> None:
    """Label and value lines, for one object."""
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for label, value, kind in rows:
        table.add_row(Text(label), Text(cell(value, kind)))
    console().print(table)


def more_hint(page: dict[str, Any]) -> None:
    cursor = page.get("next_cursor")
    if cursor:
        typer.echo(t("More on the next page: add --cursor {cursor}", cursor=cursor))


def _lookup(row: dict[str, Any], key: str) -> Any:
    value: Any = row
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value
