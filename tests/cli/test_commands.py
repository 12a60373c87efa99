"""Every command against a fake exchange: what it sends, what it prints, and its exit code."""

import json
import os
import re
import stat
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import httpx
import pytest
from everx_cli import main as cli_main

from tests.cli import support
from tests.cli.conftest import TOKEN, URL

NBSP = "\u00a0"
PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG9nBZ8K3p8V0dTt lea@laptop"


@pytest.fixture
def public_key(tmp_path):
    path = tmp_path / "id_ed25519.pub"
    path.write_text(PUBLIC_KEY + "\n")
    return str(path)


def json_of(result):
    return json.loads(result.stdout)


def flat(text: str) -> str:
    """Text without the frame and line breaks of a usage error's panel."""
    return " ".join(re.sub("[│╭╮╰╯─]", " ", text).split())


# --- signing in ---------------------------------------------------------------------------------

def test_login_checks_the_typed_token_and_saves_it_for_its_owner_only(exchange, everx, monkeypatch, tmp_path):
    monkeypatch.delenv("EVERX_TOKEN")
    exchange.answer("GET", "/me", body=support.ME)
    result = everx("login", "--url", "https://exchange.example/", input="evx_typed\n")
    assert result.exit_code == 0, result.output
    (request,) = exchange.requests
    assert request.headers["Authorization"] == "Bearer evx_typed"
    assert str(request.url) == "https://exchange.example/api/v1/me"
    path = tmp_path / "config" / "everx" / "config.json"
    assert json.loads(path.read_text()) == {"url": "https://exchange.example", "token": "evx_typed"}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert "evx_typed" not in result.output  # the input is hidden
    assert f"Token saved in {path}." in result.stderr
    assert "as lea@example.com" in result.stdout


def test_at_a_terminal_login_asks_for_the_token_without_echo(exchange, everx, monkeypatch):
    monkeypatch.setattr(cli_main, "_at_terminal", lambda: True)
    exchange.answer("GET", "/me", body=support.ME)
    result = everx("login", "--lang", "pt", input="evx_typed\n")
    assert result.exit_code == 0, result.output
    assert "Token de API (criado na página de tokens de API da sua conta):" in result.stderr
    assert "evx_typed" not in result.output
    assert exchange.requests[0].headers["Authorization"] == "Bearer evx_typed"


def test_login_with_nothing_on_its_input_is_a_usage_error(exchange, everx):
    result = everx("login", input="")
    assert result.exit_code == 2
    assert exchange.requests == []


def test_the_saved_token_and_address_serve_the_next_commands(exchange, everx, monkeypatch):
    monkeypatch.delenv("EVERX_TOKEN")
    monkeypatch.delenv("EVERX_URL")
    exchange.answer("GET", "/me", body=support.ME)
    exchange.answer("GET", "/wallet", body=support.WALLET)
    assert everx("login", "--url", "https://exchange.example", input="evx_typed\n").exit_code == 0
    assert everx("balance").exit_code == 0
    request = exchange.requests[-1]
    assert str(request.url) == "https://exchange.example/api/v1/wallet"
    assert request.headers["Authorization"] == "Bearer evx_typed"


def test_the_environment_wins_over_the_saved_token(exchange, everx, monkeypatch):
    exchange.answer("GET", "/me", body=support.ME)
    exchange.answer("GET", "/wallet", body=support.WALLET)
    monkeypatch.delenv("EVERX_TOKEN")
    everx("login", input="evx_saved\n")
    monkeypatch.setenv("EVERX_TOKEN", "evx_from_env")
    monkeypatch.setenv("EVERX_URL", "http://other.test")
    assert everx("balance").exit_code == 0
    assert exchange.requests[-1].headers["Authorization"] == "Bearer evx_from_env"
    assert exchange.requests[-1].url.host == "other.test"


def test_login_warns_when_the_environment_will_keep_winning(exchange, everx):
    exchange.answer("GET", "/me", body=support.ME)
    result = everx("login", input="evx_typed\n")
    assert result.exit_code == 0
    assert "EVERX_TOKEN is set" in result.stderr


def test_a_refused_token_is_not_saved_and_exits_3(exchange, everx, tmp_path):
    exchange.problem("GET", "/me", 401, "token_invalid", "Send a valid API token.")
    result = everx("login", input="evx_wrong\n")
    assert result.exit_code == 3
    assert "Send a valid API token." in result.stderr
    assert "The token was not saved." in result.stderr
    assert not (tmp_path / "config" / "everx" / "config.json").exists()


def test_logout_forgets_the_file(exchange, everx, tmp_path, monkeypatch):
    exchange.answer("GET", "/me", body=support.ME)
    everx("login", input="evx_typed\n")
    result = everx("logout", "--json")
    assert json_of(result) == {"forgotten": True}
    assert not (tmp_path / "config" / "everx" / "config.json").exists()
    assert "No token was saved." in everx("logout").stdout


def test_without_any_token_a_command_that_needs_one_exits_3(exchange, everx, monkeypatch):
    monkeypatch.delenv("EVERX_TOKEN")
    result = everx("balance")
    assert result.exit_code == 3
    assert "You are not signed in" in result.stderr
    assert exchange.requests == []


def test_me_shows_who_the_token_acts_for(exchange, everx):
    exchange.answer("GET", "/me", body=support.ME)
    result = everx("me")
    assert "lea@example.com" in result.stdout and "read, trade" in result.stdout


# --- the market ---------------------------------------------------------------------------------

def test_gpus_is_public_and_a_table(exchange, everx, monkeypatch):
    monkeypatch.delenv("EVERX_TOKEN")
    exchange.answer("GET", "/gpus", body=support.GPUS)
    result = everx("gpus")
    assert result.exit_code == 0, result.output
    assert "h100-sxm" in result.stdout and "NVIDIA L40S" in result.stdout and "3,350" in result.stdout
    assert "Authorization" not in exchange.requests[0].headers


def test_markets_shows_best_prices_and_json_gives_the_exact_strings(exchange, everx):
    exchange.answer("GET", "/markets", body=support.MARKETS)
    table = everx("markets")
    assert "2.88 USD" in table.stdout and "1,008" in table.stdout
    assert json_of(everx("markets", "--json")) == support.MARKET_LIST
    assert json_of(everx("--json", "markets")) == support.MARKET_LIST


def test_a_public_list_of_several_pages_is_shown_whole(exchange, everx, monkeypatch):
    pages = {None: {"items": support.GPU_LIST[:1], "next_cursor": "Mg"},
             "Mg": {"items": support.GPU_LIST[1:], "next_cursor": None}}
    monkeypatch.setattr(cli_main, "HTTP_TRANSPORT", httpx.MockTransport(
        lambda request: httpx.Response(200, json=pages[request.url.params.get("cursor")])
    ))
    assert [gpu["slug"] for gpu in json_of(everx("gpus", "--json"))] == ["h100-sxm", "l40s"]


def test_book_shows_both_sides_at_the_depth_asked(exchange, everx):
    exchange.answer("GET", "/markets/h100-sxm/book", body=support.BOOK)
    result = everx("book", "h100-sxm", "--depth", "5")
    assert result.exit_code == 0
    assert exchange.requests[0].url.params["depth"] == "5"
    assert "3.10 USD" in result.stdout and "2.70 USD" in result.stdout


@pytest.mark.parametrize(
    ("language", "reliable", "new"),
    [("en", "8 GPUs (99.5%)", "4 GPUs (new), and 2 more"), ("pt", "8 GPU (99,5%)", "4 GPU (novo), e mais 2"),
     ("fr", f"8 GPU (99,5{NBSP}%)", "4 GPU (nouveau), et 2 autres")],
)
def test_book_shows_each_offers_reliability(exchange, everx, language, reliable, new):
    exchange.answer("GET", "/markets/h100-sxm/book", body=support.BOOK)
    result = everx("book", "h100-sxm", "--min-reliability", "0.9", "--lang", language)
    assert result.exit_code == 0, result.output
    assert exchange.requests[0].url.params["min_reliability"] == "0.9"
    assert reliable in result.stdout and new in result.stdout


# --- buying -------------------------------------------------------------------------------------

def test_quote_sends_the_order_and_shows_price_and_total(exchange, everx):
    exchange.answer("POST", "/quote", body=support.QUOTE)
    result = everx("quote", "h100-sxm", "--gpus", "2", "--hours", "5")
    assert result.exit_code == 0, result.output
    assert exchange.body("POST", "/quote") == {"gpu_model": "h100-sxm", "gpus": 2, "hours": 5}
    assert "Price per GPU-hour" in result.stdout and "2.88 USD" in result.stdout
    assert "28.80 USD" in result.stdout and "26.50 EUR" in result.stdout and "5.76 USD" in result.stdout
    assert "does not cover" not in result.stdout
    quoted = json_of(everx("quote", "h100-sxm", "--gpus", "2", "--hours", "5", "--json"))
    assert quoted["total"] == {"amount": "26.50", "currency": "EUR"}
    assert Decimal(quoted["price"]["amount"]) == Decimal("2.88")


def test_a_quote_the_balance_does_not_cover_says_so(exchange, everx):
    exchange.answer("POST", "/quote", body={**support.QUOTE, "covers_first_hour": False})
    result = everx("quote", "h100-sxm", "--gpus", "2")
    assert "Warning" in result.stdout and "your balance does not cover the first hour." in result.stdout


def test_quote_without_an_offer_is_refused_with_exit_1(exchange, everx):
    exchange.problem("POST", "/quote", 404, "no_offer", "Nothing is on offer for this order right now.")
    result = everx("quote", "h100-sxm")
    assert result.exit_code == 1
    assert "Error: Nothing is on offer for this order right now." in result.stderr


def test_buy_shows_the_quote_and_buys_once_confirmed(exchange, everx, public_key):
    exchange.answer("POST", "/quote", body=support.QUOTE)
    exchange.answer("POST", "/bids", 201, support.BOUGHT)
    result = everx("buy", "h100-sxm", "--gpus", "1", "--hours", "3", "--max-price", "2.90",
                   "--ssh-key", public_key, "--region", "europe", input="y\n")
    assert result.exit_code == 0, result.output
    assert "Price per GPU-hour: 2.88 USD" in result.stderr
    assert "Total in your wallet's currency: 26.50 EUR" in result.stderr
    assert "Your maximum price per GPU-hour: 2.90 USD" in result.stderr
    assert "Buy now at the best offer? [y/N]" in result.stderr
    assert exchange.body("POST", "/bids") == {
        "gpu_model": "h100-sxm", "gpus": 1, "max_price": "2.90", "hours": 3, "region": "europe",
        "time_in_force": "buy_now", "ssh_public_key": PUBLIC_KEY,
    }
    assert "Rental 7 is running." in result.stdout
    assert "ssh -p 22 evx7@gpu1.example.com" in result.stdout


def test_buy_answered_no_buys_nothing(exchange, everx, public_key):
    exchange.answer("POST", "/quote", body=support.QUOTE)
    result = everx("buy", "h100-sxm", "--max-price", "2.90", "--ssh-key", public_key, input="n\n")
    assert result.exit_code == 1
    assert "Nothing was done." in result.stderr
    assert exchange.sent("POST", "/bids") == []


def test_buy_without_a_terminal_to_ask_on_says_to_add_yes(exchange, everx, public_key):
    exchange.answer("POST", "/quote", body=support.QUOTE)
    result = everx("buy", "h100-sxm", "--max-price", "2.90", "--ssh-key", public_key, input="")
    assert result.exit_code == 2
    assert "add --yes" in result.stderr
    assert exchange.sent("POST", "/bids") == []


def test_buy_with_yes_asks_nothing_and_prints_json(exchange, everx, public_key):
    exchange.answer("POST", "/bids", 201, support.BOUGHT)
    result = everx("buy", "h100-sxm", "--max-price", "2,90", "--ssh-key", public_key, "--yes", "--json")
    assert result.exit_code == 0, result.output
    assert exchange.sent("POST", "/quote") == []
    assert exchange.body("POST", "/bids")["max_price"] == "2.90"
    bought = json_of(result)
    assert bought["rental"]["connection"]["ssh_command"] == "ssh -p 22 evx7@gpu1.example.com"
    assert bought["rental"]["cost_so_far"] == {"amount": "2.65", "currency": "EUR"}
    assert result.stderr == ""


def test_buy_that_found_no_offer_exits_1(exchange, everx, public_key):
    exchange.answer("POST", "/bids", 201, support.NOT_FILLED)
    result = everx("buy", "h100-sxm", "--max-price", "2.00", "--ssh-key", public_key, "--yes")
    assert result.exit_code == 1
    assert "nothing was bought" in result.stderr
    as_json = everx("buy", "h100-sxm", "--max-price", "2.00", "--ssh-key", public_key, "-y", "--json")
    assert as_json.exit_code == 1 and json_of(as_json)["rental"] is None


def test_buy_confirms_in_portuguese_and_french_with_their_own_yes(exchange, everx, public_key):
    exchange.answer("POST", "/quote", body=support.QUOTE)
    exchange.answer("POST", "/bids", 201, support.BOUGHT)
    portuguese = everx("buy", "h100-sxm", "--max-price", "2.90", "--ssh-key", public_key, "--lang", "pt",
                       input="s\n")
    assert portuguese.exit_code == 0, portuguese.output
    assert "Comprar já à melhor oferta? [s/N]" in portuguese.stderr
    assert "Preço por hora de GPU: 2,88 USD" in portuguese.stderr
    french = everx("buy", "h100-sxm", "--max-price", "2.90", "--ssh-key", public_key, "--lang", "fr",
                   input="oui\n")
    assert french.exit_code == 0, french.output
    assert f"Acheter maintenant à la meilleure offre{NBSP}? [o/N]" in french.stderr
    assert f"Prix par heure GPU{NBSP}: 2,88{NBSP}USD" in french.stderr
    assert "La location 7 est en cours." in french.stdout
    assert [request.headers["Accept-Language"] for request in exchange.requests] == ["pt", "pt", "fr", "fr"]


def test_a_private_key_is_refused_before_anything_is_sent(exchange, everx, tmp_path):
    private = tmp_path / "id_ed25519"
    private.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
                       "-----END OPENSSH PRIVATE KEY-----\n")
    result = everx("buy", "h100-sxm", "--max-price", "2.90", "--ssh-key", str(private), "--yes")
    assert result.exit_code == 2
    assert f"{private} is a private key: never send it." in flat(result.stderr)
    assert exchange.requests == []


@pytest.mark.parametrize(("extra", "message"), [
    ([], "Give your SSH public key"),
    (["--ssh-key", "/nonexistent/key.pub"], "Cannot read the file"),
])
def test_buy_needs_a_readable_public_key(exchange, everx, extra, message):
    result = everx("buy", "h100-sxm", "--max-price", "2.90", "--yes", *extra)
    assert result.exit_code == 2
    assert message in result.stderr
    assert exchange.requests == []


@pytest.mark.parametrize("price", ["abc", "2.9.0", "-1", "1e3", "NaN"])
def test_a_price_that_is_not_a_plain_decimal_is_a_usage_error(exchange, everx, public_key, price):
    result = everx("buy", "h100-sxm", "--max-price", price, "--ssh-key", public_key, "--yes")
    assert result.exit_code == 2
    assert "Write a price like 2.90" in result.stderr
    assert exchange.requests == []


def test_a_wrong_option_is_a_usage_error_with_exit_2(exchange, everx):
    assert everx("buy", "h100-sxm", "--gpus", "many").exit_code == 2
    assert everx("rentals", "--state", "sleeping").exit_code == 2
    assert everx("no-such-command").exit_code == 2


def test_bid_rests_in_the_book_with_its_expiry(exchange, everx, public_key):
    exchange.problem("POST", "/quote", 404, "no_offer", "Nothing is on offer.")
    exchange.answer("POST", "/bids", 201, {"bid": support.BID_OPEN, "rental": None})
    before = datetime.now(UTC)
    result = everx("bid", "h100-sxm", "--gpus", "1", "--max-price", "2.50", "--expires", "12h",
                   "--ssh-key-id", "5", input="y\n")
    assert result.exit_code == 0, result.output
    assert "Best offer: none right now" in result.stderr
    body = exchange.body("POST", "/bids")
    assert body["time_in_force"] == "bid" and body["ssh_key_id"] == 5 and "ssh_public_key" not in body
    expires = datetime.fromisoformat(body["expires_at"].replace("Z", "+00:00"))
    assert body["expires_at"].endswith("Z")
    twelve_hours = timedelta(hours=12)
    assert before + twelve_hours - timedelta(seconds=2) <= expires <= datetime.now(UTC) + twelve_hours
    assert "Your bid 31 rests in the book" in result.stdout


def test_bid_sends_its_minimum_reliability_to_the_quote_and_the_order(exchange, everx, public_key):
    exchange.answer("POST", "/quote", body=support.QUOTE)
    exchange.answer("POST", "/bids", 201, {"bid": support.BID_OPEN | {"min_reliability": "0.950"},
                                           "rental": None})
    result = everx("bid", "h100-sxm", "--max-price", "2.50", "--min-reliability", "0.95",
                   "--ssh-key-id", "5", "--lang", "fr", input="oui\n")
    assert result.exit_code == 0, result.output
    assert exchange.body("POST", "/quote")["min_reliability"] == "0.95"
    assert exchange.body("POST", "/bids")["min_reliability"] == "0.95"
    assert f"Fiabilité minimale{NBSP}: 95{NBSP}%" in result.stderr


def test_bid_and_buy_send_the_template_chosen_and_say_it(exchange, everx, public_key):
    exchange.answer("POST", "/quote", body=support.QUOTE)
    exchange.answer("POST", "/bids", 201, {"bid": support.BID_OPEN, "rental": None})
    result = everx("bid", "h100-sxm", "--max-price", "2.50", "--template", "pytorch-cuda",
                   "--ssh-key-id", "5", "--lang", "fr", input="oui\n")
    assert result.exit_code == 0, result.output
    assert exchange.body("POST", "/quote")["template"] == "pytorch-cuda"
    assert exchange.body("POST", "/bids")["template"] == "pytorch-cuda"
    assert f"Modèle de conteneur{NBSP}: pytorch-cuda" in result.stderr


def test_buy_sends_the_isolation_levels_chosen_to_the_quote_and_the_order_and_says_them(exchange, everx,
                                                                                       public_key):
    exchange.answer("POST", "/quote", body=support.QUOTE)
    exchange.answer("POST", "/bids", 201, {"bid": support.BID_OPEN, "rental": None})
    result = everx("buy", "h100-sxm", "--max-price", "2.50", "--isolation", "container, whole",
                   "--ssh-key-id", "5", "--lang", "pt", input="sim\n")
    assert exchange.body("POST", "/quote")["isolation"] == ["container", "whole"]
    assert exchange.body("POST", "/bids")["isolation"] == ["container", "whole"]
    assert "Níveis de isolamento: container, whole" in result.stderr


def test_the_book_asks_for_the_isolation_levels_chosen(exchange, everx):
    exchange.answer("GET", "/markets/h100-sxm/book", body=support.BOOK)
    result = everx("book", "h100-sxm", "--isolation", "shared", "--lang", "fr")
    assert result.exit_code == 0, result.output
    assert exchange.requests[0].url.params["isolation"] == "shared"


@pytest.mark.parametrize("levels", ["vm", "container,", "shared server", "Container"])
def test_a_level_the_option_does_not_take_is_a_usage_error_naming_the_codes_in_french(exchange, everx,
                                                                                     levels):
    result = everx("buy", "h100-sxm", "--max-price", "2.50", "--isolation", levels, "--ssh-key-id", "5",
                   "--lang", "fr")
    assert result.exit_code == 2
    # The usage error's box wraps the message: read it back as one line.
    said = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.stderr).split())
    assert "Indiquez les niveaux par container, shared ou whole, séparés par des virgules." in said
    assert exchange.requests == []  # neither a quote nor an order


def test_a_level_the_exchange_refuses_is_an_error_with_exit_1_and_nothing_ordered(exchange, everx):
    exchange.problem("POST", "/quote", 422, "isolation_levels_invalid", "Choose container, shared or whole.")
    result = everx("buy", "h100-sxm", "--max-price", "2.50", "--isolation", "shared", "--ssh-key-id", "5")
    assert result.exit_code == 1 and "Choose container, shared or whole." in result.stderr
    assert [request.method for request in exchange.requests] == ["POST"]  # the quote, never an order


def test_an_order_without_isolation_levels_sends_none(exchange, everx, public_key):
    exchange.answer("POST", "/bids", 201, {"bid": support.BID_OPEN, "rental": None})
    result = everx("bid", "h100-sxm", "--max-price", "2.50", "--ssh-key-id", "5", "--yes")
    assert result.exit_code == 0, result.output
    assert "isolation" not in exchange.body("POST", "/bids")


def test_an_order_without_a_template_sends_none(exchange, everx, public_key):
    exchange.answer("POST", "/bids", 201, {"bid": support.BID_OPEN, "rental": None})
    result = everx("bid", "h100-sxm", "--max-price", "2.50", "--ssh-key-id", "5", "--yes")
    assert result.exit_code == 0, result.output
    assert "template" not in exchange.body("POST", "/bids")


def test_templates_lists_the_published_ones_in_portuguese(exchange, everx):
    exchange.answer("GET", "/templates", body=[
        {"slug": "pytorch-cuda", "name": "PyTorch com CUDA", "description": "…",
         "image": "x@sha256:" + "4f" * 32, "min_driver": "550.54", "ports": [22], "disk_gb": 40,
         "default": True},
    ])
    result = everx("templates", "--lang", "pt")
    assert result.exit_code == 0, result.output
    assert "PyTorch com CUDA" in result.stdout and "550.54" in result.stdout
    assert "Controlador" in result.stdout  # the header, wrapped in a narrow table


def test_a_minimum_the_exchange_refuses_is_an_error_with_exit_1(exchange, everx):
    exchange.problem("POST", "/quote", 422, "min_reliability_invalid", "The minimum reliability must be ...")
    result = everx("quote", "h100-sxm", "--min-reliability", "1.5")
    assert result.exit_code == 1 and "The minimum reliability must be ..." in result.stderr


def test_bid_takes_an_expiry_time_with_its_zone_only(exchange, everx, public_key):
    exchange.answer("POST", "/bids", 201, {"bid": support.BID_OPEN, "rental": None})
    result = everx("bid", "h100-sxm", "--max-price", "2.50", "--expires", "2026-12-24T19:00:00+01:00",
                   "--ssh-key", public_key, "--yes")
    assert result.exit_code == 0, result.output
    assert exchange.body("POST", "/bids")["expires_at"] == "2026-12-24T18:00:00Z"
    naive = everx("bid", "h100-sxm", "--max-price", "2.50", "--expires", "2026-12-24 18:00",
                  "--ssh-key", public_key, "--yes")
    assert naive.exit_code == 2


def test_orders_and_cancel(exchange, everx):
    exchange.answer("GET", "/bids", body={"items": [support.BID_OPEN], "next_cursor": "MzE"})
    exchange.answer("POST", "/bids/31/cancel", body={**support.BID_OPEN, "state": "cancelled"})
    listed = everx("orders", "--open", "--limit", "10")
    assert listed.exit_code == 0
    assert exchange.requests[0].url.params["state"] == "open"
    assert exchange.requests[0].url.params["limit"] == "10"
    assert "2.50 USD" in listed.stdout and "open" in listed.stdout and "--cursor MzE" in listed.stdout
    cancelled = everx("cancel", "31")
    assert cancelled.stdout.strip() == "Bid 31 is cancelled."


def test_cancelling_a_bid_no_longer_open_is_refused_with_exit_1(exchange, everx):
    exchange.problem("POST", "/bids/31/cancel", 409, "bid_not_open", "This bid is no longer open.")
    result = everx("cancel", "31")
    assert result.exit_code == 1
    assert "This bid is no longer open." in result.stderr


# --- rentals ------------------------------------------------------------------------------------

def test_rentals_lists_them(exchange, everx):
    exchange.answer("GET", "/rentals", body={"items": [support.RENTAL_RUNNING], "next_cursor": None})
    result = everx("rentals", "--state", "live")
    assert exchange.requests[0].url.params["state"] == "live"
    assert "running" in result.stdout and "2.65 EUR" in result.stdout


def test_rental_prints_the_ready_ssh_command(exchange, everx):
    exchange.answer("GET", "/rentals/7", body=support.RENTAL_RUNNING)
    result = everx("rental", "7")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[-1] == "ssh -p 22 evx7@gpu1.example.com"
    assert "Connect with:" in result.stdout and "2026-12-01 22:00 UTC" in result.stdout
    only = everx("rental", "7", "--ssh")
    assert only.stdout == "ssh -p 22 evx7@gpu1.example.com\n"


def test_a_rental_without_connection_says_why(exchange, everx):
    starting = {**support.RENTAL_RUNNING, "state": "starting", "connection": None}
    exchange.answer("GET", "/rentals/7", body=starting)
    result = everx("rental", "7")
    assert result.exit_code == 0
    assert "appears once the rental is running" in result.stderr
    assert everx("rental", "7", "--ssh").exit_code == 1
    exchange.answer("GET", "/rentals/7", body=support.RENTAL_STOPPED)
    assert "has ended" in everx("rental", "7").stderr


def test_stop_asks_then_stops(exchange, everx):
    exchange.answer("POST", "/rentals/7/stop", body=support.RENTAL_STOPPED)
    declined = everx("stop", "7", input="n\n")
    assert declined.exit_code == 1
    assert "The hour already paid is not refunded." in declined.stderr
    assert exchange.requests == []
    result = everx("stop", "7", "--yes")
    assert result.exit_code == 0
    assert result.stdout.strip() == "Rental 7 is stopped. It cost 2.65 EUR in all."
    assert json_of(everx("stop", "7", "--yes", "--json"))["state"] == "ended"


TOKEN_GIVEN = {"token": "kM3r9QeX0b7TzY2wVn5LcA8dHs1uPjFo", "variable": "JUPYTER_TOKEN",
               "path": "/etc/everx/service-token", "shown_at": "2026-12-06T21:00:00Z"}


def test_token_prints_the_rental_s_token_alone_and_where_to_read_it_later_in_french(exchange, everx):
    exchange.answer("POST", "/rentals/7/service-token", body=TOKEN_GIVEN)

    result = everx("token", "7", "--lang", "fr")

    assert result.exit_code == 0
    assert result.stdout == "kM3r9QeX0b7TzY2wVn5LcA8dHs1uPjFo\n"
    assert ("Il n'est donné qu'une fois\u00a0: gardez-le là où vous gardez vos mots de passe. Plus tard, "
            "connectez-vous en SSH et lisez-le dans /etc/everx/service-token.") in result.stderr
    assert json_of(everx("token", "7", "--json")) == TOKEN_GIVEN


def test_a_token_given_already_says_so_with_exit_1(exchange, everx):
    exchange.problem("POST", "/rentals/7/service-token", 409, "service_token_shown",
                     "This rental's token was already shown. Sign in over SSH and read it in "
                     "/etc/everx/service-token.")

    result = everx("token", "7")

    assert result.exit_code == 1
    assert result.stdout == ""
    assert "This rental's token was already shown." in result.stderr


def test_another_users_rental_is_not_found_with_exit_1(exchange, everx):
    exchange.problem("GET", "/rentals/99", 404, "rental_not_found", "We could not find this rental.")
    result = everx("rental", "99")
    assert result.exit_code == 1
    assert "We could not find this rental." in result.stderr


# --- money --------------------------------------------------------------------------------------

def test_balance_and_history(exchange, everx):
    exchange.answer("GET", "/wallet", body=support.WALLET)
    exchange.answer("GET", "/wallet/history", body=support.HISTORY)
    balance = everx("balance")
    assert "97.35 EUR" in balance.stdout and "2.65 EUR" in balance.stdout and "36" in balance.stdout
    assert Decimal(json_of(everx("balance", "--json"))["balance"]["amount"]) == Decimal("97.35")
    history = everx("history", "--limit", "2")
    assert "Rental 7, hour 1" in history.stdout and "-2.65 EUR" in history.stdout
    assert "--cursor MTE" in history.stdout


def test_balance_in_french_writes_amounts_the_french_way(exchange, everx):
    exchange.answer("GET", "/wallet", body={**support.WALLET, "balance": support.eur("1234.50")})
    result = everx("--lang", "fr", "balance")
    assert f"1\u202f234,50{NBSP}EUR" in result.stdout
    assert "Solde" in result.stdout


# --- selling ------------------------------------------------------------------------------------

def test_servers_and_offers(exchange, everx):
    exchange.answer("GET", "/seller/servers", body=support.SERVERS)
    exchange.answer("GET", "/seller/offers", body={"items": [support.OFFER], "next_cursor": None})
    servers = everx("servers")
    assert "lisbon-1" in servers.stdout and "active" in servers.stdout
    offers = everx("offer", "list")
    assert "3.10 USD" in offers.stdout and "12" in offers.stdout


def test_offer_post_price_and_withdraw(exchange, everx):
    exchange.answer("POST", "/seller/offers", 201, support.OFFER)
    exchange.answer("PATCH", "/seller/offers/41", body={**support.OFFER, "price": {"amount": "3.20",
                                                                                    "currency": "USD"}})
    exchange.answer("POST", "/seller/offers/41/withdraw", body={**support.OFFER, "state": "withdrawn"})
    posted = everx("offer", "post", "3", "--gpus", "4", "--price", "3.10")
    assert posted.exit_code == 0, posted.output
    assert exchange.body("POST", "/seller/offers") == {"server_id": 3, "gpus": 4, "price": "3.10"}
    assert "Offer 41 is in the book." in posted.stdout
    priced = everx("offer", "price", "41", "3.20")
    assert exchange.body("PATCH", "/seller/offers/41") == {"price": "3.20"}
    assert "Offer 41 now asks 3.20 USD per GPU-hour." in priced.stdout
    assert exchange.sent("PATCH", "/seller/offers/41")[0].headers["Idempotency-Key"]
    withdrawn = everx("offer", "withdraw", "41", "--json")
    assert json_of(withdrawn)["state"] == "withdrawn"


def test_earnings(exchange, everx):
    exchange.answer("GET", "/seller/earnings", body=support.EARNINGS)
    result = everx("earnings")
    assert "This month, after the fee" in result.stdout and "812.40 USD" in result.stdout
    assert "10,234.56 USD" in result.stdout and "250.00 USD" in result.stdout
    assert "Available for payout" in result.stdout and "1,500.00 USD" in result.stdout
    assert json_of(everx("earnings", "--json")) == support.EARNINGS


def test_a_buyer_token_without_the_sell_scope_exits_3(exchange, everx):
    exchange.problem("GET", "/seller/servers", 403, "scope_missing",
                     "This token does not have the “sell” scope.")
    result = everx("servers")
    assert result.exit_code == 3
    assert "does not have the “sell” scope" in result.stderr
    assert "API tokens page" in result.stderr


# --- errors, languages and exit codes -----------------------------------------------------------

@pytest.mark.parametrize(("status", "code", "exit_code"), [
    (401, "token_invalid", 3), (403, "seller_access_lost", 3), (404, "rental_not_found", 1),
    (409, "rental_ended", 1), (422, "validation_failed", 1), (429, "rate_limited", 1), (500, "http_500", 4),
    (503, "http_503", 4),
])
def test_exit_codes_follow_the_answer(exchange, everx, status, code, exit_code):
    exchange.problem("POST", "/rentals/7/stop", status, code, "Refused.")
    assert everx("stop", "7", "--yes").exit_code == exit_code


def test_an_exchange_out_of_reach_exits_4(exchange, everx, monkeypatch):
    def down(request):
        raise httpx.ConnectError("connection refused", request=request)

    monkeypatch.setattr(cli_main, "HTTP_TRANSPORT", httpx.MockTransport(down))
    result = everx("balance")
    assert result.exit_code == 4
    assert f"Could not reach the exchange at {URL}" in result.stderr
    as_json = everx("balance", "--json")
    assert as_json.exit_code == 4 and json_of(as_json)["code"] == "network_error"


def test_the_servers_french_message_comes_through_with_lang_fr(exchange, everx, public_key):
    detail = ("Votre solde ne couvre pas la première heure de cet ordre à votre prix maximum. "
              "Rechargez votre solde, ou demandez moins de GPU ou un prix plus bas.")
    exchange.problem("POST", "/bids", 422, "insufficient_balance", detail)
    result = everx("buy", "h100-sxm", "--max-price", "2.90", "--ssh-key", public_key, "--yes", "--lang", "fr")
    assert result.exit_code == 1
    assert exchange.requests[0].headers["Accept-Language"] == "fr"
    assert result.stderr.strip() == f"Erreur{NBSP}: {detail}"


def test_the_system_locale_chooses_the_language_when_no_option_does(exchange, everx, monkeypatch):
    exchange.problem("GET", "/wallet", 401, "token_invalid", "Envie um token de API válido.")
    monkeypatch.setenv("LANG", "pt_PT.UTF-8")
    result = everx("balance")
    assert exchange.requests[0].headers["Accept-Language"] == "pt"
    assert "Erro: Envie um token de API válido." in result.stderr
    assert "Execute everx login" in result.stderr
    monkeypatch.setenv("EVERX_LANG", "fr")
    everx("balance")
    assert exchange.requests[1].headers["Accept-Language"] == "fr"


def test_with_json_an_error_is_the_problem_details_on_stdout(exchange, everx):
    exchange.problem("POST", "/bids/31/cancel", 409, "bid_not_open", "This bid is no longer open.")
    result = everx("cancel", "31", "--json")
    assert result.exit_code == 1
    problem = json_of(result)
    assert (problem["status"], problem["code"]) == (409, "bid_not_open")
    assert result.stderr == ""


def test_field_errors_are_listed_under_the_message(exchange, everx, public_key):
    exchange.problem("POST", "/bids", 422, "validation_failed", "Some fields are missing or not valid.",
                     errors=[{"field": "gpus", "code": "gpus_not_allowed",
                              "detail": "Ask for 1, 2, 4 or 8 GPUs."}])
    result = everx("buy", "h100-sxm", "--gpus", "3", "--max-price", "2.90", "--ssh-key", public_key, "--yes")
    assert "  gpus: Ask for 1, 2, 4 or 8 GPUs." in result.stderr


def _commands(group, prefix=()):
    import typer.main

    command = typer.main.get_command(group)
    for name, sub in command.commands.items():
        if hasattr(sub, "commands"):
            for inner_name, inner in sub.commands.items():
                yield (*prefix, name, inner_name), inner
        else:
            yield (*prefix, name), sub


def test_every_command_takes_json_and_lang():
    commands = dict(_commands(cli_main.app))
    assert {"login", "gpus", "markets", "book", "quote", "buy", "bid", "orders", "cancel", "rentals",
            "rental", "stop", "balance", "history", "servers", "earnings"} <= {path[0] for path in commands}
    assert {("offer", "post"), ("offer", "price"), ("offer", "withdraw")} <= set(commands)
    for path, command in commands.items():
        options = {option for param in command.params for option in getattr(param, "opts", [])}
        assert {"--json", "--lang"} <= options, path


def test_version(everx):
    result = everx("--version")
    assert result.exit_code == 0 and result.stdout.startswith("everx ")


def test_the_token_never_shows_in_the_output(exchange, everx):
    exchange.answer("GET", "/me", body=support.ME)
    result = everx("me", "--json")
    assert TOKEN not in result.output
