"""The bare loop every benchmark compares against: the minimal llama-cpp-python low-level loop
(llama_batch_get_one, llama_decode, llama_get_logits_ith, argmax), nothing else."""

from __future__ import annotations

import time

import llama_cpp
import numpy as np

from tui.engine import Model


class Bare:
    """A context of its own, prefilled with ``prompt``, that decodes greedy tokens on demand
    (so a benchmark can alternate short stretches of it with tokenstep)."""

    def __init__(self, model: Model, prompt: list[int], *, n_ctx: int = 4096, threads: int = 2):
        p = llama_cpp.llama_context_default_params()
        p.n_ctx = n_ctx
        p.n_batch = 2048
        p.n_ubatch = 512
        p.n_threads = p.n_threads_batch = threads
        p.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(model.ptr, p)
        self.n_vocab = model.info.n_vocab
        self.tok = (llama_cpp.llama_token * 1)()
        arr = (llama_cpp.llama_token * len(prompt))(*prompt)
        if llama_cpp.llama_decode(self.ctx, llama_cpp.llama_batch_get_one(arr, len(prompt))):
            raise RuntimeError("bare loop: prefill failed")

    def decode(self, n: int) -> float:
        """Greedy-generate ``n`` tokens; returns seconds taken."""
        ctx, tok, n_vocab = self.ctx, self.tok, self.n_vocab
        t0 = time.perf_counter()
        for _ in range(n):
            logits = np.ctypeslib.as_array(
                llama_cpp.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)
            )
            tok[0] = int(np.argmax(logits))
            if llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(tok, 1)) != 0:
                raise RuntimeError("bare loop: llama_decode failed")
        return time.perf_counter() - t0

    def close(self) -> None:
        if self.ctx:
            llama_cpp.llama_free(self.ctx)
            self.ctx = None


def bare_generate(
    model: Model, prompt: list[int], n: int, *, n_ctx: int = 4096, threads: int = 2
) -> float:
    """Greedy-generate ``n`` tokens after ``prompt``; returns decode tokens/s (prefill excluded)."""
    b = Bare(model, prompt, n_ctx=n_ctx, threads=threads)
    try:
        return n / b.decode(n)
    finally:
        b.close()
