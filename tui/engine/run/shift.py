"""Context full: the context shift, llama.cpp's way of making room without a new prompt.

The first ``n_keep`` tokens stay (``--keep``), the oldest half of the rest is removed
(``llama_memory_seq_rm``) and the newer half moves back to close the gap
(``llama_memory_seq_add``; llama.cpp re-rotates their keys at the next decode).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import llama_cpp

from ..model.errors import TokenstepError
from ..record.run_record import Shift
from . import replay
from .paths import drop_all
from .step import ShiftEvent

if TYPE_CHECKING:
    from .parts import ShiftParts


def keep_count(engine: ShiftParts) -> int:
    """Tokens a context shift keeps, as llama.cpp's ``--keep`` counts them: -1 (or more
    than the prompt) keeps the whole first prompt; otherwise N, plus the BOS token."""
    n_keep = engine.config.n_keep
    n_prompt = engine.n_prompt
    if n_keep < 0 or n_keep > n_prompt:
        return n_prompt
    if engine.info.add_bos and engine.n_past and engine.tokens[0] == engine.info.bos:
        n_keep += 1
    return n_keep


def context_shift(engine: ShiftParts) -> ShiftEvent | None:
    """Make room the way llama.cpp's context shift does: keep the first n_keep tokens,
    remove the oldest half of the rest (``llama_memory_seq_rm``) and move the newer half
    back to close the gap (``llama_memory_seq_add``; llama.cpp re-rotates their keys at
    the next decode). None, with ``stop_reason`` set, when it cannot.

    After a fork every sequence in the cache is shifted, with seq_rm + seq_add per seq_id.
    They all drop the SAME positions (half of the longest one's rest): the cells they
    share have one position each, so they can only move if every sequence moves them by
    the same amount (see :meth:`KVMirror.shift_seqs`)."""
    engine.overlap.settle()  # the record's picks move with the tokens
    drop_all(engine)  # parked paths would not move with the window: they are dropped
    kv = engine.kv
    mem = llama_cpp.llama_get_memory(engine.ctx)
    seqs = engine.seq_ids
    longest = max(seqs, key=kv.count)
    n_past = kv.count(longest)
    n_keep = keep_count(engine)
    n_discard = (n_past - n_keep) // 2
    if not llama_cpp.llama_memory_can_shift(mem):
        engine.stopped("context full (this model's cache cannot shift)")
        return None
    if n_discard < 1:
        engine.stopped(f"context full (--keep {n_keep} leaves nothing to drop)")
        return None
    pos = kv.positions(longest)
    p0, p1 = pos[n_keep], pos[n_keep + n_discard]
    gone, moves = kv.shift_seqs(seqs, p0, p1)
    for s in seqs:
        if not replay.seq_rm(engine.ctx, engine.replay, s, p0, p1):
            raise TokenstepError("llama.cpp could not remove tokens from the KV cache.")
    for s, lo in moves:
        replay.seq_add(engine.ctx, engine.replay, s, lo, -1, -(p1 - p0))
    for br in engine.branches.values():  # where each fork's own cells start, after the move
        if br.fork_pos >= p1:
            br.fork_pos -= p1 - p0
        elif br.fork_pos > p0:
            br.fork_pos = p0
    ev = ShiftEvent(
        len(engine.shifts),
        len(engine.records),
        n_past,
        n_keep,
        n_discard,
        gone.get(0, []),
        gone if len(seqs) > 1 else {},
    )
    engine.shifts.append(ev)
    engine.run.note(Shift(ev.n_keep, ev.n_discard, ev.before_record, engine.n_past))
    engine.logits_memory.shifted(engine.n_past)
    engine.surprise.shift(n_keep, n_discard)
    return ev
