"""Issue 5, claim 2: without a cache the work is quadratic (counted from the real run)."""

from __future__ import annotations

import numpy as np

from tui.engine import SamplerSettings


def test_counts_with_and_without_cache(make_engine):
    eng = make_engine(SamplerSettings(temp=0.0), n_ctx=256)
    prompt = eng.vocab.tokenize("Counting the cost of every token, one step at a time:")
    p, k = len(prompt), 12
    eng.prefill(prompt)
    for _ in range(k):
        assert eng.step() is not None
    w = eng.work
    # the cache: each token passes through the model once
    assert w.with_cache == p + k == eng.kv.used
    # no cache: every step recomputes its whole context (p+1, p+2, ..., p+k), after the prompt
    assert w.without_cache == p + sum(p + i for i in range(1, k + 1))
    assert w.ratio == w.without_cache / w.with_cache > 1
    ctx, with_c, without_c = w.series()
    assert list(ctx) == [p + i for i in range(k + 1)]
    assert np.all(np.diff(without_c) == ctx[1:])  # each step adds its context length
    assert np.all(np.diff(with_c) == 1)
    dctx, ms = w.decode_times()
    assert list(dctx) == list(ctx[1:]) and len(ms) == k
    assert [r.decode_ms for r in eng.records[1:]] == list(ms)  # measured, not modelled
    bins = w.decode_time_bins(4)
    assert sum(b.n for b in bins) == k
    assert w.ms_per_1k_context() is not None


def test_split_prompt_counts_once_and_reuse_counts_nothing(make_engine):
    """A prompt cut into n_batch calls costs its length once; reused prefix tokens cost 0."""
    eng = make_engine(n_ctx=256, n_batch=8, n_ubatch=8)
    a = eng.vocab.tokenize("A long prompt that will not fit in a single batch of eight tokens.")
    eng.sync_prompt(a)
    assert eng.work.with_cache == eng.work.without_cache == len(a)
    b = a + eng.vocab.tokenize(" And one more sentence.", add_special=False)
    eng.sync_prompt(b)
    assert eng.work.with_cache == len(b)  # only the new tokens were decoded
    assert eng.work.without_cache == len(a) + len(b)  # a cache-less loop redoes all of b
