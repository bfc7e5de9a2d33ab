"""Verify: recompute the context from scratch in a fresh context and compare the logits with
the ones the cached steps produced (the exactness lesson of the cache tabs)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..engine.model.tokens import quoted

if TYPE_CHECKING:
    from .parts import WorkerParts


def verify(w: WorkerParts, mode: str) -> None:
    s = w.state
    local = w.require("verify")
    if w.engine.logits is None:
        s.note("Nothing to verify yet: send a message first.", "warn")
        return
    n = len(w.engine.tokens)
    with w.busy(f"Verify ({mode}): recomputing the {n} tokens from scratch in a fresh context"):
        res = local.verify_last(mode)
    s.verified(res)
    top1 = quoted(w.engine.vocab.piece(res.top1_cached), res.top1_cached)
    agree = f"agrees ({top1})" if res.top1_agree else f"DISAGREES (cached {top1})"
    s.note(
        f"Verify ({mode}): recomputed {res.n_tokens} tokens from scratch in "
        f"{res.recompute_ms:.0f} ms; max |Δ| {res.max_abs_diff:.3g}, top-1 {agree}. "
        "Tab 0 shows why.",
        "info" if res.top1_agree else "error",
    )
