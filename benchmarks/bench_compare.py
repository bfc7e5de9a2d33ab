"""Benchmark 14: what ``tokenstep compare`` costs against two bare llama.cpp loops.

Teacher-forced (14.1): both sides decode the same 256 tokens with a logits row on every one;
the bare pair is two contexts doing only that (``llama_decode`` of a batch with every logits
flag set, each row copied out). Lockstep adds, per position, two float64 log-softmaxes over
the 49,152 logits, the KL, two top-10s, the rank and max |Δlogit| (14.2 times that arithmetic
alone). Free-running (14.3): a step is one pick and one one-token decode per side; the bare
pair is two greedy loops (``benchmarks/bare.py``). Lockstep and bare alternate in the same run
so a busy neighbour slows both alike. Reported, no target.
"""

from __future__ import annotations

import ctypes
import time

import llama_cpp
import numpy as np

from tui.compare import divergence
from tui.compare.lockstep import DecodeSpan, LocalSide, Lockstep, SideSpec
from tui.engine import EngineConfig, Model

from .bare import Bare
from .common import THREADS, Row, median, prompt_of

N_TOKENS = 256


def _bare_rows(model: Model, tokens: list[int]) -> float:
    """Two bare contexts decode ``tokens`` with every row's logits copied; seconds."""
    n_vocab = model.info.n_vocab
    total = 0.0
    for _ in range(2):
        p = llama_cpp.llama_context_default_params()
        p.n_ctx = p.n_batch = p.n_ubatch = len(tokens)
        p.n_threads = p.n_threads_batch = THREADS
        p.no_perf = True
        ctx = llama_cpp.llama_init_from_model(model.ptr, p)
        batch = llama_cpp.llama_batch_init(len(tokens), 0, 1)
        try:
            t1 = time.perf_counter()
            for i, t in enumerate(tokens):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, i, 1
                batch.seq_id[i][0], batch.logits[i] = 0, 1
            batch.n_tokens = len(tokens)
            if llama_cpp.llama_decode(ctx, batch) != 0:
                raise RuntimeError("bare rows: llama_decode failed")
            out = np.empty((len(tokens), n_vocab), dtype=np.float32)
            ctypes.memmove(out.ctypes.data, llama_cpp.llama_get_logits(ctx), out.nbytes)
            total += time.perf_counter() - t1  # the context's creation is not the loop's cost
        finally:
            llama_cpp.llama_batch_free(batch)
            llama_cpp.llama_free(ctx)
    return total


def _lockstep(model: Model, tokens: list[int]) -> tuple[float, int]:
    config = EngineConfig(
        n_ctx=len(tokens),
        n_batch=len(tokens),
        n_ubatch=len(tokens),
        n_threads=THREADS,
        n_seq_max=1,
    )
    a = LocalSide(SideSpec("A", (), None, config), model)
    b = LocalSide(SideSpec("B", (), None, config), model)
    try:
        run = Lockstep(a, b)
        t0 = time.perf_counter()
        run.run_span(DecodeSpan(tuple(tokens), 0, 0))
        return time.perf_counter() - t0, len(run.positions)
    finally:
        a.free()
        b.free()


def run(model: Model, *, rounds: int = 3, n_steps: int = 32) -> list[Row]:
    tokens = prompt_of(model, N_TOKENS)
    lock_s, bare_s = [], []
    n_pos = N_TOKENS - 1
    for _ in range(rounds):
        s, n_pos = _lockstep(model, tokens)
        lock_s.append(s)
        bare_s.append(_bare_rows(model, tokens))
    rng = np.random.default_rng(0)
    la = rng.normal(0, 3, model.info.n_vocab).astype(np.float32)
    lb = la + rng.normal(0, 0.1, model.info.n_vocab).astype(np.float32)
    arith = []
    for _ in range(20 * rounds):
        t0 = time.perf_counter()
        divergence.compare_rows(la, lb, 7)
        arith.append(time.perf_counter() - t0)
    free_ms, bare_ms = _free(model, tokens[:32], n_steps, rounds)
    lock_pp = median(lock_s) / n_pos * 1e3
    bare_pp = median(bare_s) / n_pos * 1e3
    return [
        Row(
            "14.1 compare, teacher-forced, per position",
            f"{lock_pp:.2f} ms",
            "reported",
            None,
            f"two bare contexts, all rows: {bare_pp:.2f} ms ({lock_pp / bare_pp:.1f}x); "
            f"{n_pos} positions, median of {rounds}",
        ),
        Row(
            "14.2 compare's arithmetic per position",
            f"{median(arith) * 1e3:.2f} ms",
            "reported",
            None,
            "float64 log-softmax x2, KL, top-10 x2, rank, max |dlogit| over 49,152 ids",
        ),
        Row(
            "14.3 compare --free, per step",
            f"{free_ms:.1f} ms",
            "reported",
            None,
            f"two bare greedy loops: {bare_ms:.1f} ms ({free_ms / bare_ms:.1f}x)",
        ),
    ]


def _free(model: Model, prompt: list[int], n: int, rounds: int) -> tuple[float, float]:
    """Median ms per free-running step (both sides, greedy chains) and per step of two bare
    greedy loops."""
    from tui.compare.free import free_run
    from tui.engine import SamplerSettings

    config = EngineConfig(n_ctx=256, n_batch=256, n_ubatch=256, n_threads=THREADS, n_seq_max=1)
    greedy = SamplerSettings(temp=0.0)
    lock, bare = [], []
    for _ in range(rounds):
        a = LocalSide(SideSpec("A", (), None, config), model)
        b = LocalSide(SideSpec("B", (), None, config), model)
        try:
            t0 = time.perf_counter()
            sides = (a.describe(), b.describe())
            res = free_run(a, b, prompt, n, (greedy, greedy), lambda s=sides: s)
            lock.append((time.perf_counter() - t0) / max(1, res.summary.n))
        finally:
            a.free()
            b.free()
        pair = [Bare(model, prompt, n_ctx=256, threads=THREADS) for _ in range(2)]
        try:
            bare.append(sum(x.decode(n) for x in pair) / n)
        finally:
            for x in pair:
                x.close()
    return median(lock) * 1e3, median(bare) * 1e3
