"""Talking to llama-server over HTTP: requests, timings and every fault as one sentence.

Standard library only (``http.client`` and ``json``), so the engine needs no HTTP package. Each
fault a user can meet (nothing listening, a wrong address, something that is not llama-server,
a model still loading, a slot another client holds, a timeout) becomes a :class:`ServerError`
whose message is one sentence and says which key retries.

Two bounds hold for every request. Its whole time (connect, send, every read) is at most the
client's ``timeout`` (``--timeout``): a socket timeout alone applies to each read, so a server
that sends one byte a second would never time out. And at most :data:`MAX_REPLY_BYTES` of a
reply are read. What the JSON says is checked field by field in :mod:`~tui.engine.wire.remote_reply`.
"""

from __future__ import annotations

import http.client
import json
import math
import socket
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from ..model import secret
from ..model.errors import TokenstepError
from . import http_faults

DEFAULT_TIMEOUT_S = 60.0
# Measured on the bundled model's llama-server: /completion with n_probs 100 is 11.1 kB,
# /props 2.3 kB (its chat template included), /v1/models 0.9 kB, /tokenize with pieces 26 B a
# token (7.5 B per character of text: a 200 kB paste is 1.5 MB). Unchecked, a 5 MB eos_token
# in /props cost a 1.29 GB peak and 22 s.
MAX_REPLY_BYTES = 16 * 2**20


class _DeadlineSocket(socket.socket):
    """A socket whose every send and receive waits only until one ``deadline`` (monotonic
    seconds) for the whole request, however the bytes trickle in."""

    deadline = math.inf

    def _left(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request's deadline passed")
        self.settimeout(min(left, 1e6))

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self._left()
        return super().recv_into(buffer, nbytes, flags)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        self._left()
        return super().recv(bufsize, flags)

    def sendall(self, data: Any, flags: int = 0) -> None:
        self._left()
        super().sendall(data, flags)  # since Python 3.5 the timeout bounds the whole sendall


class _Connection(http.client.HTTPConnection):
    """http.client's connection on a :class:`_DeadlineSocket`."""

    deadline = math.inf

    def connect(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request's deadline passed")
        raw = socket.create_connection((self.host, self.port), left)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock = _DeadlineSocket(raw.family, raw.type, raw.proto, fileno=raw.detach())
        sock.deadline = self.deadline
        self.sock = sock

    def set_deadline(self, deadline: float) -> None:
        self.deadline = deadline
        if isinstance(self.sock, _DeadlineSocket):
            self.sock.deadline = deadline


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
    """``http://HOST:PORT[/prefix]`` as (host, port, prefix); a bad address is one sentence.
    A prefix ending in ``/v1`` is the base URL an OpenAI client is given (``.../v1``):
    the paths asked carry ``/v1`` themselves, so it is dropped from the prefix."""
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
    prefix = parts.path.rstrip("/")
    return parts.hostname, port or 8080, prefix.removesuffix("/v1")


class ServerClient:
    """One keep-alive connection to llama-server, reopened after a failure."""

    def __init__(
        self,
        url: str,
        timeout: float = DEFAULT_TIMEOUT_S,
        *,
        api_key: str | None = None,
        what: str = "llama-server",
    ) -> None:
        """``api_key``: sent as ``Authorization: Bearer`` and kept nowhere else (no message,
        repr or record holds it). ``what``: the server's name in every sentence."""
        self.host, self.port, self.prefix = parse_url(url)
        self.url = f"http://{self.host}:{self.port}{self.prefix}"
        self.timeout = timeout
        self.what = what
        self._auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._retry_after: str | None = None
        self._conn: _Connection | None = None

    def get(self, path: str, timeout: float | None = None) -> Reply:
        return self.request("GET", path, timeout=timeout)

    def post(self, path: str, body: dict[str, Any]) -> Reply:
        return self.request("POST", path, body)

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> Reply:
        """One whole request within ``timeout`` seconds (None: the client's), its reply parsed
        as JSON (the fields are the caller's to check, through :mod:`~tui.engine.wire.remote_reply`)."""
        t0 = time.perf_counter()
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        data = json.dumps(body).encode() if body is not None else None
        json_ms = (time.perf_counter() - t0) * 1000.0
        status, raw = self._exchange(method, path, data, deadline)
        t1 = time.perf_counter()
        if not raw.strip() and status == 200:
            raise ServerError(
                f"{self.url} answered {method} {path} with an empty reply, not JSON: it does "
                f"not look like {self.what}."
            )
        try:
            parsed = json.loads(raw) if raw else {}
        except (ValueError, RecursionError):  # RecursionError: [[[[... nested too deeply
            parsed = None
        t2 = time.perf_counter()
        json_ms += (t2 - t1) * 1000.0
        if not isinstance(parsed, (dict, list)):
            raise ServerError(
                f"{self.url} answered {method} {path} with something that is not JSON: "
                f"it does not look like {self.what}."
            )
        if status != 200:
            raise ServerError(
                self._refusal(status, path, parsed if isinstance(parsed, dict) else {}),
                retry=status in (429, 500, 502, 503, 504),
            )
        return Reply(parsed, (t2 - t0) * 1000.0, json_ms)

    def _exchange(
        self, method: str, path: str, data: bytes | None, deadline: float
    ) -> tuple[int, bytes]:
        """Send and read one request by ``deadline``; a dropped keep-alive connection is
        retried once (within the same deadline)."""
        for attempt in (0, 1):
            conn = self._connection()
            conn.set_deadline(deadline)
            try:
                headers = {"Content-Type": "application/json"} if data is not None else {}
                conn.request(method, self.prefix + path, body=data, headers=headers | self._auth)
                resp = conn.getresponse()
                self._retry_after = resp.getheader("Retry-After")
                return resp.status, self._body(resp, path)
            except TimeoutError as exc:
                self.close()
                raise ServerError(
                    f"the {self.what} at {self.url} did not answer {path} within "
                    f"{self.timeout:g} s (--timeout bounds each whole request; the server is "
                    "busy with another client's request, or slow).",
                    retry=True,
                ) from exc
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self.close()
                if attempt == 0:
                    continue  # a keep-alive connection the server closed: open a new one
                raise ServerError(
                    f"the {self.what} at {self.url} closed the connection (stopped or restarted?).",
                    retry=True,
                ) from exc
            except ConnectionRefusedError as exc:
                self.close()
                raise ServerError(
                    f"nothing answers at {self.url} (connection refused): is {self.what} "
                    "running there?",
                    retry=True,
                ) from exc
            except socket.gaierror as exc:
                self.close()
                raise ServerError(
                    f"the host {self.host!r} of --server {self.url} is unknown ({exc.strerror})."
                ) from exc
            except http.client.HTTPException as exc:  # it answered: in words, not names
                self.close()
                what = http_faults.broken_reply(exc)
                raise ServerError(f"the {self.what} at {self.url} {what} ({path}).", retry=True) from exc
            except OSError as exc:
                self.close()
                reason = getattr(exc, "strerror", None) or "the connection failed"
                raise ServerError(f"cannot reach {self.url}: {reason}.", retry=True) from exc
        raise AssertionError("unreachable")

    def _body(self, resp: http.client.HTTPResponse, path: str) -> bytes:
        """At most :data:`MAX_REPLY_BYTES` of a reply; past that, one sentence (and the
        connection, with the rest unread, is closed)."""
        length = resp.getheader("Content-Length")
        if (bad := http_faults.bad_length(length)) is not None:  # -1: read until closed
            self.close()
            raise ServerError(f"the {self.what} at {self.url} {bad} ({path}).", retry=True)
        too_long = length is not None and length.strip().isdigit() and int(length) > MAX_REPLY_BYTES
        raw = b"" if too_long else resp.read(MAX_REPLY_BYTES + 1)
        if too_long or len(raw) > MAX_REPLY_BYTES:
            self.close()
            raise ServerError(
                f"the {self.what} at {self.url} sent a {path} reply longer than "
                f"{MAX_REPLY_BYTES // 2**20} MiB, more than tokenstep reads of one reply.",
                retry=True,
            )
        if not resp.isclosed():  # read(n) stops at n: finish the exchange for keep-alive
            raw += resp.read()  # the chunked tail's end, zero bytes of body
        return raw

    def _connection(self) -> _Connection:
        if self._conn is None:
            self._conn = _Connection(self.host, self.port, timeout=self.timeout)
        return self._conn

    def _refusal(self, status: int, path: str, body: dict[str, Any]) -> str:
        err = body.get("error")
        message = err.get("message") if isinstance(err, dict) else None
        if not isinstance(message, str):
            message = None
        else:  # quoted inside one sentence: one line, short, the API key masked before the cut
            message = " ".join(secret.redact(message).split())
            message = message if len(message) <= 300 else message[:300] + "…"
        if status == 503 and self.what == "llama-server":
            return f"the {self.what} at {self.url} is still loading its model ({message or 'HTTP 503'})."
        if status == 404:
            return (
                f"{self.url} has no {path} (HTTP 404): it is not {self.what}, or not a "
                "version tokenstep knows."
            )
        if status in (401, 403):
            given = "the API key given was refused" if self._auth else "no API key was given"
            return (
                f"the {self.what} at {self.url} refused {path} (HTTP {status}): {given}; "
                "pass --api-key KEY or set $OPENAI_API_KEY."
            )
        if status == 429:
            after = http_faults.retry_wait(self._retry_after)
            return (
                f"the {self.what} at {self.url} is rate-limiting requests (HTTP 429, {after})."
            )
        detail = f": {' '.join(str(message).split())}" if message else ""
        return f"the {self.what} at {self.url} refused {path} (HTTP {status}){detail.rstrip('.')}."

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
