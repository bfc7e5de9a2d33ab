"""Talking to llama-server over HTTP: requests, timings and every fault as one sentence.

Standard library only (``http.client`` and ``json``), so the engine needs no HTTP package. Each
fault a user can meet (nothing listening, a wrong address, something that is not llama-server,
a model still loading, a slot another client holds, a timeout) becomes a :class:`ServerError`
whose message is one sentence and says which key retries.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from .errors import TokenstepError

DEFAULT_TIMEOUT_S = 60.0


class ServerError(TokenstepError):
    """llama-server could not answer a request. ``retry``: trying again may work (the server
    was down, loading, busy or slow), so the app keeps the session and offers a key for it."""

    def __init__(self, message: str, *, retry: bool = False) -> None:
        super().__init__(message)
        self.retry = retry


@dataclass(frozen=True)
class Reply:
    """A JSON answer and the round trip measured here (connect, send, wait, read, parse)."""

    body: Any  # a dict, or a list for /slots
    round_trip_ms: float
    json_ms: float  # time spent encoding the request and decoding the answer


def parse_url(url: str) -> tuple[str, int, str]:
    """``http://HOST:PORT[/prefix]`` as (host, port, prefix); a bad address is one sentence."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ServerError(f"--server {url!r} is not an address like http://HOST:PORT.") from exc
    if parts.scheme != "http" or not parts.hostname:
        raise ServerError(
            f"--server {url!r} is not an address like http://HOST:PORT "
            "(tokenstep speaks plain HTTP to llama-server)."
        )
    return parts.hostname, port or 8080, parts.path.rstrip("/")


class ServerClient:
    """One keep-alive connection to llama-server, reopened after a failure."""

    def __init__(self, url: str, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.host, self.port, self.prefix = parse_url(url)
        self.url = f"http://{self.host}:{self.port}{self.prefix}"
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    def get(self, path: str) -> Reply:
        return self.request("GET", path)

    def post(self, path: str, body: dict[str, Any]) -> Reply:
        return self.request("POST", path, body)

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Reply:
        t0 = time.perf_counter()
        data = json.dumps(body).encode() if body is not None else None
        json_ms = (time.perf_counter() - t0) * 1000.0
        status, raw = self._exchange(method, path, data)
        t1 = time.perf_counter()
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = None
        t2 = time.perf_counter()
        json_ms += (t2 - t1) * 1000.0
        if not isinstance(parsed, (dict, list)):
            raise ServerError(
                f"{self.url} answered {method} {path} with something that is not JSON: "
                "it does not look like llama-server."
            )
        if status != 200:
            raise ServerError(
                self._refusal(status, path, parsed if isinstance(parsed, dict) else {}),
                retry=status in (500, 503),
            )
        return Reply(parsed, (t2 - t0) * 1000.0, json_ms)

    def _exchange(self, method: str, path: str, data: bytes | None) -> tuple[int, bytes]:
        """Send and read one request; a dropped keep-alive connection is retried once."""
        for attempt in (0, 1):
            conn = self._connection()
            try:
                headers = {"Content-Type": "application/json"} if data is not None else {}
                conn.request(method, self.prefix + path, body=data, headers=headers)
                resp = conn.getresponse()
                return resp.status, resp.read()
            except TimeoutError as exc:
                self.close()
                raise ServerError(
                    f"the llama-server at {self.url} did not answer {path} within "
                    f"{self.timeout:.0f} s (busy with another client's request, or slow).",
                    retry=True,
                ) from exc
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self.close()
                if attempt == 0:
                    continue  # a keep-alive connection the server closed: open a new one
                raise ServerError(
                    f"the llama-server at {self.url} closed the connection (stopped or restarted?).",
                    retry=True,
                ) from exc
            except ConnectionRefusedError as exc:
                self.close()
                raise ServerError(
                    f"nothing answers at {self.url} (connection refused): is llama-server "
                    "running there?",
                    retry=True,
                ) from exc
            except socket.gaierror as exc:
                self.close()
                raise ServerError(
                    f"the host {self.host!r} of --server {self.url} is unknown ({exc.strerror})."
                ) from exc
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                reason = getattr(exc, "strerror", None) or type(exc).__name__
                raise ServerError(f"cannot reach {self.url}: {reason}.", retry=True) from exc
        raise AssertionError("unreachable")

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return self._conn

    def _refusal(self, status: int, path: str, body: dict[str, Any]) -> str:
        err = body.get("error")
        message = err.get("message") if isinstance(err, dict) else None
        if status == 503:
            return f"the llama-server at {self.url} is still loading its model ({message or 'HTTP 503'})."
        if status == 404:
            return (
                f"{self.url} has no {path} (HTTP 404): it is not llama-server, or not a "
                "version tokenstep knows."
            )
        detail = f": {' '.join(str(message).split())}" if message else ""
        return f"the llama-server at {self.url} refused {path} (HTTP {status}){detail.rstrip('.')}."

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
