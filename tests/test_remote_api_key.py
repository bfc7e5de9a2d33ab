"""llama-server started with ``--api-key``: every native endpoint tokenstep asks (``/props``,
``/tokenize``, ``/completion``, ``/slots``) wants the key as a bearer token, and only
``/health`` and ``/v1/models`` answer without it. tokenstep sends ``--api-key`` (or
``$OPENAI_API_KEY``) on all of them, detection included, and ``serve`` hands it to its tabs in
their environment."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tui.args import build_parsers
from tui.engine import SamplerSettings
from tui.engine.remote.remote import RemoteBackend
from tui.engine.wire.openai_api import detect_api
from tui.engine.wire.remote_http import ServerError
from tui.serve import remote_slots
from tui.serve_remote import remote_api

from .conftest import run_cli
from .llama_server import Server, start_server
from .test_remote_faults import _one_sentence

KEY = "sk-native-SECRET-7"


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(tmp_path_factory.mktemp("keyed"), extra=("--api-key", KEY))
    try:
        yield server
    finally:
        server.stop()


def test_the_server_really_wants_the_key(keyed_server):
    from .llama_server import http_status

    assert http_status(keyed_server.url + "/health") == 200  # public
    assert http_status(keyed_server.url + "/props") == 401
    assert http_status(keyed_server.url + "/slots") == 401


def test_detection_and_every_native_request_carry_the_key(keyed_server):
    assert detect_api(keyed_server.url, 30.0, KEY) == "native"
    b = RemoteBackend(keyed_server.url, SamplerSettings(temp=0.0), n_probs=5, api_key=KEY)
    try:
        toks = b.vocab.tokenize("The cat", add_special=True)  # /tokenize
        assert b.vocab.piece(toks[-1]) == b" cat"  # /tokenize's pieces (no /detokenize needed)
        b.prefill(toks)  # /completion
        b.feed(b.sample().token)
        assert b.n_past == len(toks) + 1
        assert isinstance(b.client.get("/slots").body, list)  # what slot_busy asks on a timeout
        assert KEY not in repr(vars(b)) and KEY not in json.dumps(b.props, default=str)
    finally:
        b.close()


def test_without_the_key_detection_says_so_in_one_sentence(keyed_server):
    with pytest.raises(ServerError) as got:
        detect_api(keyed_server.url, 30.0, None)
    text = str(got.value)
    assert "(HTTP 401)" in text and "no API key was given" in text and "--api-key" in text
    with pytest.raises(ServerError) as got:
        detect_api(keyed_server.url, 30.0, "sk-wrong")
    assert "the API key given was refused" in str(got.value)


def test_trace_steps_a_keyed_llama_server_natively(keyed_server):
    args = ("trace", "--server", keyed_server.url, "-p", "The cat", "-n", "2", "--temp", "0")
    for extra, env in ((("--api-key", KEY), {}), ((), {"OPENAI_API_KEY": KEY})):
        for api in ((), ("--api", "native")):
            proc = run_cli(*args, *extra, *api, env=env)
            assert proc.returncode == 0, proc.stderr.decode()
            out = proc.stdout.decode() + proc.stderr.decode()
            assert KEY not in out
            rows = [json.loads(line) for line in proc.stdout.decode().splitlines()]
            assert all(r["server"]["candidates"] == "top 100 of 49152" for r in rows)
    err = _one_sentence(run_cli(*args, env={"OPENAI_API_KEY": ""}))
    assert "no API key was given" in err


def test_serve_asks_a_keyed_server_with_the_key(keyed_server):
    """``serve`` detects the API and counts the slots (``/props``) with the key; its tabs get it
    in ``$OPENAI_API_KEY`` (``without_api_key``, tested in test_openai_serve)."""
    app_args = build_parsers()["app"].parse_args(["--server", keyed_server.url, "--api-key", KEY])
    assert remote_api(app_args) == ("native", "")
    assert remote_slots(keyed_server.url, KEY) == (2, "SmolLM2-135M-Instruct.Q4_1")
    with pytest.raises(ServerError):
        remote_slots(keyed_server.url)


COMPARE = ("compare", "-t", "2", "-p", "The cat sat on the mat.", "-fa", "off", "--json")


def test_compare_asks_a_keyed_b_with_the_key_and_never_shows_it(keyed_server):
    """``compare --vs --server URL --api-key KEY`` (or $OPENAI_API_KEY, or the flag before
    --vs): B's every /completion carries the key; stdout's JSON and stderr never do."""
    vs = ("--vs", "--server", keyed_server.url)
    runs = (
        ((*COMPARE, *vs, "--api-key", KEY), {}),
        ((*COMPARE, "--api-key", KEY, *vs), {}),
        ((*COMPARE, *vs), {"OPENAI_API_KEY": KEY}),
    )
    for args, env in runs:
        proc = run_cli(*args, env=env)
        out, err = proc.stdout.decode(), proc.stderr.decode()
        assert proc.returncode == 0, err
        assert KEY not in out and KEY not in err
        *rows, summary = [json.loads(line) for line in out.splitlines()]
        assert rows and summary["kl_is_bound"] is True and summary["b"]["remote"] is True
        assert all(r["top_b"] for r in rows)  # the server answered every position


def test_compare_without_the_key_or_with_a_bad_one_is_one_sentence(keyed_server):
    vs = ("--vs", "--server", keyed_server.url)
    err = _one_sentence(run_cli(*COMPARE, *vs, env={"OPENAI_API_KEY": ""}))
    assert "(HTTP 401)" in err and "no API key was given" in err and "--api-key" in err
    err = _one_sentence(run_cli(*COMPARE, *vs, "--api-key", "sk-wrong-key"))
    assert "refused" in err and "sk-wrong-key" not in err
    # the app's header check: a key no header can carry, refused before any model loads
    bad = KEY + "\nX-Evil: 1"
    err = _one_sentence(run_cli(*COMPARE, *vs, "--api-key", bad))
    assert "HTTP header" in err and KEY not in err and "X-Evil" not in err
    err = _one_sentence(run_cli(*COMPARE, "--vs", "-ub", "1", "--api-key", KEY))
    assert "--api-key without --server" in err and KEY not in err
