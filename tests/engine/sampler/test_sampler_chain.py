"""Issue 12: the whole sampler chain, stage by stage, against llama.cpp's own one-call chain.

Oracles we did not write: a single ``llama_sampler_chain`` built from llama.cpp's samplers in
the same order (the prompt accepted first, then ``llama_sampler_sample`` each step, which
accepts the pick as llama-server does); NumPy recomputation of the penalty formulas; a fresh
run to the point a rewind went back to."""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np
import pytest

from tui.engine import SamplerSettings
from tui.engine.sampler.sampler_settings import parse_sampling_seq

PROMPT = "one two three, one two three, one two three, one two three, one two"
BREAKERS = [b"\n", b":", b'"', b"*"]


def _add(chain, smpl) -> None:
    llama_cpp.llama_sampler_chain_add(chain, smpl)


def oracle_chain(eng, s: SamplerSettings):
    """llama.cpp's chain as common_sampler_init builds it, from the raw C API."""
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    n_vocab, vocab = eng.info.n_vocab, eng.model.vocab
    if s.logit_bias:
        arr = (llama_cpp.llama_logit_bias * len(s.logit_bias))()
        for i, (t, b) in enumerate(s.logit_bias):
            arr[i].token, arr[i].bias = t, b
        _add(chain, llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(s.logit_bias), arr))
    if s.mirostat == 2:
        _add(chain, llama_cpp.llama_sampler_init_temp(s.temp))
        _add(
            chain, llama_cpp.llama_sampler_init_mirostat_v2(s.seed, s.mirostat_tau, s.mirostat_eta)
        )
        return chain
    for name in s.samplers:
        if name == "penalties":
            _add(
                chain,
                llama_cpp.llama_sampler_init_penalties(
                    n_vocab,
                    s.repeat_last_n,
                    s.repeat_penalty,
                    s.frequency_penalty,
                    s.presence_penalty,
                ),
            )
        elif name == "dry":
            arr = (ctypes.c_char_p * 4)(*BREAKERS)
            last_n = eng.n_ctx if s.dry_penalty_last_n == -1 else s.dry_penalty_last_n
            _add(
                chain,
                llama_cpp.llama_sampler_init_dry(
                    vocab, s.dry_multiplier, s.dry_base, s.dry_allowed_length, last_n, arr, 4
                ),
            )
        elif name == "top_n_sigma":
            _add(chain, llama_cpp.llama_sampler_init_top_n_sigma(s.top_n_sigma))
        elif name == "top_k":
            _add(chain, llama_cpp.llama_sampler_init_top_k(s.top_k))
        elif name == "typ_p":
            _add(chain, llama_cpp.llama_sampler_init_typical(s.typical_p, 1))
        elif name == "top_p":
            _add(chain, llama_cpp.llama_sampler_init_top_p(s.top_p, 1))
        elif name == "min_p":
            _add(chain, llama_cpp.llama_sampler_init_min_p(s.min_p, 1))
        elif name == "xtc":
            _add(
                chain,
                llama_cpp.llama_sampler_init_xtc(s.xtc_probability, s.xtc_threshold, 1, s.seed),
            )
        elif name == "temperature":
            _add(
                chain,
                llama_cpp.llama_sampler_init_temp_ext(
                    s.temp, s.dynatemp_range, s.dynatemp_exponent
                ),
            )
    _add(chain, llama_cpp.llama_sampler_init_dist(s.seed))
    return chain


def eog_tokens(model) -> list[int]:
    return [t for t in range(model.info.n_vocab) if llama_cpp.llama_vocab_is_eog(model.vocab, t)]


def all_on(**kw) -> SamplerSettings:
    base = dict(
        temp=1.0,
        dynatemp_range=0.4,
        dynatemp_exponent=1.3,
        seed=7,
        repeat_penalty=1.3,
        frequency_penalty=0.2,
        presence_penalty=0.3,
        repeat_last_n=64,
        dry_multiplier=0.8,
        dry_base=1.75,
        dry_allowed_length=2,
        dry_penalty_last_n=-1,
        top_n_sigma=2.5,
        top_k=40,
        typical_p=0.95,
        top_p=0.95,
        min_p=0.02,
        xtc_probability=0.5,
        xtc_threshold=0.1,
    )
    base.update(kw)
    return SamplerSettings(**base)  # type: ignore[arg-type]


CHAINS = {
    "all-on": all_on(),
    "reordered": all_on(samplers=parse_sampling_seq("ktmexypds")),
    "mirostat-2": SamplerSettings(temp=0.9, mirostat=2, mirostat_tau=3.0, mirostat_eta=0.2, seed=3),
}


@pytest.mark.parametrize("name", list(CHAINS))
def test_stage_by_stage_equals_llama_cpps_one_chain_for_48_steps(make_engine, model, name):
    s = CHAINS[name].copy()
    # -l EOG-inf for every end-of-generation token, so all 48 steps are taken
    s.logit_bias = [(t, -np.inf) for t in eog_tokens(model)]
    eng = make_engine(s.copy())
    prompt = eng.vocab.tokenize(PROMPT, add_special=True)
    eng.prefill(prompt)
    chain = oracle_chain(eng, s)
    try:
        for t in prompt:  # llama-server accepts the prompt before the first pick
            llama_cpp.llama_sampler_accept(chain, t)
        ours, theirs, fired = [], [], set()
        for _ in range(48):
            want = llama_cpp.llama_sampler_sample(chain, eng.ctx, -1)  # samples and accepts
            sampled = eng.sample()
            ours.append(sampled.token)
            theirs.append(want)
            fired |= {st.key for st in sampled.chain.stages if st.changed or st.removed}
            if sampled.eog or ours[-1] != want:
                break
            assert eng.feed(sampled.token) is not None
    finally:
        llama_cpp.llama_sampler_free(chain)
    assert ours == theirs
    assert len(ours) == 48
    if name == "all-on":
        assert {"penalties", "dry", "xtc"} <= fired  # the history samplers and XTC did act
    elif name == "reordered":
        assert "penalties" in fired
    else:
        mus = sampled.chain.mu
        assert mus is not None and mus != pytest.approx(2 * s.mirostat_tau)


def test_penalties_equal_numpy_recomputation(make_engine):
    s = SamplerSettings(
        temp=0.8,
        repeat_penalty=1.25,
        frequency_penalty=0.15,
        presence_penalty=0.4,
        repeat_last_n=24,
        seed=5,
    )
    eng = make_engine(s)
    eng.prefill(eng.vocab.tokenize(PROMPT, add_special=True))
    for _ in range(6):
        res = eng.preview()
        pen = res.stages[0]
        assert pen.key == "penalties"
        x = eng.logits.astype(np.float64)
        window = eng.tokens[-24:]
        want = {}
        for t in set(window):
            c = window.count(t)
            v = x[t] / 1.25 if x[t] > 0 else x[t] * 1.25
            want[t] = v - c * 0.15 - 0.4
        got = {t: b for t, _, b in pen.changed}
        assert set(got) == set(want)
        for t, v in want.items():
            assert got[t] == pytest.approx(v, abs=1e-4)
        assert eng.step() is not None


def test_rewind_then_restep_equals_a_fresh_run(make_engine):
    s = all_on(seed=11)
    a = make_engine(s.copy())
    a.prefill(a.vocab.tokenize(PROMPT, add_special=True))
    for _ in range(14):
        assert a.step() is not None
    a.rewind(6)
    after_rewind = a.preview()
    b = make_engine(s.copy())
    b.prefill(b.vocab.tokenize(PROMPT, add_special=True))
    for _ in range(8):
        assert b.step() is not None
    assert a.tokens == b.tokens
    fresh = b.preview()
    assert after_rewind.final_ids.tolist() == fresh.final_ids.tolist()
    np.testing.assert_array_equal(after_rewind.final_p, fresh.final_p)
    for x, y in zip(after_rewind.stages, fresh.stages, strict=True):
        assert (x.key, x.changed, x.n) == (y.key, y.changed, y.n)
