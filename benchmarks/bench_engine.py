"""Benchmark 1: greedy generation through the engine, every per-step record computed
(top-k, probabilities, entropy, sampler stages, KV mirror check), against the bare loop. As
``tokenstep trace`` runs it: a step's views on the observation thread while the next decode
runs (``Engine.observe_off_thread``), every record complete when a stretch's time stops.

Both keep a context alive and take turns in stretches of ``chunk`` tokens until each has made
``n``, so a neighbour's burst of load hits both alike; each pair of stretches gives a ratio and
the table shows the median ratio (and the median tokens/s of each)."""

from __future__ import annotations

import time

from tui.engine import Engine, EngineConfig, Model, SamplerSettings

from .bare import Bare
from .common import THREADS, Row, median, prompt_of


def _engine_decode(eng: Engine, n: int, outside: list[float] | None = None) -> float:
    """Seconds for ``n`` tokens; appends to ``outside`` the ms per token spent outside
    llama_decode (the step's wall time less the records' own decode_ms): the engine's
    bookkeeping, a figure that moves far less with the machine's load than the ratio."""
    t0 = time.perf_counter()
    decode_ms = 0.0
    for _ in range(n):
        rec = eng.feed(eng.sample().token)
        if rec is None:
            raise RuntimeError("engine stopped early")
        decode_ms += rec.decode_ms
    eng.overlap.settle()  # the stretch ends when its records are complete
    took = time.perf_counter() - t0
    if outside is not None:
        outside.append((took * 1000.0 - decode_ms) / n)
    return took


class _DecodeCPU:
    """An observer summing this thread's CPU time inside llama_decode (the observers bracket
    the call), so the CPU time of the rest of a step, the engine's bookkeeping, can be told
    apart on a loaded machine: CPU time does not grow when the scheduler takes the core."""

    def __init__(self) -> None:
        self.inside = 0.0
        self._t0 = 0.0

    def configure(self, params: object) -> None:
        pass

    def before_decode(self, engine: object, call: object) -> None:
        self._t0 = time.thread_time()

    def after_decode(self, engine: object, call: object, extras: dict[str, object]) -> None:
        self.inside += time.thread_time() - self._t0


def bookkeeping_cpu_ms(model: Model, prompt: list[int], n: int = 128) -> float:
    """CPU ms a token outside llama_decode on the engine's thread (median of 4 stretches)."""
    cpu = _DecodeCPU()
    eng = Engine(
        model, EngineConfig(n_ctx=4096, n_threads=THREADS), SamplerSettings(temp=0.0), [cpu]
    )
    out = []
    eng.overlap.start()  # as observe_off_thread; this observer only reads the clock
    try:
        eng.prefill(prompt)
        for _ in range(4):
            cpu.inside, t0 = 0.0, time.thread_time()
            for _ in range(n // 4):
                eng.feed(eng.sample().token)
            eng.overlap.settle()
            out.append((time.thread_time() - t0 - cpu.inside) * 1000.0 / (n // 4))
    finally:
        eng.close()
    return median(out)


def compare(
    model: Model,
    prompt: list[int],
    n: int = 256,
    chunk: int = 32,
    rounds: int = 3,
    outside: list[float] | None = None,
) -> tuple[list[float], list[float]]:
    """Tokens/s of the bare loop and of the engine, one entry per stretch."""
    bare, ours = [], []
    for _ in range(rounds):
        b = Bare(model, prompt, threads=THREADS)
        eng = Engine(model, EngineConfig(n_ctx=4096, n_threads=THREADS), SamplerSettings(temp=0.0))
        eng.observe_off_thread(True)
        try:
            eng.prefill(prompt)
            b.decode(4)
            _engine_decode(eng, 4)
            for _ in range(n // chunk):
                bare.append(chunk / b.decode(chunk))
                ours.append(chunk / _engine_decode(eng, chunk, outside))
        finally:
            eng.close()
            b.close()
    return bare, ours


def run(model: Model, rounds: int = 3, n: int = 256) -> list[Row]:
    rows = []
    for n_prompt in (16, 1000):
        outside: list[float] = []
        bare, ours = compare(model, prompt_of(model, n_prompt), n, rounds=rounds, outside=outside)
        ratio = median([o / b for o, b in zip(ours, bare, strict=True)])
        cpu = bookkeeping_cpu_ms(model, prompt_of(model, n_prompt))
        rows.append(
            Row(
                f"1. engine, {n} greedy tokens after {n_prompt}",
                f"{ratio:.3f} of bare",
                ">= 0.97",
                ratio >= 0.97,
                f"{median(ours):.1f} vs bare {median(bare):.1f} tok/s (medians of "
                f"{len(ours)} alternating 32-token stretches, {rounds} runs); "
                f"outside llama_decode a token: {median(outside):.3f} ms wall, {cpu:.3f} ms "
                "CPU on the decode thread",
            )
        )
    return rows


if __name__ == "__main__":
    for row in run(Model()):
        print(row)
