"""Broken HTTP exchanges said in plain words (issue 37, items 8 and 9): no Python exception
names, no "did not answer" for a server that answered, no wait it did not ask for; over
``--server``, ``-c`` and ``--context-full`` are warned; a ``/v1`` reply's counts are bounded as
the native API bounds them and a malformed ``tokens`` with ``--pick server`` is said.

No real server sends a cut reply, a status line that is not HTTP or a negative Content-Length
on demand: a raw socket server answers every request with the bytes a test gives it."""

from __future__ import annotations

import email.utils
import re
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.cli import run_cli
from tests.support.openai_servers import fake  # noqa: F401  (the fixture)
from tests.support.scripted_server import scripted  # noqa: F401  (the fixture)
from tui.engine import SamplerSettings, default_model_path
from tui.engine.model.local_vocab import LocalVocab
from tui.engine.remote.openai_backend import OpenAIBackend
from tui.engine.wire.http_faults import retry_wait
from tui.engine.wire.remote_http import ServerClient, ServerError

NAMES = ("IncompleteRead", "BadStatusLine", "LineTooLong", "HTTPException", "RemoteDisconnected")


class _Raw(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    reply = b""
    close_after = True  # False: keep the connection open after the reply (until the test ends)
    done = threading.Event()


class _RawHandler(socketserver.StreamRequestHandler):
    server: _Raw

    def handle(self) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.request.recv(65536)
            if not chunk:
                return
            head += chunk
        self.wfile.write(self.server.reply)
        self.wfile.flush()
        if not self.server.close_after:
            self.server.done.wait(30)


@pytest.fixture
def raw() -> Iterator[_Raw]:
    server = _Raw(("127.0.0.1", 0), _RawHandler)
    server.done = threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.done.set()
        server.shutdown()
        server.server_close()
        thread.join(30)


def _said(server: _Raw, reply: bytes, *, timeout: float = 20.0) -> str:
    server.reply = reply
    client = ServerClient(f"http://127.0.0.1:{server.server_address[1]}", timeout)
    try:
        with pytest.raises(ServerError) as info:
            client.get("/props")
    finally:
        client.close()
    text = str(info.value)
    assert not any(n in text for n in NAMES), text
    assert "\n" not in text and text.endswith("."), text
    return text


JSON_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"


def test_a_reply_cut_short_says_the_server_closed_mid_reply(raw):
    text = _said(raw, JSON_HEAD + b"Content-Length: 100\r\n\r\n{\"a\":")
    assert "closed the connection in the middle of its reply (/props)" in text
    assert "cannot reach" not in text  # it answered


def test_a_status_line_that_is_not_http_and_an_endless_header_line(raw):
    assert "answered with something that is not an HTTP reply" in _said(raw, b"HELLO THERE\r\n\r\n")
    long_line = b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n"
    assert "header line longer than the 65,536 bytes" in _said(raw, long_line)


def test_a_negative_content_length_is_said_at_once_not_after_the_timeout(raw):
    raw.close_after = False  # http.client would read "until closed": the whole --timeout
    text = _said(raw, JSON_HEAD + b"Content-Length: -1\r\n\r\n{}", timeout=600.0)
    assert "Content-Length of '-1', which is not a number of bytes" in text
    assert "did not answer" not in text


def test_an_empty_200_reply_is_said_as_empty(raw):
    text = _said(raw, JSON_HEAD + b"Content-Length: 0\r\n\r\n")
    assert "answered GET /props with an empty reply" in text


@pytest.mark.parametrize(
    "value,said",
    [
        ("30", "it asks to wait 30 s"),
        ("1e12", "its Retry-After is neither a number of seconds nor an HTTP date"),
        ("99999999999999999999999", "it asks to wait more than a day"),
        ("", "it gives no wait"),
        ("Wed, 21 Oct 2015 07:28:00 GMT", "it asked to wait until 2015-10-21 07:28:00 UTC, which has passed"),
    ],
)
def test_retry_after_in_every_form(raw, value, said):
    header = f"Retry-After: {value}\r\n".encode() if value else b""
    reply = b"HTTP/1.1 429 Too Many\r\nContent-Type: application/json\r\n" + header
    reply += b'Content-Length: 2\r\n\r\n{}'
    text = _said(raw, reply)
    assert f"(HTTP 429, {said})" in text, text


def test_retry_after_as_a_date_to_come_gives_the_seconds_left():
    now = time.time()
    value = email.utils.formatdate(now + 90, usegmt=True)
    text = retry_wait(value, now)
    m = re.search(r"until \S+ \S+ UTC \((\d+) s\)", text)
    assert m is not None, text
    assert 89 <= int(m.group(1)) <= 90  # the date has whole seconds: 90 s less under one


# -- -c and --context-full over --server ----------------------------------------------------------


def test_c_and_context_full_over_a_server_are_warned(scripted):  # noqa: F811
    proc = run_cli(
        "trace", "--server", scripted.url, "-p", "Hi", "-n", "1", "-c", "8192",
        "--context-full", "shift",
    )
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert (
        "warning: -c 8192 and --context-full shift do nothing with --server: the context is "
        "the server's own" in err
    ), err
    plain = run_cli("trace", "--server", scripted.url, "-p", "Hi", "-n", "1")
    assert plain.returncode == 0 and b"warning" not in plain.stderr, plain.stderr


def test_the_app_warns_the_same_flags_at_start():
    """The app's start notes use the same sentence (``startup.start_notes``)."""
    from tui.args import build_parsers
    from tui.backend_flags import ignored_over_server

    app = build_parsers()["app"]
    said = ignored_over_server(app.parse_args(["--server", "http://h:1", "-c", "2048"]))
    assert said is not None and said.startswith("-c 2048 does nothing with --server")
    assert ignored_over_server(app.parse_args(["-c", "2048", "--context-full", "shift"])) is None
    assert ignored_over_server(app.parse_args(["--server", "http://h:1"])) is None


def test_the_stop_line_over_a_server_does_not_advise_c(scripted):  # noqa: F811
    """The scripted server's context is 512 tokens: a trace asked for more stops there, and
    the line names the server's context, not -c and --context-full (which do nothing)."""
    proc = run_cli("trace", "--server", scripted.url, "-p", "Hi", "-n", "1000")
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert "context full (511 of the server's 512 tokens; its own -c and --context-shift " in err
    assert "a larger -c" not in err and "--context-full shift" not in err, err


# -- /v1 replies read as strictly as the native ones ------------------------------------------------


def _backend(url: str, **kw) -> OpenAIBackend:
    return OpenAIBackend(
        url, SamplerSettings(temp=0.0), local_vocab=LocalVocab(default_model_path()), **kw
    )


def test_v1_timings_are_bounded_by_the_prompt(fake):  # noqa: F811
    b = _backend(fake.url)
    two = b.vocab.tokenize("Hello there, friend", add_special=False)[:2]
    assert len(two) == 2
    try:
        fake.mutate = lambda r: r | {
            "timings": {"prompt_n": 2, "cache_n": 10**9, "prompt_ms": 1.0, "predicted_ms": 1.0}
        }
        with pytest.raises(ServerError, match=r"timings\.cache_n.*outside 0\.\.2"):
            b.prefill(two)
        fake.mutate = lambda r: r | {
            "timings": {"prompt_n": 1, "cache_n": 1, "prompt_ms": 1.0, "predicted_ms": 1.0}
        }
        recs = b.prefill(two)
        assert recs and recs[-1].server is not None and recs[-1].server.cache_n == 1
    finally:
        b.close()


def _legacy(tokens: object) -> object:
    def mutate(reply: dict) -> dict:
        lp = {"top_logprobs": [{" Paris": -0.3, ".": -1.6}], "token_logprobs": [-0.3]}
        if tokens is not None:
            lp["tokens"] = tokens
        reply["choices"][0]["logprobs"] = lp
        return reply

    return mutate


def test_a_malformed_tokens_is_said_and_a_missing_pick_is_not_taken_for_the_server_s(fake):  # noqa: F811
    b = _backend(fake.url, pick="server")
    try:
        ids = b.vocab.tokenize("Hi", add_special=False)
        fake.mutate = _legacy(5)
        with pytest.raises(ServerError, match=r"logprobs\.tokens"):
            b.prefill(ids)
        fake.mutate = _legacy(None)
        with pytest.raises(ServerError, match="--pick server has none to take"):
            b.prefill(ids)
        fake.mutate = _legacy([" Paris"])
        b.prefill(ids)
        assert b.sample().token == 7042  # " Paris": the server's own pick, mapped to its id
    finally:
        b.close()
