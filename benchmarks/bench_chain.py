"""10. The whole sampler chain on the per-step path: tokenstep's stage-by-stage run (every stage
a llama_sampler_apply on the same array, with what each stage did read off) against llama.cpp's
own one-call ``llama_sampler_sample`` on one chain built with the same samplers."""

from __future__ import annotations

import ctypes
import statistics
import time

import llama_cpp

from tui.engine import Engine, EngineConfig, Model, SamplerSettings

from .common import Row

PROMPT = "one two three, one two three, one two three, one two three, one two"


def _settings(eog: list[int]) -> SamplerSettings:
    return SamplerSettings(
        temp=1.0,
        dynatemp_range=0.4,
        seed=7,
        repeat_penalty=1.3,
        frequency_penalty=0.2,
        presence_penalty=0.3,
        dry_multiplier=0.8,
        top_n_sigma=2.5,
        typical_p=0.95,
        min_p=0.02,
        xtc_probability=0.5,
        xtc_threshold=0.1,
        logit_bias=[(t, float("-inf")) for t in eog],
    )


def _oracle(eng: Engine, s: SamplerSettings) -> llama_cpp.llama_sampler_p:
    ch = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    add = llama_cpp.llama_sampler_chain_add
    bias = (llama_cpp.llama_logit_bias * len(s.logit_bias))()
    for i, (t, b) in enumerate(s.logit_bias):
        bias[i].token, bias[i].bias = t, b
    n = eng.info.n_vocab
    add(ch, llama_cpp.llama_sampler_init_logit_bias(n, len(s.logit_bias), bias))
    add(
        ch,
        llama_cpp.llama_sampler_init_penalties(
            n, s.repeat_last_n, s.repeat_penalty, s.frequency_penalty, s.presence_penalty
        ),
    )
    brk = (ctypes.c_char_p * 4)(b"\n", b":", b'"', b"*")
    add(
        ch,
        llama_cpp.llama_sampler_init_dry(
            eng.model.vocab, s.dry_multiplier, s.dry_base, s.dry_allowed_length, eng.n_ctx, brk, 4
        ),
    )
    add(ch, llama_cpp.llama_sampler_init_top_n_sigma(s.top_n_sigma))
    add(ch, llama_cpp.llama_sampler_init_top_k(s.top_k))
    add(ch, llama_cpp.llama_sampler_init_typical(s.typical_p, 1))
    add(ch, llama_cpp.llama_sampler_init_top_p(s.top_p, 1))
    add(ch, llama_cpp.llama_sampler_init_min_p(s.min_p, 1))
    add(ch, llama_cpp.llama_sampler_init_xtc(s.xtc_probability, s.xtc_threshold, 1, s.seed))
    add(ch, llama_cpp.llama_sampler_init_temp_ext(s.temp, s.dynatemp_range, s.dynatemp_exponent))
    add(ch, llama_cpp.llama_sampler_init_dist(s.seed))
    return ch


def run(model: Model, rounds: int = 3, n: int = 32) -> list[Row]:
    eog = [t for t in range(model.info.n_vocab) if llama_cpp.llama_vocab_is_eog(model.vocab, t)]
    ours_ms: list[float] = []
    theirs_ms: list[float] = []
    same = True
    for _ in range(rounds):
        s = _settings(eog)
        eng = Engine(model, EngineConfig(n_ctx=512, n_threads=2), s.copy())
        try:
            prompt = eng.vocab.tokenize(PROMPT, add_special=True)
            eng.prefill(prompt)
            ch = _oracle(eng, s)
            for t in prompt:
                llama_cpp.llama_sampler_accept(ch, t)
            for _ in range(n):
                t0 = time.perf_counter()
                want = llama_cpp.llama_sampler_sample(ch, eng.ctx, -1)
                t1 = time.perf_counter()
                got = eng.sample().token
                t2 = time.perf_counter()
                theirs_ms.append((t1 - t0) * 1e3)
                ours_ms.append((t2 - t1) * 1e3)
                same = same and got == want
                eng.feed(got)
            llama_cpp.llama_sampler_free(ch)
        finally:
            eng.close()
    a, b = statistics.median(ours_ms), statistics.median(theirs_ms)
    return [
        Row(
            "10. full sampler chain per step",
            f"{a:.2f} ms",
            "reported",
            None,
            f"stage by stage (10 stages, what each did) vs llama_sampler_sample {b:.2f} ms "
            f"({a / b:.1f}x); same tokens: {'yes' if same else 'NO'}; median of {len(ours_ms)} steps",
        )
    ]
