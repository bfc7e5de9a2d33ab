"""The remote backend against a REAL llama-server (the same llama.cpp as llama-cpp-python, the
bundled model, flash attention off on both sides). Oracles: the local engine's logits, and
llama.cpp's own sampler chain (``llama_sampler_chain_*``) run on the local context."""

from __future__ import annotations

import ctypes
import math

import llama_cpp
import numpy as np
import pytest

from tests.support.llama_server import llama_server  # noqa: F401  (the session fixture)
from tests.support.remote import PROMPTS, compare_distributions
from tui.engine import SamplerSettings
from tui.engine.remote.remote import RemoteBackend
from tui.engine.run import loop
from tui.engine.sampler.sampling import softmax
from tui.engine.wire.remote_step import chain_exactness


@pytest.fixture
def remote(llama_server):  # noqa: F811
    made: list[RemoteBackend] = []

    def make(settings: SamplerSettings | None = None, **kw) -> RemoteBackend:
        r = RemoteBackend(llama_server.url, settings or SamplerSettings(temp=0.0), **kw)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def _local_tokens(eng, text: str) -> list[int]:
    return eng.vocab.tokenize(text, add_special=True)


def test_greedy_ids_over_http_equal_the_local_engine(make_engine, remote):
    eng = make_engine(SamplerSettings(temp=0.0), n_ctx=2048, flash_attn="off")
    r = remote()
    for text in PROMPTS:
        toks = _local_tokens(eng, text)
        assert r.vocab.tokenize(text, add_special=True) == toks  # the server's tokenizer
        eng.reset()
        r.reset()
        local = [rec.sampled for rec in loop.generate(eng, 12, toks)]
        over_http = [rec.sampled for rec in loop.generate(r, 12, toks)]
        assert over_http == local, text


def test_top_k_probabilities_equal_the_local_p(make_engine, remote):
    eng = make_engine(SamplerSettings(temp=0.0), n_ctx=2048, flash_attn="off")
    r = remote(n_probs=100)
    for text in PROMPTS:
        toks = _local_tokens(eng, text)
        eng.reset()
        r.reset()
        eng.sync_prompt(toks)
        r.sync_prompt(toks, reuse=False)  # one batch on both sides: the same arithmetic
        compare_distributions(eng, r)
        rec = r.records[-1]
        assert rec.server.n_top == 100 and rec.server.top_of == "top 100 of 49152"
        assert rec.server.prompt_n == len(toks) and rec.server.cache_n == 0
        # every candidate shown carries the exact probability the server sent
        for c in rec.top:
            assert c.p == pytest.approx(math.exp(c.logit), rel=1e-5)


def test_a_forced_token_and_a_rewind_give_the_local_distribution(make_engine, remote):
    eng = make_engine(SamplerSettings(temp=0.0), n_ctx=2048, flash_attn="off")
    r = remote()
    toks = _local_tokens(eng, "The best thing about the sea is")
    eng.sync_prompt(toks)
    r.sync_prompt(toks)
    second = int(np.argsort(-eng.logits)[1])  # force the runner-up, not the greedy pick
    assert loop.advance(eng, second).record is not None
    rec = loop.advance(r, second).record
    assert rec is not None and rec.call.tokens[0].id == second
    compare_distributions(eng, r)
    for _ in range(3):
        loop.advance(eng)
        loop.advance(r)
    assert r.tokens == eng.tokens
    n = r.n_past
    assert eng.rewind(2) == r.rewind(2) == 2
    a, b = loop.advance(eng), loop.advance(r)
    assert a.token == b.token
    compare_distributions(eng, r)
    # the shorter prefix was resent: the server found n - 2 tokens cached, evaluated one
    assert b.record is not None and b.record.server is not None
    assert b.record.server.prompt_tokens == n - 1
    assert (b.record.server.cache_n, b.record.server.prompt_n) == (n - 2, 1)
    assert b.record.reused == n - 2


def _llama_cpp_chain(s: SamplerSettings) -> llama_cpp.llama_sampler_p:
    """llama.cpp's own chain (what common_sampler builds for these four samplers)."""
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    for smpl in (
        llama_cpp.llama_sampler_init_top_k(s.top_k),
        llama_cpp.llama_sampler_init_top_p(s.top_p, 1),
        llama_cpp.llama_sampler_init_min_p(s.min_p, 1),
        llama_cpp.llama_sampler_init_temp(s.temp),
        llama_cpp.llama_sampler_init_dist(s.seed),
    ):
        llama_cpp.llama_sampler_chain_add(chain, smpl)
    return chain


def _local_chain_picks(eng, toks: list[int], s: SamplerSettings, n: int, *, restart: bool):
    """Tokens picked by llama.cpp's chain on the local context; with ``restart`` a new chain
    (a new RNG) for every token, as llama-server builds one for every request."""
    eng.reset()
    eng.prefill(toks)
    chain = _llama_cpp_chain(s)
    picks = []
    try:
        for _ in range(n):
            if restart:
                llama_cpp.llama_sampler_free(chain)
                chain = _llama_cpp_chain(s)
            tok = int(llama_cpp.llama_sampler_sample(chain, eng.ctx, -1))
            picks.append(tok)
            if eng.vocab.is_eog(tok):
                break
            eng.feed(tok)
    finally:
        llama_cpp.llama_sampler_free(chain)
    return picks


def test_seeded_picks_over_http_equal_llama_cpp_chain_run_locally(make_engine, remote):
    s = SamplerSettings(temp=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=5)
    eng = make_engine(s.copy(), n_ctx=2048, flash_attn="off")
    toks = _local_tokens(eng, "Once upon a time, in a small village,")
    expected = _local_chain_picks(eng, toks, s, 24, restart=False)
    r = remote(s.copy())
    got = [rec.sampled for rec in loop.generate(r, len(expected), toks)]
    assert got == expected
    # top-k 40 inside the top 100: every pick was exact, and the records say so
    assert all(rec.server.approx is None for rec in r.records if rec.sampled is not None)


def test_the_servers_own_pick_restarts_its_rng_every_request(make_engine, remote):
    s = SamplerSettings(temp=1.0, top_k=40, top_p=1.0, min_p=0.0, seed=7)
    eng = make_engine(s.copy(), n_ctx=2048, flash_attn="off")
    toks = _local_tokens(eng, "My favourite colour is")
    restarted = _local_chain_picks(eng, toks, s, 16, restart=True)
    r = remote(s.copy(), pick="server")
    got = [rec.sampled for rec in loop.generate(r, len(restarted), toks)]
    assert got == restarted
    assert all(rec.server.pick == "server" for rec in r.records if rec.sampled is not None)


def test_the_approximation_is_named_when_the_chain_reaches_past_the_top_k():
    probs = [0.5, 0.2, 0.1] + [0.01] * 5
    wide = SamplerSettings(top_k=0, top_p=0.99, min_p=0.0)
    note = chain_exactness(wide, probs, 1000)
    assert note is not None and "top 8 of 1000" in note and "less than top-p 0.99" in note
    assert chain_exactness(SamplerSettings(top_k=5), probs, 1000) is None
    assert chain_exactness(SamplerSettings(top_k=0, top_p=0.8, min_p=0.0), probs, 1000) is None
    assert chain_exactness(SamplerSettings(top_k=0, top_p=1.0, min_p=0.05), probs, 1000) is None
    assert chain_exactness(SamplerSettings(temp=0.0, top_k=0), probs, 1000) is None


def test_the_filled_row_keeps_every_top_k_probability_exact():
    from tui.engine.wire.remote_step import fill_row

    lps = [math.log(0.5), math.log(0.25), math.log(0.05)]
    row, mass = fill_row([3, 7, 1], lps, 100)
    p = softmax(row)
    assert mass == pytest.approx(0.8)
    assert p[[3, 7, 1]] == pytest.approx([0.5, 0.25, 0.05], abs=1e-6)
    rest = np.delete(row, [1, 3, 7])
    assert rest.max() < row[1]  # the stand-ins never outrank a real candidate
    assert ctypes.sizeof(ctypes.c_float) == row.itemsize


def test_trace_over_http_marks_every_figure_that_comes_from_the_top_k(llama_server):  # noqa: F811
    from tests.support.cli import run_cli

    out = run_cli("trace", "--server", llama_server.url, "-p", "The cat sat", "-n", "3")
    assert out.returncode == 0, out.stderr.decode()
    import json

    recs = [json.loads(line) for line in out.stdout.decode().splitlines()]
    assert len(recs) == 3 and recs[0]["phase"] == "prefill"
    for r in recs:
        srv = r["server"]
        assert srv["candidates"] == "top 100 of 49152"
        assert "known up to a constant" in srv["logits"]
        assert all("logprob" in c and "logit" not in c for c in r["top"])
        assert srv["pick"] == "tokenstep" and srv["pick_exact"] is True  # top-k 40 of 100
        assert r["kv"]["bytes"] is None  # not known over HTTP (not 0)
        assert srv["timings_ms"]["round_trip"] >= srv["timings_ms"]["server_prompt"]
    assert recs[1]["server"]["cached"] == 3 and recs[1]["server"]["evaluated"] == 1
    out = run_cli(
        "trace", "--server", llama_server.url, "-p", "The cat", "-n", "2", "--pick", "server"
    )
    assert out.returncode == 0, out.stderr.decode()
    note = json.loads(out.stdout.decode().splitlines()[0])["server"]["pick_note"]
    assert "RNG restarts at each step" in note
