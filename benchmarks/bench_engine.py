"""Benchmark 1: greedy generation through the engine, every per-step record computed
(top-k, probabilities, entropy, sampler stages, KV mirror check), against the bare loop."""

from __future__ import annotations

import time

from tui.engine import Engine, EngineConfig, Model, SamplerSettings

from .bare import bare_generate
from .common import THREADS, Row, median, prompt_of


def engine_generate(model: Model, prompt: list[int], n: int, *, n_ctx: int = 4096) -> float:
    """Decode tokens/s of ``n`` greedy steps (sample_next + feed), prefill excluded."""
    eng = Engine(model, EngineConfig(n_ctx=n_ctx, n_threads=THREADS), SamplerSettings(temp=0.0))
    try:
        eng.prefill(prompt)
        t0 = time.perf_counter()
        for _ in range(n):
            if eng.feed(eng.sample_next()) is None:
                raise RuntimeError("engine stopped early")
        return n / (time.perf_counter() - t0)
    finally:
        eng.close()


def run(model: Model, rounds: int = 5, n: int = 256) -> list[Row]:
    rows = []
    for n_prompt in (16, 1000):
        prompt = prompt_of(model, n_prompt)
        bare_generate(model, prompt, 8)  # warm the mmap'd weights
        bare, ours = [], []
        for _ in range(rounds):  # alternate so drift hits both the same way
            bare.append(bare_generate(model, prompt, n))
            ours.append(engine_generate(model, prompt, n))
        b, o = median(bare), median(ours)
        rows.append(
            Row(
                f"1. engine, {n} greedy tokens after {n_prompt}",
                f"{o / b:.3f} of bare",
                ">= 0.95",
                o / b >= 0.95,
                f"{o:.1f} vs bare {b:.1f} tok/s (medians of {rounds})",
            )
        )
    return rows


if __name__ == "__main__":
    for row in run(Model()):
        print(row)
