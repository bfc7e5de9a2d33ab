"""Faults of an OpenAI-compatible server, each one sentence with the conversation kept. Real
servers for what they can send (nothing listening, llama-cpp-python's server asked for a model
it does not serve); a scripted stand-in (``openai_servers.Fake``) for a 401, a 429 with
Retry-After, a reply without logprobs, several models, and a request never answered."""

from __future__ import annotations

import pytest

from tests.support.cli import run_cli
from tests.support.llama_server import free_port
from tests.support.openai_servers import fake, llama_cpp_server  # noqa: F401  (fixtures)
from tests.support.remote import KEY, one_line_error
from tui.engine import SamplerSettings, default_model_path
from tui.engine.model.errors import TokenstepError
from tui.engine.model.local_vocab import LocalVocab
from tui.engine.remote.openai_backend import OpenAIBackend
from tui.engine.wire.remote_http import ServerError


def _backend(url: str, **kw) -> OpenAIBackend:
    return OpenAIBackend(
        url, SamplerSettings(temp=0.0), local_vocab=LocalVocab(default_model_path()), **kw
    )


def _one(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and "Traceback" not in text and text.endswith(".")
    return text


def test_nothing_listening_is_one_sentence():
    url = f"http://127.0.0.1:{free_port()}"
    err = one_line_error(run_cli("trace", "--server", url, "--api", "openai", "-p", "x"))
    assert "nothing answers at" in err and "OpenAI-compatible server" in err


def test_a_model_it_does_not_serve_lists_the_served_ones(llama_cpp_server):  # noqa: F811
    with pytest.raises(ServerError) as got:
        _backend(llama_cpp_server.url, model="no-such-model")
    text = _one(got.value)
    assert "does not serve 'no-such-model'" in text and "SmolLM2-135M-Instruct" in text


def test_several_models_and_none_given_is_one_sentence(fake):  # noqa: F811
    fake.models = ["a-model", "b-model"]
    with pytest.raises(ServerError) as got:
        _backend(fake.url)
    text = _one(got.value)
    assert "serves 2 models (a-model, b-model)" in text and "--server-model NAME" in text
    b = _backend(fake.url, model="b-model")
    b.prefill([1, 2, 3])
    assert b.records[-1].server.top_ids == [7042, 30, 260]
    b.close()


def test_a_401_is_one_sentence_and_never_echoes_the_key(fake):  # noqa: F811
    b = _backend(fake.url, api_key=KEY)
    assert fake.seen_auth[-1] == f"Bearer {KEY}"  # sent as a bearer token
    fake.status = 401
    with pytest.raises(ServerError) as got:
        b.prefill([1, 2, 3])
    text = _one(got.value)
    assert "HTTP 401" in text and "--api-key" in text and KEY not in text
    assert b.n_past == 0
    b.close()


def test_a_429_says_the_wait_keeps_the_conversation_and_retries(fake):  # noqa: F811
    b = _backend(fake.url)
    b.prefill([1, 2, 3])
    kept = list(b.tokens)
    token = b.sample().token
    fake.status, fake.headers_out = 429, {"Retry-After": "7"}
    with pytest.raises(ServerError) as got:
        b.feed(token)
    text = _one(got.value)
    assert got.value.retry and "HTTP 429" in text and "wait 7 s" in text
    assert b.tokens == kept and b.unsent_pick == token  # nothing changed; → sends it again
    fake.status = None
    b.feed(b.sample().token)
    assert b.tokens == kept + [token]
    b.close()


def test_a_reply_without_logprobs_is_one_sentence(fake):  # noqa: F811
    b = _backend(fake.url)
    fake.no_logprobs = True
    with pytest.raises(ServerError) as got:
        b.prefill([1, 2, 3])
    assert "without logprobs" in _one(got.value) and got.value.retry
    b.close()


def test_a_request_never_answered_times_out_in_one_sentence(fake):  # noqa: F811
    b = _backend(fake.url, timeout=1.0)
    b.prefill([1, 2])
    fake.hang.set()
    with pytest.raises(ServerError) as got:
        b.feed(b.sample().token)
    assert "did not answer /v1/completions within 1 s" in _one(got.value) and got.value.retry
    assert b.n_past == 2
    fake.hang.clear()
    fake.release.set()
    b.close()


def test_a_server_without_a_tokenizer_and_no_m_is_one_sentence(fake):  # noqa: F811
    with pytest.raises(TokenstepError) as got:
        OpenAIBackend(fake.url, SamplerSettings(temp=0.0))
    assert "-m PATH" in _one(got.value)


def test_the_api_key_never_reaches_a_trace_or_the_terminal(fake, tmp_path):  # noqa: F811
    """Given on the command line and in $OPENAI_API_KEY, the key is sent (the fake saw it) and
    appears nowhere in what trace writes."""
    model = str(default_model_path())
    args = ("trace", "--server", fake.url, "-m", model, "-p", "Hello", "-n", "3")
    for extra, env in ((("--api-key", KEY), {}), ((), {"OPENAI_API_KEY": KEY})):
        proc = run_cli(*args, *extra, env=env)
        assert proc.returncode == 0, proc.stderr.decode()
        out = proc.stdout.decode() + proc.stderr.decode()
        assert KEY not in out and '"top 3 of 49152"' in out
        assert fake.seen_auth[-1] == f"Bearer {KEY}"


def test_a_401_at_connect_is_the_key_s_sentence(fake):  # noqa: F811
    fake.get_status = 401
    args = ("trace", "--server", fake.url, "-m", str(default_model_path()), "-p", "x")
    err = one_line_error(run_cli(*args, "--api-key", KEY))
    assert "HTTP 401" in err and "the API key given was refused" in err and KEY not in err
    err = one_line_error(run_cli(*args, env={"OPENAI_API_KEY": ""}))
    assert "no API key was given" in err and "--api-key" in err
