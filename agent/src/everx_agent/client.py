"""The exchange's agent API over urllib: one POST, JSON both ways, problem details on refusal.

`ExchangeClient.heartbeat(body)` returns the answer's JSON object, or raises `ProblemError` (the
exchange answered with an error: status, code, title, detail, Retry-After) or `ExchangeUnreachable`
(no usable answer: refused connection, DNS, TLS, timeout, a body that is not JSON). Neither ever
carries the token. Redirects are not followed: the token would go along to wherever they point.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from email.utils import parsedate_to_datetime
from typing import Any

from . import __version__
from .clock import utc_now

HEARTBEAT_PATH = "/api/v1/agent/heartbeat"
TIMEOUT_SECONDS = 10.0
MAX_ANSWER_BYTES = 4 * 1024 * 1024
TEXT_LIMIT = 300


class ExchangeError(Exception):
    """The base of the client's errors."""


class ExchangeUnreachable(ExchangeError):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class ProblemError(ExchangeError):
    """An RFC 9457 problem (or whatever error the exchange, or a proxy in front of it, sent)."""

    def __init__(self, *, status: int, code: str = "", title: str = "", detail: str = "",
                 retry_after: float | None = None):
        super().__init__(f"{status} {title or code}" + (f": {detail}" if detail and detail != title else ""))
        self.status = status
        self.code = code
        self.title = title
        self.detail = detail
        self.retry_after = retry_after


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class ExchangeClient:
    def __init__(self, *, url: str, token: str, timeout: float = TIMEOUT_SECONDS):
        self.url = url.rstrip("/")
        self._token = token
        self.timeout = timeout
        self._opener = urllib.request.build_opener(_NoRedirects())

    def __repr__(self) -> str:
        return f"ExchangeClient(url={self.url!r})"

    def heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(  # noqa: S310 (the address is checked: https, or loopback http)
            self.url + HEARTBEAT_PATH, data=json.dumps(body).encode(), method="POST", headers={
                "Authorization": f"Bearer {self._token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
                "User-Agent": f"everx-agent/{__version__}",
            },
        )
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                return answer_read(response.read(MAX_ANSWER_BYTES + 1))
        except urllib.error.HTTPError as error:
            raise problem_read(error) from None
        except urllib.error.URLError as error:
            raise ExchangeUnreachable(reason_text(error.reason)) from None
        except (TimeoutError, socket.timeout):
            raise ExchangeUnreachable(f"no answer within {self.timeout:g} seconds") from None
        except (OSError, ValueError) as error:  # a connection reset mid-answer, a broken status line
            raise ExchangeUnreachable(reason_text(error)) from None


def answer_read(raw: bytes) -> dict[str, Any]:
    if len(raw) > MAX_ANSWER_BYTES:
        raise ExchangeUnreachable("the answer is too large")
    try:
        data = json.loads(raw)
    except ValueError:
        raise ExchangeUnreachable("the answer is not JSON") from None
    if not isinstance(data, dict):
        raise ExchangeUnreachable("the answer is not a JSON object")
    return data


def problem_read(error: urllib.error.HTTPError) -> ProblemError:
    try:
        data = json.loads(error.read(MAX_ANSWER_BYTES))
    except (ValueError, OSError):
        data = {}
    if not isinstance(data, dict):
        data = {}

    def text(key: str) -> str:
        value = data.get(key)
        return " ".join(value.split())[:TEXT_LIMIT] if isinstance(value, str) else ""

    return ProblemError(status=error.code, code=text("code"), title=text("title") or str(error.reason or ""),
                        detail=text("detail"), retry_after=retry_after_read(error.headers.get("Retry-After")))


def retry_after_read(value: str | None) -> float | None:
    """Retry-After in seconds: a number of seconds, or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment is None or moment.tzinfo is None:
        return None
    return max(0.0, (moment - utc_now()).total_seconds())


def reason_text(reason: object) -> str:
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return "no answer in time"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return " ".join(str(reason).split())[:TEXT_LIMIT] or reason.__class__.__name__
