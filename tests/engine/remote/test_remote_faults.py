"""Faults between tokenstep and llama-server, each with a real process: nothing listening, an
unknown host, something that is not llama-server (Python's own http.server), a server still
loading its model (503), a slot another client holds, a server restarted mid-session."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.support.cli import run_cli
from tests.support.llama_server import free_port, http_status, llama_server, start_server  # noqa: F401
from tests.support.remote import one_line_error
from tui.engine import SamplerSettings
from tui.engine.remote.remote import RemoteBackend
from tui.engine.run import loop
from tui.engine.wire.remote_http import ServerError


def test_nothing_listening_is_one_sentence():
    port = free_port()
    err = one_line_error(run_cli("trace", "--server", f"http://127.0.0.1:{port}", "-p", "hi"))
    assert "nothing answers" in err and "connection refused" in err


def test_the_app_and_verify_with_a_server_that_is_not_there_are_one_sentence():
    port = free_port()
    err = one_line_error(run_cli("--server", f"http://127.0.0.1:{port}"))  # before the UI
    assert "nothing answers" in err
    err = one_line_error(run_cli("verify", "--server", f"http://127.0.0.1:{port}", "-p", "x"))
    assert "verify needs a local model: this one runs on the server at" in err


def test_a_bad_address_and_an_unknown_host_are_one_sentence():
    err = one_line_error(run_cli("trace", "--server", "ftp://127.0.0.1:1", "-p", "hi"))
    assert "not an address like http://HOST:PORT" in err
    err = one_line_error(run_cli("trace", "--server", "http://no-such-host.invalid:80", "-p", "x"))
    assert "is unknown" in err
    err = one_line_error(run_cli("--server", "http://[::1", "-p", "x"))
    assert "not an address" in err


def test_something_that_is_not_llama_server_is_one_sentence(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        t0 = time.monotonic()
        while http_status(f"http://127.0.0.1:{port}/") != 200:
            assert time.monotonic() - t0 < 60, "http.server did not start"
            time.sleep(0.05)
        err = one_line_error(run_cli("trace", "--server", f"http://127.0.0.1:{port}", "-p", "x"))
        assert "not llama-server" in err or "does not look like llama-server" in err
    finally:
        proc.terminate()
        proc.wait(30)


def test_flags_that_need_a_local_model_are_refused_with_server():
    err = one_line_error(run_cli("trace", "--server", "http://127.0.0.1:1", "--graph", "-p", "x"))
    assert "needs a local model: this one runs on the server at http://127.0.0.1:1" in err
    # -m with --server is the served GGUF's vocabulary (for DRY and grammars): read first
    err = one_line_error(run_cli("trace", "--server", "http://127.0.0.1:1", "-m", "x", "-p", "x"))
    assert "model file not found: x." in err


def test_a_server_still_loading_its_model_is_one_sentence(tmp_path):
    """Catch the real 503 window: start a server and connect while /health says loading. The
    model may finish loading between the two; then try again with a new server."""
    for _ in range(5):
        server = start_server(tmp_path, wait=False)
        try:
            status = None
            while status not in (503, 200) and server.proc.poll() is None:
                status = http_status(server.url + "/health")
            if status != 503:
                continue
            try:
                RemoteBackend(server.url).close()
            except ServerError as exc:
                assert "still loading its model" in str(exc) and exc.retry
                return
        finally:
            server.stop()
    pytest.skip("the model always loaded before tokenstep could ask (no 503 window seen)")


def test_a_slot_taken_by_another_client_is_one_sentence(llama_server):  # noqa: F811
    """The other client streams 1,500 tokens, far more than the refusal takes to come, and
    hangs up once it came: llama-server cancels a stream whose client is gone at its next
    chunk (0.06 s here), so the test does not wait out the other reply (40 s to 180 s of 2
    cores). A request without ``stream`` is not cancelled: the server ran all 1,500 tokens."""
    import http.client
    import json
    import urllib.request

    other = http.client.HTTPConnection("127.0.0.1", llama_server.port, timeout=30)
    body = {"prompt": "Once", "n_predict": 1500, "ignore_eos": True, "id_slot": 1}
    body["stream"] = True
    other.request("POST", "/completion", json.dumps(body), {"Content-Type": "application/json"})

    def slot_busy() -> bool:
        with urllib.request.urlopen(llama_server.url + "/slots", timeout=30) as resp:
            slots = json.loads(resp.read())
        return any(s["id"] == 1 and s["is_processing"] for s in slots)

    try:
        t0 = time.monotonic()
        while not slot_busy():
            assert time.monotonic() - t0 < 120, "the other client's request never started"
            time.sleep(0.05)
        r = RemoteBackend(llama_server.url, SamplerSettings(temp=0.0), slot=1, timeout=3.0)
        try:
            with pytest.raises(ServerError, match="slot 1 of llama-server .* is busy") as info:
                r.sync_prompt(r.vocab.tokenize("Hello", add_special=True))
            assert info.value.retry and r.n_past == 0  # nothing changed on our side
        finally:
            r.close()
    finally:
        other.close()  # the other client hangs up: the server cancels its stream
    t0 = time.monotonic()
    while slot_busy():  # the slot is free again for the module's next test
        assert time.monotonic() - t0 < 300, "the other client's cancelled request kept slot 1"
        time.sleep(0.05)


def test_a_server_restarted_mid_session_keeps_the_text_and_reports_the_lost_cache(tmp_path):
    port = free_port()
    server = start_server(tmp_path, port=port)
    r = RemoteBackend(server.url, SamplerSettings(temp=0.0))
    try:
        toks = r.vocab.tokenize("The sea is", add_special=True)
        r.sync_prompt(toks)
        for _ in range(3):
            loop.advance(r)
        kept = list(r.tokens)
        server.stop()
        with pytest.raises(ServerError) as info:
            loop.advance(r)
        assert info.value.retry
        assert r.tokens == kept  # the conversation is kept
        server = start_server(tmp_path, port=port)
        turn = loop.advance(r)  # the retry: the same pick, fed to a server with an empty cache
        assert turn.record is not None and turn.record.server is not None
        assert turn.record.server.cache_lost
        assert turn.record.server.prompt_n == len(kept) + 1
        assert r.tokens[: len(kept)] == kept
    finally:
        r.close()
        server.stop()
