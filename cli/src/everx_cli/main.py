"""The `everx` command line: every command is a thin layer over one call of `EverxClient`.

Exit codes: 0 done, 1 refused by the exchange (or nothing done), 2 wrong usage, 3 not signed in or
not allowed, 4 the exchange could not be reached (or failed on its side).
"""

import functools
import re
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import httpx
import typer

from . import __version__
from .client import ApiError, EverxClient, Money, NetworkError
from .config import config_forget, config_path, config_write, settings_load
from .i18n import language_detect, language_set, t, value_label
from .output import cell, details_print, json_print, money_text, more_hint, share_text, table_print

OK, REFUSED, USAGE, AUTH, NETWORK = 0, 1, 2, 3, 4

# Tests replace it with an httpx.MockTransport; None is the network.
HTTP_TRANSPORT: Optional[httpx.BaseTransport] = None

# Help texts are read when the module loads: they follow EVERX_LANG or the system locale.
language_set(language_detect())

app = typer.Typer(
    name="everx", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help=t("Rent and sell GPU hours on EverXCloud from the terminal."),
)
offer_app = typer.Typer(
    no_args_is_help=True, help=t("Your offers as a seller: list, post, reprice, withdraw."),
)
app.add_typer(offer_app, name="offer")

JsonOption = Annotated[bool, typer.Option("--json", help=t("Print the API's answer as JSON, for scripts."))]


class Language(str, Enum):
    en = "en"
    pt = "pt"
    fr = "fr"


class RentalsShown(str, Enum):
    live = "live"
    ended = "ended"


LangOption = Annotated[Optional[Language], typer.Option(
    "--lang", help=t("Language of the messages: en, pt or fr."), show_default=False, case_sensitive=False,
)]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help=t("Do not ask for confirmation."))]
LimitOption = Annotated[Optional[int], typer.Option(
    "--limit", min=1, max=100, help=t("How many to show (1 to 100)."), show_default=False,
)]
CursorOption = Annotated[Optional[str], typer.Option(
    "--cursor", help=t("Where the previous page ended."), show_default=False,
)]
GpuArgument = Annotated[str, typer.Argument(
    help=t("The GPU model, by its slug (h100-sxm)."), show_default=False,
)]
GpusOption = Annotated[int, typer.Option("--gpus", min=1, help=t("How many GPUs on one server."))]
HoursOption = Annotated[Optional[int], typer.Option(
    "--hours", min=1, help=t("How many hours; without it the rental runs until you stop it."),
    show_default=False,
)]
RegionOption = Annotated[Optional[str], typer.Option(
    "--region", help=t("Only servers in this region (europe, north-america, asia-pacific)."),
    show_default=False,
)]
MinReliabilityOption = Annotated[Optional[str], typer.Option(
    "--min-reliability",
    help=t("Only servers at least this reliable, a share from 0 to 1 (0.95); new servers never are."),
    show_default=False,
)]
TemplateOption = Annotated[Optional[str], typer.Option(
    "--template",
    help=t("The container template a container server runs for you (everx templates); default: the "
           "exchange's default."),
    show_default=False,
)]
IsolationOption = Annotated[Optional[str], typer.Option(
    "--isolation",
    help=t("Only servers sold at these isolation levels, comma-separated: container, shared, whole (the "
           "market rules); default: all of them."),
    show_default=False,
)]
OfferArgument = Annotated[int, typer.Argument(
    help=t("The offer's id (everx offer list)."), show_default=False,
)]
SshKeyOption = Annotated[Optional[Path], typer.Option(
    "--ssh-key", help=t("Your SSH public key file (the one ending in .pub)."), show_default=False,
)]
SshKeyIdOption = Annotated[Optional[int], typer.Option(
    "--ssh-key-id", help=t("Or one of the SSH keys saved in your account, by its id."), show_default=False,
)]


# --- one run of a command -----------------------------------------------------------------------

@dataclass(frozen=True)
class Defaults:
    """The options given before the command (`everx --json --lang fr rentals`)."""

    json: bool = False
    language: Optional[Language] = None
    url: Optional[str] = None


@dataclass(frozen=True)
class Session:
    json: bool
    language: str
    url: str
    token: Optional[str] = field(repr=False)  # never in a traceback

    def client(self, *, signed_in: bool = True, token: Optional[str] = None) -> EverxClient:
        token = token or self.token
        if signed_in and not token:
            raise NotSignedIn()
        return EverxClient(self.url, token=token, language=self.language, transport=HTTP_TRANSPORT)


class NotSignedIn(Exception):
    pass


class Declined(Exception):
    """The person answered no, or could not be asked."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


class NothingDone(Exception):
    """The exchange took the request but did nothing (a buy that found no offer): exit 1."""


@dataclass
class Run:
    """What this run of `everx` knows: the options before the command, then the command's own.
    A process runs one command; the callback starts each run afresh (the tests run many)."""

    defaults: Defaults = field(default_factory=Defaults)
    session: Optional[Session] = None


RUN = Run()


def _session(json_output: bool, lang: Optional[Language], url: Optional[str] = None) -> Session:
    defaults = RUN.defaults
    chosen = lang or defaults.language
    language = chosen.value if chosen else language_detect()
    language_set(language)
    settings = settings_load(url=url or defaults.url)
    session = Session(json=json_output or defaults.json, language=language, url=settings.url,
                      token=settings.token)
    RUN.session = session
    return session


def _current_session() -> Optional[Session]:
    return RUN.session


def _exit_code(error: ApiError) -> int:
    if error.status in (401, 403):
        return AUTH
    if error.status >= 500:
        return NETWORK
    return REFUSED


def _say(message: str) -> None:
    typer.echo(message, err=True)


def _report_api_error(session: Optional[Session], error: ApiError) -> None:
    if session is not None and session.json:
        json_print(error.body)
        return
    _say(t("Error: {detail}", detail=error.detail))
    for field_error in error.errors:
        field = field_error.get("field") or ""
        _say(f"  {field}: {field_error.get('detail', '')}" if field else f"  {field_error.get('detail', '')}")
    if error.status == 401:
        _say(t("Run everx login with a valid token, or set EVERX_TOKEN."))
    elif error.code == "scope_missing":
        _say(t("Make a token with this scope on the API tokens page of your account."))


def _report_failure(session: Optional[Session], code: str, message: str) -> None:
    if session is not None and session.json:
        json_print({"status": None, "code": code, "detail": message})
    else:
        _say(message)


def _handled(command: Callable) -> Callable:
    """Run a command and turn what can go wrong into a readable message and an exit code."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except ApiError as error:
            _report_api_error(_current_session(), error)
            raise typer.Exit(_exit_code(error)) from None
        except NetworkError as error:
            message = t("Could not reach the exchange at {url}: {reason}", url=error.url, reason=error.reason)
            _report_failure(_current_session(), "network_error", message)
            raise typer.Exit(NETWORK) from None
        except NotSignedIn:
            _report_failure(_current_session(), "not_signed_in",
                            t("You are not signed in: run everx login, or set EVERX_TOKEN."))
            raise typer.Exit(AUTH) from None
        except Declined as declined:
            raise typer.Exit(declined.code) from None
        except NothingDone:
            raise typer.Exit(REFUSED) from None

    return run


def _command(group: typer.Typer, name: str, help_text: str) -> Callable:
    def register(command: Callable) -> Callable:
        group.command(name, help=help_text)(_handled(command))
        return command

    return register


# --- checking what was typed --------------------------------------------------------------------

PRICE_TEXT = re.compile(r"^[0-9]{1,8}(\.[0-9]{1,8})?$")
DURATION_TEXT = re.compile(r"^([0-9]{1,5})([mhd])$")
YES_ANSWERS = {"en": {"y", "yes"}, "pt": {"s", "sim", "y", "yes"}, "fr": {"o", "oui", "y", "yes"}}


def _price(value: Optional[str]) -> Optional[str]:
    """A price as the API takes it: `2.90` (a decimal comma is read as a point)."""
    if value is None:
        return None
    text = value.strip().replace(",", ".")
    if not PRICE_TEXT.match(text):
        raise typer.BadParameter(t("Write a price like 2.90 (US dollars per GPU-hour)."))
    return text


def _expiry(value: Optional[str]) -> Optional[str]:
    """`30m`, `12h`, `2d` from now, or a time (`2026-12-24T18:00:00Z`), as RFC 3339 in UTC."""
    if value is None:
        return None
    text = value.strip()
    duration = DURATION_TEXT.match(text)
    if duration:
        amount, unit = int(duration.group(1)), duration.group(2)
        step = {"m": timedelta(minutes=1), "h": timedelta(hours=1), "d": timedelta(days=1)}[unit]
        moment = datetime.now(timezone.utc) + amount * step
    else:
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            moment = None
        if moment is None or moment.tzinfo is None:
            raise typer.BadParameter(
                t("Write an expiry like 12h, 2d or 2026-12-24T18:00:00Z (a time with its zone).")
            )
    return moment.astimezone(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _public_key(path: Optional[Path], key_id: Optional[int]) -> dict[str, Any]:
    """The key the rental's login will accept: a public key file, or a saved key's id. A private
    key is refused before anything leaves the machine."""
    if path is None and key_id is None:
        raise typer.BadParameter(
            t("Give your SSH public key with --ssh-key, or a saved key with --ssh-key-id."),
            param_hint="--ssh-key",
        )
    if path is None:
        return {"ssh_key_id": key_id}
    try:
        text = path.expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        message = t("Cannot read the file {path}.", path=path)
        raise typer.BadParameter(message, param_hint="--ssh-key") from None
    if "PRIVATE KEY" in text:
        raise typer.BadParameter(
            t("{path} is a private key: never send it. Give the public key, the file ending in .pub.",
              path=path),
            param_hint="--ssh-key",
        )
    return {"ssh_public_key": text}


def _confirm(session: Session, question: str, yes: bool) -> None:
    """Ask before spending money or ending something; `--yes` answers for scripts. Without a
    terminal to ask on, nothing is done."""
    if yes:
        return
    try:
        answer = typer.prompt(f"{question} {t('[y/N]')}", default="", show_default=False,
                              prompt_suffix=" ", err=True)
    except typer.Abort:
        _say("")
        _say(t("Nothing was done: add --yes to confirm without a question."))
        raise Declined(USAGE) from None
    if answer.strip().lower() not in YES_ANSWERS.get(session.language, YES_ANSWERS["en"]):
        _say(t("Nothing was done."))
        raise Declined(REFUSED)


def _show(session: Session, data: Any, render: Callable[[Any], None]) -> None:
    if session.json:
        json_print(data)
    else:
        render(data)


# --- the global options -------------------------------------------------------------------------

def _version(value: bool) -> None:
    if value:
        typer.echo(f"everx {__version__}")
        raise typer.Exit()


@app.callback()
def everx(
    json_output: JsonOption = False,
    lang: LangOption = None,
    url: Annotated[Optional[str], typer.Option(
        "--url", help=t("The exchange's address (default: the saved one, or EVERX_URL)."), show_default=False,
    )] = None,
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help=t("Print the version and stop."),
    )] = False,
) -> None:
    RUN.defaults, RUN.session = Defaults(json=json_output, language=lang, url=url), None


# --- signing in ---------------------------------------------------------------------------------

def _identity_lines(me: dict[str, Any]) -> list[tuple[str, Any, Optional[str]]]:
    return [
        (t("Email"), me.get("email"), None),
        (t("Token"), me.get("token_name") or me.get("name") or me.get("token"), None),
        (t("Scopes"), ", ".join(me.get("scopes") or []), None),
        (t("Seller"), me.get("seller"), None),
    ]


def _at_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


def _token_read() -> str:
    """The token, typed without echo at a terminal, or piped (`everx login < token.txt`) by a script."""
    if _at_terminal():
        return typer.prompt(t("API token (made on the API tokens page of your account)"), hide_input=True,
                            err=True).strip()
    token = sys.stdin.readline().strip() if sys.stdin is not None else ""
    if not token:
        raise typer.BadParameter(t("Type the token, or give it on the standard input."))
    return token


@_command(app, "login", t("Check an API token and save it for the next commands."))
def login(
    url: Annotated[Optional[str], typer.Option(
        "--url", help=t("The exchange's address (default: the saved one, or EVERX_URL)."), show_default=False,
    )] = None,
    json_output: JsonOption = False,
    lang: LangOption = None,
) -> None:
    session = _session(json_output, lang, url)
    token = _token_read()
    with session.client(token=token) as client:
        try:
            me = client.me()
        except ApiError as error:
            if error.status == 401:
                _report_api_error(session, error)
                _say(t("The token was not saved."))
                raise typer.Exit(AUTH) from None
            raise
        path = config_path()
        config_write(path, url=client.url, token=token)
    if session.json:
        json_print({"url": client.url, "config": str(path), "me": me})
        return
    _say(t("Token saved in {path}.", path=path))
    typer.echo(t("Signed in to {url} as {email}.", url=client.url, email=me.get("email", "")))
    if settings_load().token != token:
        _say(t("EVERX_TOKEN is set: it wins over the saved token while it is set."))


@_command(app, "logout", t("Forget the saved token (revoke it on the API tokens page)."))
def logout(json_output: JsonOption = False, lang: LangOption = None) -> None:
    session = _session(json_output, lang)
    forgotten = config_forget(config_path())
    if session.json:
        json_print({"forgotten": forgotten})
    elif forgotten:
        typer.echo(t("The saved token is forgotten. Revoke it on the API tokens page if it may have leaked."))
    else:
        typer.echo(t("No token was saved."))


@_command(app, "me", t("Who the token acts for, and what it may do."))
def me(json_output: JsonOption = False, lang: LangOption = None) -> None:
    session = _session(json_output, lang)
    with session.client() as client:
        answer = client.me()
    _show(session, answer, lambda data: details_print(_identity_lines(data)))


# --- the market ---------------------------------------------------------------------------------

@_command(app, "gpus", t("The GPU models you can rent, with their memory and bandwidth."))
def gpus(json_output: JsonOption = False, lang: LangOption = None) -> None:
    session = _session(json_output, lang)
    with session.client(signed_in=False) as client:
        answer = client.gpus()
    _show(session, answer, lambda rows: table_print([
        (t("GPU model"), "slug", None), (t("Name"), "name", None), (t("Vendor"), "vendor", None),
        (t("Memory (GB)"), "memory_gb", "number"), (t("Bandwidth"), "bandwidth", None),
    ], rows))


@_command(app, "templates", t("The container templates a rental sold as a container can run."))
def templates(json_output: JsonOption = False, lang: LangOption = None) -> None:
    session = _session(json_output, lang)
    with session.client(signed_in=False) as client:
        answer = client.templates()
    _show(session, answer, lambda rows: table_print([
        (t("Template"), "slug", None), (t("Name"), "name", None), (t("Minimum driver"), "min_driver", None),
        (t("Disk (GB)"), "disk_gb", "number"), (t("Default"), "default", None),
    ], rows))


@_command(app, "markets", t("Every GPU model's market: best prices, last trade, GPUs on offer."))
def markets(json_output: JsonOption = False, lang: LangOption = None) -> None:
    session = _session(json_output, lang)
    with session.client(signed_in=False) as client:
        answer = client.markets()
    _show(session, answer, lambda rows: table_print([
        (t("GPU model"), "gpu_model", None), (t("Open"), "market_open", None),
        (t("Best bid"), "best_bid", "usd"), (t("Best ask"), "best_ask", "usd"),
        (t("Last trade"), "last_trade.price", "usd"), (t("GPUs on offer"), "gpus_on_offer", "number"),
    ], rows))


@_command(app, "book", t("A GPU model's order book: the price levels of offers and bids."))
def book(
    gpu: GpuArgument,
    depth: Annotated[int, typer.Option("--depth", min=1, max=100, help=t("How many price levels."))] = 10,
    min_reliability: MinReliabilityOption = None,
    isolation: IsolationOption = None,
    json_output: JsonOption = False,
    lang: LangOption = None,
) -> None:
    session = _session(json_output, lang)
    with session.client(signed_in=False) as client:
        answer = client.book(gpu, depth=depth, min_reliability=min_reliability,
                             isolation=_isolation_levels(isolation))

    def render(data: dict[str, Any]) -> None:
        levels = [(t("Price per GPU-hour"), "price", "usd"), (t("GPUs"), "gpus", "number")]
        asks = [ask | {"reliability_text": _offers_reliability(ask)} for ask in data.get("asks") or []]
        table_print(levels + [(t("Reliability of each offer's server"), "reliability_text", None)], asks,
                    title=t("Offers (asks)"))
        table_print(levels, data.get("bids") or [], title=t("Bids"))

    _show(session, answer, render)


def _offers_reliability(ask: dict[str, Any]) -> str:
    """The offers of an ask level, each with its GPUs and its server's reliability: `4 GPUs (99.5%),
    2 GPUs (new)`."""
    texts = [
        t("{gpus} GPUs ({reliability})", gpus=offer.get("gpus"),
          reliability=share_text(offer.get("reliability")))
        for offer in ask.get("offers") or []
    ]
    if ask.get("more_offers"):
        texts.append(t("and {count} more", count=ask["more_offers"]))
    return ", ".join(texts)


# --- buying -------------------------------------------------------------------------------------

# The money fields a quote may carry, in the order a buyer reads them.
QUOTE_LABELS = {
    "price": "Price per GPU-hour",
    "per_hour_usd": "Per hour in US dollars",
    "per_hour": "Per hour in your wallet's currency",
    "total_usd": "Total in US dollars",
    "total": "Total in your wallet's currency",
}


def _quote_lines(quote: dict[str, Any]) -> list[tuple[str, Any, Optional[str]]]:
    """Every amount of the quote, the known ones first under their own words."""
    lines = [(t(label), quote[key], "usd") for key, label in QUOTE_LABELS.items()
             if quote.get(key) is not None]
    lines += [(key.replace("_", " "), value, None) for key, value in quote.items()
              if key not in QUOTE_LABELS and isinstance(value, Money)]
    if quote.get("covers_first_hour") is False:
        lines.append((t("Warning"), t("your balance does not cover the first hour."), None))
    return lines


def _order_lines(gpu: str, gpus: int, hours: Optional[int], max_price: Optional[str],
                 region: Optional[str], min_reliability: Optional[str] = None,
                 template: Optional[str] = None,
                 isolation: Optional[list[str]] = None) -> list[tuple[str, Any, Optional[str]]]:
    lines: list[tuple[str, Any, Optional[str]]] = [
        (t("GPU model"), gpu, None), (t("GPUs"), gpus, None),
        (t("Hours"), hours if hours else t("until you stop it"), None),
    ]
    if region:
        lines.append((t("Region"), region, None))
    if min_reliability:
        lines.append((t("Minimum reliability"), _share_shown(min_reliability), None))
    if template:
        lines.append((t("Container template"), template, None))
    if isolation is not None:
        lines.append((t("Isolation levels"), ", ".join(isolation), None))
    if max_price is not None:
        lines.append((t("Your maximum price per GPU-hour"), Decimal(max_price), "usd"))
    return lines


ISOLATION_LEVELS = ("container", "shared", "whole")


def _isolation_levels(text: Optional[str]) -> Optional[list[str]]:
    """`--isolation container,whole` as the API's list. Checked here: the exchange's refusal names
    the levels as its pages do ("shared server"), not as the option takes them."""
    if text is None:
        return None
    levels = [level.strip() for level in text.split(",")]
    if not all(level in ISOLATION_LEVELS for level in levels):
        raise typer.BadParameter(t("Name the levels as container, shared or whole, separated by commas."))
    return levels


def _share_shown(text: str) -> str:
    """The minimum typed, as a percentage when it reads as a number (the exchange checks it)."""
    try:
        return share_text(text)
    except ArithmeticError:  # decimal.InvalidOperation: the exchange says what is wrong with it
        return text


@_command(app, "quote", t("What an order would cost now, at the best offer."))
def quote(
    gpu: GpuArgument,
    gpus_count: GpusOption = 1,
    hours: HoursOption = None,
    region: RegionOption = None,
    min_reliability: MinReliabilityOption = None,
    template: TemplateOption = None,
    isolation: IsolationOption = None,
    json_output: JsonOption = False,
    lang: LangOption = None,
) -> None:
    session = _session(json_output, lang)
    levels = _isolation_levels(isolation)
    with session.client() as client:
        answer = client.quote(gpu_model=gpu, gpus=gpus_count, hours=hours, region=region,
                              min_reliability=min_reliability, template=template, isolation=levels)
    _show(session, answer, lambda data: details_print(
        _order_lines(gpu, gpus_count, hours, None, region, min_reliability, template, levels)
        + _quote_lines(data)
    ))


def _order_result(session: Session, answer: dict[str, Any]) -> None:
    """What became of an order: a rental, a bid resting in the book, or nothing."""
    bid, rental = answer.get("bid") or {}, answer.get("rental")
    if session.json:
        json_print(answer)
    elif rental:
        typer.echo(t("Rental {id} is {state}.", id=rental.get("id"),
                     state=value_label("rental_state", rental.get("state"))))
        command = (rental.get("connection") or {}).get("ssh_command")
        if command:
            typer.echo(command)
        else:
            typer.echo(t("Its ssh command: everx rental {id}", id=rental.get("id")))
    elif bid.get("state") == "open":
        typer.echo(t("Your bid {id} rests in the book until it is filled, cancelled or expires.",
                     id=bid.get("id")))
    else:
        _say(t("No offer matched your order: nothing was bought."))
    if not rental and bid.get("state") != "open":
        raise NothingDone()


@_command(app, "buy", t("Buy GPU hours now at the best offer, up to your maximum price."))
def buy(
    gpu: GpuArgument,
    max_price: Annotated[str, typer.Option(
        "--max-price", help=t("The most you pay per GPU-hour, in US dollars (2.90)."), show_default=False,
    )],
    gpus_count: GpusOption = 1,
    hours: HoursOption = None,
    ssh_key: SshKeyOption = None,
    ssh_key_id: SshKeyIdOption = None,
    region: RegionOption = None,
    min_reliability: MinReliabilityOption = None,
    template: TemplateOption = None,
    isolation: IsolationOption = None,
    yes: YesOption = False,
    json_output: JsonOption = False,
    lang: LangOption = None,
) -> None:
    session = _session(json_output, lang)
    price, levels = _price(max_price), _isolation_levels(isolation)
    key = _public_key(ssh_key, ssh_key_id)
    with session.client() as client:
        if not yes:
            found = client.quote(gpu_model=gpu, gpus=gpus_count, hours=hours, region=region,
                                 min_reliability=min_reliability, template=template, isolation=levels)
            _say_lines(_order_lines(gpu, gpus_count, hours, price, region, min_reliability, template, levels)
                       + _quote_lines(found))
            _say(t("The first hour is charged at once. A started hour is not refunded."))
            _confirm(session, t("Buy now at the best offer?"), yes)
        answer = client.buy(gpu_model=gpu, gpus=gpus_count, max_price=price, hours=hours, region=region,
                            min_reliability=min_reliability, template=template, isolation=levels, **key)
    _order_result(session, answer)


@_command(app, "bid", t("Place a bid that rests in the book until filled, cancelled or expired."))
def bid(
    gpu: GpuArgument,
    max_price: Annotated[str, typer.Option(
        "--max-price", help=t("The most you pay per GPU-hour, in US dollars (2.90)."), show_default=False,
    )],
    gpus_count: GpusOption = 1,
    hours: HoursOption = None,
    expires: Annotated[Optional[str], typer.Option(
        "--expires", help=t("When the bid expires: 12h, 2d or a time (2026-12-24T18:00:00Z)."),
        show_default=False,
    )] = None,
    ssh_key: SshKeyOption = None,
    ssh_key_id: SshKeyIdOption = None,
    region: RegionOption = None,
    min_reliability: MinReliabilityOption = None,
    template: TemplateOption = None,
    isolation: IsolationOption = None,
    yes: YesOption = False,
    json_output: JsonOption = False,
    lang: LangOption = None,
) -> None:
    session = _session(json_output, lang)
    price, expires_at, levels = _price(max_price), _expiry(expires), _isolation_levels(isolation)
    key = _public_key(ssh_key, ssh_key_id)
    with session.client() as client:
        if not yes:
            lines = _order_lines(gpu, gpus_count, hours, price, region, min_reliability, template, levels)
            if expires_at:
                lines.append((t("Expires"), expires_at, "time"))
            try:
                found = client.quote(gpu_model=gpu, gpus=gpus_count, hours=hours, region=region,
                                     min_reliability=min_reliability, template=template, isolation=levels)
                lines += _quote_lines(found)
            except ApiError as error:
                if error.status != 404:
                    raise
                lines.append((t("Best offer"), t("none right now"), None))
            _say_lines(lines)
            _say(t("When it is filled, the first hour is charged at once. A started hour is not refunded."))
            _confirm(session, t("Place this bid?"), yes)
        answer = client.bid(gpu_model=gpu, gpus=gpus_count, max_price=price, hours=hours, region=region,
                            expires_at=expires_at, min_reliability=min_reliability, template=template,
                            isolation=levels, **key)
    _order_result(session, answer)


def _say_lines(lines: list[tuple[str, Any, Optional[str]]]) -> None:
    for label, value, kind in lines:
        _say(t("{label}: {value}", label=label, value=cell(value, kind)))


@_command(app, "orders", t("Your bids, newest first."))
def orders(
    open_only: Annotated[bool, typer.Option("--open", help=t("Only the bids still open."))] = False,
    limit: LimitOption = None,
    cursor: CursorOption = None,
    json_output: JsonOption = False,
    lang: LangOption = None,
) -> None:
    session = _session(json_output, lang)
    with session.client() as client:
        page = client.bids(state="open" if open_only else None, limit=limit, cursor=cursor)

    def render(data: dict[str, Any]) -> None:
        table_print([
            (t("Id"), "id", "number"), (t("GPU model"), "gpu_model", None), (t("GPUs"), "gpus", "number"),
            (t("Maximum price"), "max_price", "usd"), (t("Type"), "time_in_force", "time_in_force"),
            (t("State"), "state", "bid_state"), (t("Placed"), "created_at", "time"),
            (t("Expires"), "expires_at", "time"),
        ], data["items"])
        more_hint(data)

    _show(session, page, render)


@_command(app, "cancel", t("Cancel one of your open bids."))
def cancel(
    bid_id: Annotated[int, typer.Argument(help=t("The bid's id (everx orders)."), show_default=False)],
    json_output: JsonOption = False,
    lang: LangOption = None,
) -> None:
    session = _session(json_output, lang)
    with session.client() as client:
        answer = client.bid_cancel(bid_id)
    _show(session, answer, lambda data: typer.echo(t("Bid {id} is cancelled.", id=data.get("id", bid_id))))


# --- rentals ------------------------------------------------------------------------------------

def _rental_lines(rental: dict[str, Any]) -> list[tuple[str, Any, Optional[str]]]:
    return [
        (t("Rental"), rental.get("id"), None), (t("GPU model"), rental.get("gpu_model"), None),
        (t("GPUs"), rental.get("gpus"), None), (t("Price per GPU-hour"), rental.get("price"), "usd"),
        (t("Hours"), rental.get("hours") or t("until you stop it"), None),
        (t("State"), rental.get("state"), "rental_state"),
        (t("Started"), rental.get("started_at"), "time"),
        (t("Paid through"), rental.get("paid_through"), "time"),
        (t("Ended"), rental.get("ended_at"), "time"),
        (t("End reason"), rental.get("end_reason"), "end_reason"),
        (t("Cost so far"), rental.get("cost_so_far"), None),
    ]


@_command(app, "rentals", t("Your rentals, newest first."))
def rentals(
    state: Annotated[Optional[RentalsShown], typer.Option(
        "--state", help=t("Only live or only ended rentals."), show_default=False,
    )] = None,
    limit: LimitOption = None,
    cursor: CursorOption = None,
    json_output: JsonOption = False,
    lang: LangOption = None,
) -> None:
    session = _session(json_output, lang)
    with session.client() as client:
        page = client.rentals(state=state.value if state else None, limit=limit, cursor=cursor)

    def render(data: dict[str, Any]) -> None:
        table_print([
            (t("Id"), "id", "number"), (t("GPU model"), "gpu_model", None), (t("GPUs"), "gpus", "number"),
            (t("Price per GPU-hour"), "price", "usd"), (t("State"), "state", "rental_state"),
            (t("Started"), "started_at", "time"), (t("Cost so far"), "cost_so_far", None),
        ], data["items"])
        more_hint(data)

    _show(session, page, render)


@_command(app, "rental", t("One rental, with the ssh command that reaches it while it runs."))
def rental(
    rental_id: Annotated[int, typer.Argument(help=t("The rental's id (everx rentals)."), show_default=False)],
    ssh_only: Annotated[bool, typer.Option("--ssh", help=t("Print only the ssh command."))] = False,
    json_output: JsonOption = False,
    lang: LangOption = None,
) -> None:
    session = _session(json_output, lang)
    with session.client() as client:
        answer = client.rental(rental_id)
    command = (answer.get("connection") or {}).get("ssh_command")
    if session.json:
        json_print(answer)
        return
    if not ssh_only:
        details_print(_rental_lines(answer))
    if command:
        if not ssh_only:
            typer.echo(t("Connect with:"))
        # Alone on its line, untouched, for copying or for $(everx rental ID --ssh).
        typer.echo(command)
    elif answer.get("state") == "ended":
        _say(t("This rental has ended: it has no connection any more."))
        if ssh_only:
            raise NothingDone()
    else:
        _say(t("The ssh command appears once the rental is running."))
        if ssh_only:
            raise NothingDone()


@_command(app, "stop", t("Stop a rental now: its GPUs are released at once."))
def stop(
    rental_id: Annotated[int, typer.Argument(help=t("The rental's id (everx rentals)."), show_default=False)],
    yes: YesOption = False,
    json_output: JsonOption = False,
    lang: LangOption = None,
) -> None:
    session = _session(json_output, lang)
    _confirm(session, t("Stop rental {id} now? The hour already paid is not refunded.", id=rental_id), yes)
    with session.client() as client:
        answer = client.rental_stop(rental_id)
    _show(session, answer, lambda data: typer.echo(t(
        "Rental {id} is stopped. It cost {cost} in all.", id=data.get("id", rental_id),
        cost=money_text(data.get("cost_so_far")),
    )))


@_command(app, "token", t("Your container rental's token (Jupyter's), given only once."))
def token(
    rental_id: Annotated[int, typer.Argument(help=t("The rental's id (everx rentals)."), show_default=False)],
    json_output: JsonOption = False,
    lang: LangOption = None,
) -> None:
    session = _session(json_output, lang)
    with session.client() as client:
        answer = client.rental_service_token(rental_id)

    def render(data: dict[str, Any]) -> None:
        # Alone on its line, untouched, for $(everx token ID); what to know about it goes to stderr.
        typer.echo(data.get("token"))
        _say(t("It is given only once: keep it where you keep your passwords. Later, sign in over SSH and "
               "read it in {path}.", path=data.get("path")))

    _show(session, answer, render)


# --- money --------------------------------------------------------------------------------------

@_command(app, "balance", t("Your wallet: balance, spending per hour, and how long it lasts."))
def balance(json_output: JsonOption = False, lang: LangOption = None) -> None:
    session = _session(json_output, lang)
    with session.client() as client:
        answer = client.wallet()
    runway = answer.get("runway_hours")
    _show(session, answer, lambda data: details_print([
        (t("Balance"), data.get("balance"), None),
        (t("Spending per hour"), data.get("burn_rate"), None),
        (t("Lasts (hours)"), runway if runway is not None else t("no rental running"), None),
    ]))


@_command(app, "history", t("The movements of your wallet, newest first."))
def history(
    limit: LimitOption = None, cursor: CursorOption = None,
    json_output: JsonOption = False, lang: LangOption = None,
) -> None:
    session = _session(json_output, lang)
    with session.client() as client:
        page = client.wallet_history(limit=limit, cursor=cursor)

    def render(data: dict[str, Any]) -> None:
        table_print([
            (t("Time"), "time", "time"), (t("Description"), "description", None),
            (t("Amount"), "amount", None), (t("Balance after"), "balance_after", None),
        ], data["items"])
        more_hint(data)

    _show(session, page, render)


# --- selling ------------------------------------------------------------------------------------

@_command(app, "servers", t("Your seller's servers (a token with the sell scope)."))
def servers(
    limit: LimitOption = None, cursor: CursorOption = None,
    json_output: JsonOption = False, lang: LangOption = None,
) -> None:
    session = _session(json_output, lang)
    with session.client() as client:
        page = client.servers(limit=limit, cursor=cursor)

    def render(data: dict[str, Any]) -> None:
        table_print([
            (t("Id"), "id", "number"), (t("Name"), "name", None), (t("GPU model"), "gpu_model", None),
            (t("GPUs"), "gpu_count", "number"), (t("Rented"), "gpus_rented", "number"),
            (t("Region"), "region", None), (t("Status"), "status", "server_status"),
            (t("Host"), "host", None),
        ], data["items"])
        more_hint(data)

    _show(session, page, render)


def _offer_lines(offer: dict[str, Any]) -> list[tuple[str, Any, Optional[str]]]:
    return [
        (t("Offer"), offer.get("id"), None), (t("Server"), offer.get("server_id"), None),
        (t("GPU model"), offer.get("gpu_model"), None), (t("GPUs"), offer.get("gpus_offered"), None),
        (t("Price per GPU-hour"), offer.get("price"), "usd"), (t("State"), offer.get("state"), "offer_state"),
        (t("GPUs offered cheaper"), (offer.get("book_place") or {}).get("gpus_cheaper"), None),
        (t("Best ask"), (offer.get("book_place") or {}).get("best_ask"), None),
    ]


@_command(offer_app, "list", t("Your offers, newest first."))
def offer_list(
    limit: LimitOption = None, cursor: CursorOption = None,
    json_output: JsonOption = False, lang: LangOption = None,
) -> None:
    session = _session(json_output, lang)
    with session.client() as client:
        page = client.offers(limit=limit, cursor=cursor)

    def render(data: dict[str, Any]) -> None:
        table_print([
            (t("Id"), "id", "number"), (t("Server"), "server_id", "number"),
            (t("GPU model"), "gpu_model", None),
            (t("GPUs"), "gpus_offered", "number"), (t("Price per GPU-hour"), "price", "usd"),
            (t("State"), "state", "offer_state"),
            (t("GPUs offered cheaper"), "book_place.gpus_cheaper", "number"),
        ], data["items"])
        more_hint(data)

    _show(session, page, render)


@_command(offer_app, "post", t("Offer GPUs of one of your servers at a price per GPU-hour."))
def offer_post(
    server_id: Annotated[int, typer.Argument(help=t("The server's id (everx servers)."), show_default=False)],
    gpus_count: Annotated[int, typer.Option("--gpus", min=1, help=t("How many of its GPUs to offer."),
                                            show_default=False)],
    price: Annotated[str, typer.Option("--price", help=t("Price per GPU-hour, in US dollars (2.49)."),
                                       show_default=False)],
    json_output: JsonOption = False,
    lang: LangOption = None,
) -> None:
    session = _session(json_output, lang)
    price_text = _price(price)
    with session.client() as client:
        answer = client.offer_post(server_id=server_id, gpus=gpus_count, price=price_text)

    def render(data: dict[str, Any]) -> None:
        typer.echo(t("Offer {id} is in the book.", id=data.get("id")))
        details_print(_offer_lines(data))

    _show(session, answer, render)


@_command(offer_app, "price", t("Change the price of one of your offers."))
def offer_price(
    offer_id: OfferArgument,
    price: Annotated[str, typer.Argument(
        help=t("The new price per GPU-hour, in US dollars."), show_default=False,
    )],
    json_output: JsonOption = False,
    lang: LangOption = None,
) -> None:
    session = _session(json_output, lang)
    price_text = _price(price)
    with session.client() as client:
        answer = client.offer_update(offer_id, price=price_text)

    def render(data: dict[str, Any]) -> None:
        typer.echo(t("Offer {id} now asks {price} per GPU-hour.", id=data.get("id", offer_id),
                     price=money_text(data.get("price"), "USD")))

    _show(session, answer, render)


@_command(offer_app, "withdraw", t("Take one of your offers out of the book."))
def offer_withdraw(
    offer_id: OfferArgument,
    json_output: JsonOption = False,
    lang: LangOption = None,
) -> None:
    session = _session(json_output, lang)
    with session.client() as client:
        answer = client.offer_withdraw(offer_id)
    _show(session, answer, lambda data: typer.echo(
        t("Offer {id} is withdrawn. Rentals already running go on.", id=data.get("id", offer_id))
    ))


def _net(figures: Any) -> Any:
    """The seller's part of a period's figures ({gross, fee, net}), or an amount given alone."""
    return figures.get("net", figures.get("total")) if isinstance(figures, dict) else figures


def _earnings_lines(data: dict[str, Any]) -> list[tuple[str, Any, Optional[str]]]:
    pending = data.get("pending_payouts")
    return [
        (t("This month, after the fee"), _net(data.get("this_month")), None),
        (t("In all, after the fee"), _net(data.get("total")), None),
        (t("Available for payout"), data.get("available"), None),
        (t("Smallest payout"), data.get("payout_minimum"), None),
        (t("Pending payouts"), _net(pending), None),
    ]


@_command(app, "earnings", t("Your seller's earnings: this month, in all, and what can be paid out."))
def earnings(json_output: JsonOption = False, lang: LangOption = None) -> None:
    session = _session(json_output, lang)
    with session.client() as client:
        answer = client.earnings()

    def render(data: dict[str, Any]) -> None:
        details_print(_earnings_lines(data))

    _show(session, answer, render)


# --- the script's entry point -------------------------------------------------------------------

def main() -> None:
    """`everx`: standalone mode prints usage errors (exit 2) and exits with the command's code."""
    app(prog_name="everx")
