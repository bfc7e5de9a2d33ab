"""The surprise map's values, checked against outside oracles: llama-cpp-python's ``Llama`` with
``logits_all=True`` for the prompt, the step records' own top candidates (and a NumPy softmax of
the logits row) for the reply."""

from __future__ import annotations

import math

import numpy as np
import pytest
from llama_cpp import Llama

from tests.support.oracles import logits_oracle
from tui.engine import SamplerSettings
from tui.engine.record.surprise import along, perplexity
from tui.engine.sampler.sampling import softmax

PROMPT = "Once upon a time, in a small village, there lived an old baker who"


@pytest.fixture(scope="module")
def oracle(model_path):
    llm = logits_oracle(model_path, 512)
    yield llm
    llm.close()


def _llama_probs(llm: Llama, toks: list[int]) -> list[float]:
    llm.reset()
    llm.eval(toks)
    scores = np.asarray(llm.scores[: llm.n_tokens], dtype=np.float64)
    out = []
    for i in range(1, len(toks)):
        row = scores[i - 1] - scores[i - 1].max()
        out.append(float(np.exp(row[toks[i]]) / np.exp(row).sum()))
    return out


@pytest.mark.parametrize("n_batch", [512, 5], ids=["one-call", "five-token-calls"])
def test_prompt_probabilities_equal_llama_logits_all(oracle, make_engine, n_batch):
    eng = make_engine(flash_attn="off", n_batch=n_batch, n_ubatch=min(n_batch, 512))
    eng.score_prompt = True
    toks = eng.vocab.tokenize(PROMPT)
    recs = eng.prefill(toks)
    ours = along(eng.run, eng.surprise, eng.tokens)
    assert ours[0] is None  # nothing comes before the first token
    assert all(s is not None and s.prompt and s.p_final is None for s in ours[1:])
    theirs = _llama_probs(oracle, toks)
    tol = 1e-4 if n_batch == 512 else 2e-3  # other ubatch sizes round differently
    for i, (s, q) in enumerate(zip(ours[1:], theirs, strict=True)):
        assert s is not None
        assert abs(s.p - q) < tol, (i + 1, s.p, q)
    # the extra rows asked for: every prompt token's but the last
    assert sum(r.scored_rows for r in recs) == len(toks) - 1
    want_ppl = math.exp(-np.mean(np.log(theirs)))
    got = perplexity([s.p for s in ours[1:] if s is not None])
    assert got is not None and abs(got - want_ppl) / want_ppl < 1e-2


def test_prompt_is_not_scored_when_the_map_is_off(make_engine):
    eng = make_engine()
    recs = eng.prefill(eng.vocab.tokenize(PROMPT))
    assert all(s is None for s in along(eng.run, eng.surprise, eng.tokens))
    assert all(r.scored_rows == 0 for r in recs)
    assert sum(t.logits for r in recs for t in r.call.tokens) == 1


def test_reply_values_equal_the_step_records(make_engine):
    eng = make_engine(SamplerSettings(temp=0.8, seed=7))
    toks = eng.vocab.tokenize(PROMPT)
    eng.prefill(toks)
    logits_before: list[np.ndarray] = []
    sources = []
    for _ in range(6):
        assert eng.logits is not None
        logits_before.append(eng.logits.copy())
        sources.append(eng.records[eng.logits_record])
        eng.step()
    # a forced token far down the distribution: its p needs the full softmax
    assert eng.logits is not None
    row = eng.logits.copy()
    rare = int(np.argsort(row)[len(row) // 2])
    eng.step(force=rare)
    vals = along(eng.run, eng.surprise, eng.tokens)
    n = len(toks)
    for k, rec in enumerate(sources):
        s = vals[n + k]
        assert s is not None and not s.prompt
        assert rec.sampled == s.token
        top_p = (
            next(c.p for c in rec.top if c.id == s.token)
            if any(c.id == s.token for c in rec.top)
            else float(softmax(logits_before[k])[s.token])
        )
        assert s.p == pytest.approx(top_p, abs=1e-9)
        assert s.entropy == pytest.approx(rec.entropy)
        assert rec.chain is not None and s.p_final == pytest.approx(rec.chain.p_final(s.token))
    forced = vals[n + 6]
    assert forced is not None and forced.token == rare
    assert forced.p == pytest.approx(float(softmax(row)[rare]), rel=1e-6)
    assert forced.p_final == 0.0  # the chain cut a token from the middle of the vocabulary


def test_rewind_forgets_the_removed_tokens_values(make_engine):
    eng = make_engine()
    eng.score_prompt = True
    eng.prefill(eng.vocab.tokenize(PROMPT))
    for _ in range(4):
        eng.step()
    n, removed = eng.n_past, eng.tokens[-2:]
    eng.rewind(2)
    assert len(along(eng.run, eng.surprise, eng.tokens)) == n - 2
    # the record dropped the removed tokens' picks: none is left at their indices
    assert eng.run.pick_at(n - 2, removed[0]) is None and eng.run.pick_at(n - 1, removed[1]) is None
    assert eng.run.pick_at(n - 3, eng.tokens[-1]) is not None
