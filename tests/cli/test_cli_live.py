"""The `everx` program against the live test server, as a new user runs it: sign in with a token,
buy a GPU hour, read the ssh command, stop, and find the balance lower by exactly the charge; a
seller posts, reprices and withdraws an offer; a refusal comes back in French with `--lang fr`.

Each command is a real process (`python -m everx_cli`) talking HTTP to pytest-django's
`live_server`: no Django in the program, only the API of docs/api.md."""

import json
import os
import stat
import subprocess
import sys
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.utils import translation
from django.utils.translation import gettext

from accounts.services import api_token_create
from billing.models import RentalCharge
from billing.services import fx_rates_load
from exchange.models import Offer, OfferState, Rental, RentalState
from exchange.ssh_keys import ssh_connect_command
from tests.billing import support as billing
from tests.cli.conftest import CLI_SOURCE
from tests.exchange.support import buyer_with, login_ready, market_set
from tests.factories import OfferFactory, SellerFactory, ServerFactory

pytestmark = pytest.mark.django_db(transaction=True)

NBSP = "\u00a0"
INSUFFICIENT = ("Your balance does not cover the first hour of this order at your maximum price. "
                "Top up your balance, or ask for fewer GPUs or a lower price.")


@pytest.fixture
def market(gpu_catalog):
    """An open market with one H100 server offering 4 GPUs at US$ 2.50, and euro rates."""
    fx_rates_load(rates={"EUR": Decimal("0.92"), "GBP": Decimal("0.79")},
                  valid_from=datetime(2026, 1, 1, tzinfo=UTC), source="test")
    market_set(True)
    h100 = gpu_catalog["h100-sxm"]
    OfferFactory(server=ServerFactory(gpu_model=h100, host="gpu1.example.test"), gpus_offered=4,
                 price_usd=Decimal("2.50"))
    return h100


@pytest.fixture
def everx(live_server, tmp_path):
    """Run `everx ARGS...` as a program with its own home and config directory; a token given is
    passed as EVERX_TOKEN, else the one `everx login` saved is used."""
    home = tmp_path / "home"
    home.mkdir()

    def run(*args: str, token: str | None = None, input: str | None = None) -> subprocess.CompletedProcess:
        env = {
            "PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(CLI_SOURCE), "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"), "LANG": "C.UTF-8", "EVERX_URL": live_server.url,
        }
        if token:
            env["EVERX_TOKEN"] = token
        # A session of its own: no controlling terminal, so nothing can wait on a keyboard.
        return subprocess.run(
            [sys.executable, "-m", "everx_cli", *args], input=input, capture_output=True, text=True,
            env=env, timeout=120, start_new_session=True, check=False,
        )

    run.home = home
    return run


def parsed(done: subprocess.CompletedProcess):
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    return json.loads(done.stdout)


def amount(money: dict) -> Decimal:
    return Decimal(money["amount"])


def test_a_buyer_signs_in_buys_an_hour_connects_and_stops(market, everx, tmp_path, ed25519_public_key):
    buyer = buyer_with(amount="100", currency="EUR")
    _token, secret = api_token_create(user=buyer, name="laptop", scopes={"read", "trade"})
    key_file = tmp_path / "id_ed25519.pub"
    key_file.write_text(ed25519_public_key + "\n")

    signed_in = everx("login", input=secret + "\n")
    assert signed_in.returncode == 0, signed_in.stderr
    assert buyer.email in signed_in.stdout
    config = everx.home / ".config" / "everx" / "config.json"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert json.loads(config.read_text())["token"] == secret

    assert any(row["gpu_model"] == "h100-sxm" for row in parsed(everx("markets", "--json")))
    quote = parsed(everx("quote", "h100-sxm", "--gpus", "1", "--hours", "3", "--json"))
    assert quote["gpu_model"] == "h100-sxm" and amount(quote["price"]) == Decimal("2.50")
    shown_quote = everx("quote", "h100-sxm", "--gpus", "1", "--hours", "3", "--lang", "pt")
    assert "Preço por hora de GPU" in shown_quote.stdout and "2,50 USD" in shown_quote.stdout
    before = amount(parsed(everx("balance", "--json"))["balance"])

    bought = parsed(everx("buy", "h100-sxm", "--gpus", "1", "--hours", "3", "--max-price", "2.90",
                          "--ssh-key", str(key_file), "--yes", "--json"))
    rental = Rental.objects.select_related("server").get(buyer=buyer)
    assert bought["rental"]["id"] == rental.pk
    assert bought["bid"]["time_in_force"] == "buy_now"
    assert amount(bought["rental"]["price"]) == Decimal("2.50")
    assert rental.state == RentalState.STARTING  # paid; the server's agent makes the login
    login_ready(rental)
    assert rental.state == RentalState.RUNNING

    shown = everx("rental", str(rental.pk))
    assert shown.returncode == 0, shown.stderr
    server = rental.server
    command = ssh_connect_command(host=server.host, port=server.ssh_port, username=rental.username)
    assert shown.stdout.splitlines()[-1] == command
    assert everx("rental", str(rental.pk), "--ssh").stdout == command + "\n"

    stopped = parsed(everx("stop", str(rental.pk), "--yes", "--json"))
    assert stopped["state"] == "ended" and stopped["connection"] is None
    rental.refresh_from_db()
    assert rental.state == RentalState.ENDED

    after = amount(parsed(everx("balance", "--json"))["balance"])
    (charge,) = RentalCharge.objects.filter(rental=rental)
    assert charge.currency == "EUR"
    assert before - after == charge.amount == amount(stopped["cost_so_far"])
    movements = parsed(everx("history", "--json"))["items"]
    assert any(amount(row["amount"]) == -charge.amount for row in movements)
    assert parsed(everx("rentals", "--state", "ended", "--json"))["items"][0]["id"] == rental.pk


def test_a_seller_posts_reprices_and_withdraws_an_offer(gpu_catalog, everx):
    seller = SellerFactory()
    owner = billing.member(seller)  # a member with two-factor authentication
    server = ServerFactory(seller=seller, gpu_model=gpu_catalog["h100-sxm"], gpu_count=8)
    _token, secret = api_token_create(user=owner, name="portal", scopes={"sell"}, seller_id=seller.pk)

    servers = parsed(everx("servers", "--json", token=secret))
    assert [row["id"] for row in servers["items"]] == [server.pk]

    posted = parsed(everx("offer", "post", str(server.pk), "--gpus", "2", "--price", "3.10", "--json",
                          token=secret))
    offer = Offer.objects.get(server=server)
    assert posted["id"] == offer.pk and posted["gpus_offered"] == 2
    assert offer.price_usd == Decimal("3.10") and offer.state == OfferState.ACTIVE

    repriced = parsed(everx("offer", "price", str(offer.pk), "3.20", "--json", token=secret))
    assert amount(repriced["price"]) == Decimal("3.20")
    offer.refresh_from_db()
    assert offer.price_usd == Decimal("3.20")

    withdrawn = everx("offer", "withdraw", str(offer.pk), token=secret)
    assert withdrawn.returncode == 0, withdrawn.stderr
    offer.refresh_from_db()
    assert offer.state == OfferState.WITHDRAWN
    assert parsed(everx("earnings", "--json", token=secret))


def test_a_refusal_comes_back_in_french_with_lang_fr(market, everx, tmp_path, ed25519_public_key):
    poor = billing.buyer_with("EUR", "1.00")
    _token, secret = api_token_create(user=poor, name="laptop", scopes={"read", "trade"})
    key_file = tmp_path / "id_ed25519.pub"
    key_file.write_text(ed25519_public_key + "\n")
    with translation.override("fr"):
        french = gettext(INSUFFICIENT)
    assert french != INSUFFICIENT

    refused = everx("buy", "h100-sxm", "--gpus", "1", "--max-price", "2.90", "--ssh-key", str(key_file),
                    "--yes", "--lang", "fr", token=secret)
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert refused.stderr.strip() == f"Erreur{NBSP}: {french}"

    as_json = everx("buy", "h100-sxm", "--gpus", "1", "--max-price", "2.90", "--ssh-key", str(key_file),
                    "--yes", "--lang", "fr", "--json", token=secret)
    assert as_json.returncode == 1
    problem = json.loads(as_json.stdout)
    assert (problem["status"], problem["code"], problem["detail"]) == (422, "insufficient_balance", french)

    assert not Rental.objects.filter(buyer=poor).exists()
    poor.wallet.refresh_from_db()
    assert poor.wallet.balance == Decimal("1.00")


def test_without_a_valid_token_the_program_exits_3(market, everx):
    refused = everx("balance", token="evx_" + "x" * 40)
    assert refused.returncode == 3
    assert "everx login" in refused.stderr
