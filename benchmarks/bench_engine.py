"""Benchmark 1: greedy generation through the engine, every per-step record computed
(top-k, probabilities, entropy, sampler stages, KV mirror check), against the bare loop."""

from __future__ import annotations

import statistics
import time

from tui.engine import Engine, EngineConfig, Model, SamplerSettings

from .bare import bare_generate


def engine_generate(model: Model, prompt: list[int], n: int, *, n_ctx: int = 4096) -> float:
    eng = Engine(model, EngineConfig(n_ctx=n_ctx, n_threads=2), SamplerSettings(temp=0.0))
    try:
        eng.prefill(prompt)
        t0 = time.perf_counter()
        for _ in range(n):
            token = eng.sample_next()
            if eng.feed(token) is None:
                raise RuntimeError("engine stopped early")
        return n / (time.perf_counter() - t0)
    finally:
        eng.close()


def prompt_of(model: Model, n_tokens: int) -> list[int]:
    eng = Engine(model, EngineConfig(n_ctx=64, n_threads=2))
    try:
        base = eng.vocab.tokenize(
            "The history of the printing press is a story of many hands and many cities. ",
            add_special=False,
        )
    finally:
        eng.close()
    return (base * (n_tokens // len(base) + 1))[:n_tokens]


def run(model: Model, rounds: int = 3, n: int = 256) -> list[dict[str, object]]:
    rows = []
    for n_prompt in (16, 1000):
        prompt = prompt_of(model, n_prompt)
        bare, ours = [], []
        for _ in range(rounds):  # alternate so drift hits both the same way
            bare.append(bare_generate(model, prompt, n))
            ours.append(engine_generate(model, prompt, n))
        b, o = statistics.median(bare), statistics.median(ours)
        rows.append(
            {
                "benchmark": f"engine, {n} tokens after {n_prompt}-token prompt",
                "bare tok/s": round(b, 1),
                "tokenstep tok/s": round(o, 1),
                "ratio": round(o / b, 3),
                "target": ">= 0.95",
                "met": o / b >= 0.95,
            }
        )
    return rows


if __name__ == "__main__":
    for row in run(Model()):
        print(row)
