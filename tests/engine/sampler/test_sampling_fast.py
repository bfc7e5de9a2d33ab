"""The per-step shortcuts (block-maximum top-k, one-pass entropy) against the plain NumPy
computations they replace: a full stable sort, a float64 softmax and a sum of p·log2 p."""

from __future__ import annotations

import numpy as np
import pytest

from tui.engine import SamplerSettings
from tui.engine.sampler.sampling import entropy_bits, softmax, top_k_by_logit, top_stats


def _check(logits: np.ndarray, k: int = 10) -> None:
    ids, p, h = top_stats(logits, k)
    full = softmax(logits)
    assert list(ids) == list(np.argsort(-logits, kind="stable")[:k])
    assert list(top_k_by_logit(logits, k)) == list(ids)
    np.testing.assert_allclose(p, full[ids], rtol=1e-5, atol=1e-12)
    assert h == pytest.approx(entropy_bits(full), rel=1e-5, abs=1e-6)


def test_real_logits_rows(make_engine):
    eng = make_engine()
    eng.prefill(eng.vocab.tokenize("The capital of France is"))
    assert eng.logits is not None
    _check(eng.logits)
    for _ in range(3):
        eng.feed(eng.sample().token)
        _check(eng.logits)
        rec = eng.records[-1]
        assert [c.id for c in rec.top] == list(np.argsort(-eng.logits, kind="stable")[:10])


@pytest.mark.parametrize("scale", [0.01, 1.0, 8.0, 60.0])
@pytest.mark.parametrize("n", [7, 300, 49152, 49153])
def test_synthetic_rows_with_ties_and_minus_inf(scale, n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * scale).astype(np.float32)
    if n > 20:
        x[rng.integers(0, n, 12)] = x.max()  # ties at the top go to the lower id
        x[rng.integers(0, n, 3)] = -np.inf  # masked tokens
    _check(x)
    _check(x, k=1)


def test_nan_falls_back_to_a_full_sort():
    x = np.arange(1000, dtype=np.float32)
    x[5] = np.nan
    assert list(top_k_by_logit(x, 3)) == list(np.argsort(-x, kind="stable")[:3])


@pytest.mark.parametrize(
    "settings",
    [
        SamplerSettings(temp=0.8),
        SamplerSettings(temp=1.0, top_k=0, top_p=1.0, min_p=0.0),
        SamplerSettings(temp=0.7, top_k=0, top_p=0.9, min_p=0.0),
        SamplerSettings(temp=0.7, top_k=5, top_p=0.5, min_p=0.2),
        SamplerSettings(temp=0.0),
    ],
)
def test_batched_cut_by_and_p_final_equal_the_per_token_answers(make_engine, settings):
    """The trace (and the record log's spill) use the batched forms for the top candidates."""
    eng = make_engine(settings)
    eng.prefill(eng.vocab.tokenize("Once upon a time", add_special=True))
    for _ in range(12):
        eng.step()
    for rec in list(eng.records)[:-1]:  # the last one has no pick yet
        chain = rec.chain
        assert chain is not None
        ids = [c.id for c in rec.top] + [0, 5, 100, eng.info.n_vocab - 1]
        assert chain.cut_by_many(ids) == [chain.cut_by(t) for t in ids]
        assert chain.p_final_many(ids) == [chain.p_final(t) for t in ids]
