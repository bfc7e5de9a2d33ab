"""Benchmark 1: greedy generation through the engine, every per-step record computed
(top-k, probabilities, entropy, sampler stages, KV mirror check), against the bare loop.

Both keep a context alive and take turns in stretches of ``chunk`` tokens until each has made
``n``, so a neighbour's burst of load hits both alike; each pair of stretches gives a ratio and
the table shows the median ratio (and the median tokens/s of each)."""

from __future__ import annotations

import time

from tui.engine import Engine, EngineConfig, Model, SamplerSettings

from .bare import Bare
from .common import THREADS, Row, median, prompt_of


def _engine_decode(eng: Engine, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        if eng.feed(eng.sample_next()) is None:
            raise RuntimeError("engine stopped early")
    return time.perf_counter() - t0


def compare(
    model: Model, prompt: list[int], n: int = 256, chunk: int = 32, rounds: int = 3
) -> tuple[list[float], list[float]]:
    """Tokens/s of the bare loop and of the engine, one entry per stretch."""
    bare, ours = [], []
    for _ in range(rounds):
        b = Bare(model, prompt, threads=THREADS)
        eng = Engine(model, EngineConfig(n_ctx=4096, n_threads=THREADS), SamplerSettings(temp=0.0))
        try:
            eng.prefill(prompt)
            b.decode(4)
            _engine_decode(eng, 4)
            for _ in range(n // chunk):
                bare.append(chunk / b.decode(chunk))
                ours.append(chunk / _engine_decode(eng, chunk))
        finally:
            eng.close()
            b.close()
    return bare, ours


def run(model: Model, rounds: int = 3, n: int = 256) -> list[Row]:
    rows = []
    for n_prompt in (16, 1000):
        bare, ours = compare(model, prompt_of(model, n_prompt), n, rounds=rounds)
        ratio = median([o / b for o, b in zip(ours, bare, strict=True)])
        rows.append(
            Row(
                f"1. engine, {n} greedy tokens after {n_prompt}",
                f"{ratio:.3f} of bare",
                ">= 0.97",
                ratio >= 0.97,
                f"{median(ours):.1f} vs bare {median(bare):.1f} tok/s (medians of "
                f"{len(ours)} alternating 32-token stretches, {rounds} runs)",
            )
        )
    return rows


if __name__ == "__main__":
    for row in run(Model()):
        print(row)
