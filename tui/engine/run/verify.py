"""Is the KV cache exact? Recompute from scratch and compare.

:class:`Verifier` owns a second ``llama_context`` with the engine's settings, sharing no cells
and cleared before every check. ``batched`` recomputes the context in as few decodes as
``-b`` allows (a loop without a cache); ``replay`` makes the engine's own decode calls again.
Measured on an AVX2 build with SmolLM2 Q4_1, 19 tokens: with flash attention on, batched and
one-token steps are bit-identical (the fused kernel takes each query row alone); off, the
plain matrix products change with the batch shape and the logits move by up to 0.6 (mean
0.07), enough to swap two leading tokens 0.3 apart. So a batched top-1 flip is rounding at a
near tie; ``replay`` must be bit-identical, and that is the cache's check.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING

import llama_cpp
import numpy as np

from ..model import interrupt, kv_order
from ..model.context import FLASH_ATTN, init_context
from ..model.errors import TokenstepError
from ..sampler.sampling import top_k_by_logit
from .batch import BatchToken, DecodeCall, LlamaBatch, plan_prompt, ubatch_chunks
from .logits import TOP_N, read_row

if TYPE_CHECKING:
    from .parts import VerifyParts

MODES = ("batched", "replay")


@dataclass
class VerifyResult:
    mode: str
    seq: int
    record: int | None  # the StepRecord whose logits were checked
    n_tokens: int  # tokens recomputed
    n_calls: int  # llama_decode calls the recomputation made
    max_abs_diff: float
    mean_abs_diff: float
    top1_cached: int
    top1_fresh: int
    top10_cached: list[int]
    top10_fresh: list[int]
    recompute_ms: float
    flash_attn: str
    shifted: bool  # the context was shifted: cached keys were re-rotated, not recomputed
    cached_calls: tuple[int, ...] = ()  # tokens per engine call that wrote the cached cells
    # the sequence's llama.cpp cells in position order, as the fresh context writes them
    # (None: not known); see kv_order
    cells_in_order: bool | None = None

    @property
    def top1_agree(self) -> bool:
        return self.top1_cached == self.top1_fresh

    @property
    def top10_order_agree(self) -> bool:
        return self.top10_cached == self.top10_fresh

    @property
    def top10_same_rank(self) -> int:
        """How many of the ten ranks hold the same token in both."""
        return sum(a == b for a, b in zip(self.top10_cached, self.top10_fresh, strict=False))

    @property
    def exact(self) -> bool:
        return self.max_abs_diff == 0.0

    def explain(self) -> str:
        """Why the numbers are what they are, in one or two sentences."""
        if self.exact:
            return (
                "bit-identical: the fresh context ran the same kernels on the same numbers, "
                "so the cached keys and values were exactly what recomputation gives."
            )
        calls = self.cached_calls
        single = sum(1 for n in calls if n == 1)
        how = (
            f"the cached run wrote these {sum(calls)} tokens in {len(calls)} llama_decode "
            f"call(s), {single} of them one-token steps; the fresh one made {self.n_calls}"
            if calls
            else f"the fresh context made {self.n_calls} llama_decode call(s)"
        )
        if self.shifted and self.mode == "batched":
            why = (
                f"{how}. After a context shift the kept cells hold keys and values computed "
                "while the forgotten tokens were still in the context, then rotated to their "
                "new positions; the fresh context never saw those tokens, so it computes "
                "something else, not a rounding of the same thing"
            )
        elif self.mode != "batched":
            why = f"{how}, and the replay could not take exactly the engine's path"
        elif single:
            why = (
                f"{how}. Batched (matrix-matrix) and single-row kernels add the same products "
                "in another order, and the rounding differences grow layer by layer"
            )
        else:
            why = (
                f"{how}: no one-token steps, so the batches differ only in where they were "
                "cut (n_batch, n_ubatch, a re-prefill after a rebuild), which changes the "
                "kernels' summation order too"
            )
        fa = (
            " Flash attention is on: its fused kernel sums in an order of its own, so -fa off "
            "gives other (equally small) differences."
            if self.flash_attn == "on"
            else " Flash attention is off: the attention scores are plain matrix products "
            "here, whose kernels change with the batch shape (on an AVX2 build by up to "
            "0.6 in a logit; with -fa on the same calls were bit-identical there)."
        )
        shift = (
            " After a context shift the cached keys were rotated to their new positions, "
            "not recomputed there."
            if self.shifted and self.mode != "batched"
            else ""
        )
        order = (
            " The cached cells of this sequence are not in position order (llama.cpp put "
            "newer tokens in cells freed under older ones), while the fresh context writes "
            "them in order; the attention kernels add the cells in cell order, so even the "
            "same decode calls are equal only with the same cell order."
            if self.cells_in_order is False
            else ""
        )
        agree = "the same" if self.top1_agree else "a DIFFERENT"
        return f"max |Δ| {self.max_abs_diff:.3g}: {why}; {agree} top-1 token.{fa}{shift}{order}"


class Verifier:
    """A separate context for recomputation; created on the first check, reused after."""

    def __init__(self, engine: VerifyParts) -> None:
        self.engine = engine
        cfg = engine.config
        p = llama_cpp.llama_context_default_params()
        p.n_ctx = engine.n_cells
        p.n_batch = cfg.n_batch
        p.n_ubatch = cfg.n_ubatch
        p.n_seq_max = 1
        p.n_threads = p.n_threads_batch = cfg.threads
        p.flash_attn_type = FLASH_ATTN.get(engine.flash_attn_resolved, -1)  # as it resolved
        p.type_k, p.type_v = engine.type_k, engine.type_v
        p.kv_unified = True
        p.no_perf = True
        self.ctx, _ = init_context(engine.model, p, "a context to verify with")
        self.batch = LlamaBatch(cfg.n_batch, 1)

    def _calls(self, mode: str, seq: int) -> list[DecodeCall]:
        eng = self.engine
        tokens, positions = eng.kv.tokens(seq), eng.kv.positions(seq)
        if mode == "batched":
            return plan_prompt(tokens, 0, (0,), eng.config.n_batch, eng.config.n_ubatch)
        # replay: consecutive cells computed by the same engine call form one call again
        made = [c.call for c in eng.kv.cells if seq in c.seqs]
        calls = []
        i = 0
        for _, grp in groupby(made):
            n = len(list(grp))
            chunk = [
                BatchToken(tokens[j], positions[j], (0,), j == i + n - 1) for j in range(i, i + n)
            ]
            calls.append(DecodeCall(chunk, ubatch_chunks(n, eng.config.n_ubatch)))
            i += n
        return calls

    def recompute(self, mode: str = "batched", seq: int = 0) -> tuple[np.ndarray, int, float]:
        """Logits of the last position of ``seq``'s tokens, from a cleared context:
        (logits, decode calls, milliseconds)."""
        if mode not in MODES:
            raise TokenstepError(f"verify mode must be batched or replay, not {mode!r}.")
        calls = self._calls(mode, seq)
        if not calls:
            raise TokenstepError("the context is empty: there is nothing to verify.")
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.ctx), True)
        t0 = time.perf_counter()
        for call in calls:
            interrupt.check()  # a long recompute ends at a Ctrl-C
            rc = llama_cpp.llama_decode(self.ctx, self.batch.fill(call))
            if rc != 0:
                raise TokenstepError(f"llama_decode failed with code {rc} while verifying.")
        ms = (time.perf_counter() - t0) * 1000.0
        return read_row(self.ctx, -1, self.engine.info.n_vocab), len(calls), ms

    def check(self, mode: str = "batched", seq: int = 0) -> VerifyResult:
        eng = self.engine
        eng.overlap.settle()  # the records it reads are complete
        cached = eng.seq_logits(seq)
        if cached is None:
            raise TokenstepError("there are no logits yet: send a prompt first.")
        record = eng.logits_record if seq == 0 else eng.branches[seq].record
        fresh, n_calls, ms = self.recompute(mode, seq)
        diff = np.abs(fresh.astype(np.float64) - cached.astype(np.float64))
        return VerifyResult(
            mode=mode,
            seq=seq,
            record=record,
            n_tokens=eng.kv.count(seq),
            n_calls=n_calls,
            max_abs_diff=float(diff.max()),
            mean_abs_diff=float(diff.mean()),
            top1_cached=int(np.argmax(cached)),
            top1_fresh=int(np.argmax(fresh)),
            top10_cached=[int(t) for t in top_k_by_logit(cached, TOP_N)],
            top10_fresh=[int(t) for t in top_k_by_logit(fresh, TOP_N)],
            recompute_ms=ms,
            flash_attn=eng.flash_attn_resolved,
            shifted=bool(eng.shifts),
            cached_calls=tuple(
                len(list(g)) for _, g in groupby(c.call for c in eng.kv.cells if seq in c.seqs)
            ),
            cells_in_order=kv_order.seq_in_order(eng.kv, seq),
        )

    def close(self) -> None:
        if getattr(self, "ctx", None):
            self.batch.free()
            llama_cpp.llama_free(self.ctx)
            self.ctx = None  # type: ignore[assignment]
