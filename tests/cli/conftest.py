"""The command line is its own package (cli/src/everx_cli) that never imports Django: its tests put
it on the path and talk to a fake exchange (httpx.MockTransport), or, in test_cli_live.py, run it
as a program against the live test server."""

import json
import sys
from pathlib import Path

import httpx
import pytest

CLI_SOURCE = Path(__file__).resolve().parents[2] / "cli" / "src"
if str(CLI_SOURCE) not in sys.path:
    sys.path.insert(0, str(CLI_SOURCE))

from everx_cli import main as cli_main  # noqa: E402  (needs the path above)
from typer.testing import CliRunner  # noqa: E402

URL = "http://exchange.test"
TOKEN = "evx_" + "t" * 40


class FakeExchange:
    """The API as docs/api.md describes it, one canned answer per operation. `requests` keeps
    what the command line sent; `answer(method, path, status, body)` changes an answer."""

    def __init__(self):
        self.requests: list[httpx.Request] = []
        self.answers: dict[tuple[str, str], tuple[int, object]] = {}

    def answer(self, method: str, path: str, status: int = 200, body: object = None) -> None:
        self.answers[(method, path)] = (status, body)

    def problem(self, method: str, path: str, status: int, code: str, detail: str, **extra) -> None:
        self.answer(method, path, status, {
            "type": f"{URL}/api/problems/{code}", "title": detail, "status": status, "code": code,
            "detail": detail, **extra,
        })

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path.removeprefix("/api/v1")
        status, body = self.answers.get((request.method, path), (404, {
            "type": f"{URL}/api/problems/not_found", "title": "Not found", "status": 404,
            "code": "not_found", "detail": "There is nothing at this address.",
        }))
        if status == 204:
            return httpx.Response(204)
        media = "application/problem+json" if status >= 400 else "application/json"
        return httpx.Response(status, content=json.dumps(body).encode(), headers={"Content-Type": media})

    def sent(self, method: str, path: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.method == method and r.url.path == "/api/v1" + path]

    def body(self, method: str, path: str) -> dict:
        (request,) = self.sent(method, path)
        return json.loads(request.content)


@pytest.fixture
def exchange(monkeypatch, tmp_path) -> FakeExchange:
    """A fake exchange behind the command line, a token in the environment, an empty config
    directory and English unless a test says otherwise."""
    fake = FakeExchange()
    monkeypatch.setattr(cli_main, "HTTP_TRANSPORT", httpx.MockTransport(fake))
    for name in ("EVERX_LANG", "LC_ALL", "LC_MESSAGES", "EVERX_TOKEN", "EVERX_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("EVERX_URL", URL)
    monkeypatch.setenv("EVERX_TOKEN", TOKEN)
    return fake


@pytest.fixture
def everx():
    """Run `everx ARGS...`; the result has exit_code, stdout and stderr apart."""
    runner = CliRunner()

    def run(*args: str, input: str | None = None, env: dict | None = None):
        return runner.invoke(cli_main.app, list(args), input=input, env=env)

    return run
