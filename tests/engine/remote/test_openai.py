"""The OpenAI-compatible backend against llama-server's own ``/v1/completions`` (the same
llama.cpp as llama-cpp-python, the bundled model). Oracles: the local engine's logits, and the
native API's ``/completion`` on the same server."""

from __future__ import annotations

import pytest

from tests.support.llama_server import llama_server  # noqa: F401  (the session fixture)
from tests.support.remote import PROMPTS, compare_distributions
from tui.engine import SamplerSettings
from tui.engine.remote.openai_backend import OpenAIBackend
from tui.engine.remote.remote import RemoteBackend
from tui.engine.run import loop
from tui.engine.wire.openai_api import detect_api


@pytest.fixture
def over_v1(llama_server):  # noqa: F811
    made: list[RemoteBackend] = []

    def make(settings: SamplerSettings | None = None, native: bool = False, **kw) -> RemoteBackend:
        cls = RemoteBackend if native else OpenAIBackend
        b = cls(llama_server.url, settings or SamplerSettings(temp=0.0), **kw)
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()


def test_llama_server_is_detected_as_native_and_takes_ids_over_v1(llama_server, over_v1):  # noqa: F811
    assert detect_api(llama_server.url) == "native"
    b = over_v1()
    assert b.ids_prompt  # llama-server's /v1 takes a list of ids as prompt
    assert b.n_probs == 20 and b.slot is None
    assert b.info.n_vocab == 49152


def test_greedy_ids_over_v1_equal_the_local_engine(make_engine, over_v1):
    eng = make_engine(SamplerSettings(temp=0.0), n_ctx=2048, flash_attn="off")
    b = over_v1()
    for text in PROMPTS:
        toks = eng.vocab.tokenize(text, add_special=True)
        eng.reset()
        b.reset()
        local = [rec.sampled for rec in loop.generate(eng, 10, toks)]
        over_http = [rec.sampled for rec in loop.generate(b, 10, toks)]
        assert over_http == local, text
        step = b.records[-1].server
        assert step.server_timings and step.warning is None
        assert step.top_of == "top 20 of 49152"


def test_top_k_logprobs_over_v1_equal_the_native_api(over_v1):
    v1 = over_v1(n_probs=20)
    native = over_v1(native=True, n_probs=20)
    for text in PROMPTS:
        toks = native.vocab.tokenize(text, add_special=True)
        v1.reset()
        native.reset()
        v1.prefill(toks)
        native.prefill(toks)
        a = v1.records[v1.logits_record].server
        n = native.records[native.logits_record].server
        assert a.top_ids == n.top_ids, text
        assert a.top_logprobs == pytest.approx(n.top_logprobs, abs=1e-6), text
        assert a.mass == pytest.approx(n.mass, abs=1e-6)


def test_a_forced_token_and_a_rewind_give_the_local_rows(make_engine, over_v1):
    eng = make_engine(SamplerSettings(temp=0.0), n_ctx=2048, flash_attn="off")
    b = over_v1(n_probs=20)
    toks = eng.vocab.tokenize("The capital of France is", add_special=True)
    for e in (eng, b):
        e.prefill(toks)
    forced = eng.vocab.tokenize(" Berlin", add_special=False)[0]
    for e in (eng, b):
        e.sample(force=forced)
        e.feed(forced)
    compare_distributions(eng, b)  # the row after the forced token
    for e in (eng, b):
        e.feed(e.sample().token)
        e.feed(e.sample().token)
    assert b.tokens == eng.tokens
    for e in (eng, b):
        assert e.rewind(2) == 2
        e.ensure_logits()
    assert b.tokens == eng.tokens == toks + [forced]
    compare_distributions(eng, b)  # the row after the rewind: asked again over /v1
    assert eng.sample().token == b.sample().token


def test_the_server_s_own_pick_over_v1_follows_the_seed(over_v1):
    settings = SamplerSettings(temp=0.8, seed=7)
    a, c = over_v1(settings, pick="server"), over_v1(SamplerSettings(temp=0.8, seed=7), pick="server")
    toks = a.vocab.tokenize("Once upon a time", add_special=True)
    picks = []
    for b in (a, c):
        b.prefill(toks)
        picks.append(b.sample().token)
        assert b.records[b.logits_record].server.server_pick == picks[-1]
    assert picks[0] == picks[1]  # one seed, one request, one pick


def test_trace_over_v1_gives_the_native_trace_s_tokens(llama_server):  # noqa: F811
    import json

    from tests.support.cli import run_cli

    args = ("trace", "--server", llama_server.url, "-p", "The cat sat", "-n", "4", "--temp", "0")
    native = run_cli(*args)
    v1 = run_cli(*args, "--api", "openai")
    assert native.returncode == 0 and v1.returncode == 0, v1.stderr.decode()
    rows = [json.loads(line) for line in v1.stdout.decode().splitlines()]
    base = [json.loads(line) for line in native.stdout.decode().splitlines()]
    assert [r.get("sampled") for r in rows] == [r.get("sampled") for r in base]
    assert all(r["server"]["candidates"] == "top 20 of 49152" for r in rows)
    assert all(r["server"]["timings_ms"]["server_prompt"] >= 0 for r in rows)  # its own timings


def test_verify_and_slot_with_the_openai_api_are_one_sentence(llama_server):  # noqa: F811
    from tests.support.cli import run_cli
    from tests.support.remote import one_line_error

    url = llama_server.url
    err = one_line_error(run_cli("verify", "--server", url, "--api", "openai", "-p", "x"))
    assert "needs a local model" in err
    err = one_line_error(run_cli("trace", "--server", url, "--api", "openai", "--slot", "1", "-p", "x"))
    assert "/v1/completions has no slots" in err


def test_a_pick_whose_survivors_reach_past_the_top_k_is_marked_approximate(over_v1):
    """No cut (top-k, top-p, min-p off) at T 1: the chain's survivors are the whole vocabulary,
    of which /v1 sent 20: the pick says it is an approximation, as over the native API."""
    b = over_v1(SamplerSettings(temp=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=3))
    b.prefill(b.vocab.tokenize("Once upon a time", add_special=True))
    b.sample()
    step = b.records[b.logits_record].server
    assert step.approx is not None and step.approx.startswith("approximation")
    assert "top 20 of 49152" in step.approx
    greedy = over_v1(SamplerSettings(temp=0.0))
    greedy.prefill(greedy.vocab.tokenize("Once upon a time", add_special=True))
    greedy.sample()
    assert greedy.records[greedy.logits_record].server.approx is None  # the argmax is inside


def test_m_over_llama_server_s_v1_is_checked_against_its_tokenizer(llama_server):  # noqa: F811
    from tui.engine import default_model_path
    from tui.engine.model.local_vocab import LocalVocab

    b = OpenAIBackend(
        llama_server.url, SamplerSettings(temp=0.0), local_vocab=LocalVocab(default_model_path())
    )
    try:
        toks = b.vocab.tokenize("The capital of France is", add_special=True)
        b.prefill(toks)
        native = b.records[-1].server
        assert b.ids_prompt and native.top_of == "top 20 of 49152"
        assert native.top_ids[0] == b.vocab.tokenize(" Paris", add_special=False)[0]
    finally:
        b.close()
