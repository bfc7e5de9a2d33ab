"""Decode: one ``llama_decode`` call, watched by the observers, and the record it leaves.

:func:`decode` is the only place tokenstep calls ``llama_decode`` on the engine's context, and
the only place a :class:`~tui.engine.run.step.StepRecord` is completed: the KV mirror takes the new
cells, the observers add their extras, each logits row is copied out with its top candidates,
the mirror is checked against llama.cpp, the record is logged and the work counter counts it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import nullcontext
from functools import partial
from typing import TYPE_CHECKING, Any

import llama_cpp

from ..model import interrupt
from ..model.errors import ContextFullError, TokenstepError
from ..record.run_record import Decode
from .batch import DecodeCall
from .logits import observe_row, read_row, top_candidates
from .parts import DecodeObserver as DecodeObserver  # where the session imports it from
from .replay import DecodeOp
from .step import SeqRow, ShiftEvent, SpecInfo, SpecRow, StepRecord

if TYPE_CHECKING:
    from .parts import DecodeParts


def run_decode(engine: DecodeParts, call: DecodeCall) -> tuple[float, dict[str, Any]]:
    """Run one ``llama_decode``; returns its wall time in ms and the observers' extras."""
    interrupt.check()  # a Ctrl-C ends a command here, before the context changes
    b = engine.batch.fill(call)
    for obs in engine.observers:
        obs.before_decode(engine, call)
    # llama_decode releases the GIL; the gate lets another thread do pure-Python work on the
    # session meanwhile (never with observers: their eval callback runs Python in the graph).
    gate = engine.decode_gate if not engine.observers else None
    with gate() if gate is not None else nullcontext():
        t0 = time.perf_counter()
        rc = llama_cpp.llama_decode(engine.ctx, b)
        ms = (time.perf_counter() - t0) * 1000.0
    if rc != 0:
        if rc == 1:
            raise ContextFullError(
                "llama.cpp found no free KV cells for this batch (context full)."
            )
        raise TokenstepError(f"llama_decode failed with code {rc}.")
    index = len(engine.records)
    cells = engine.kv.place(call.ubatches, call.n_tokens)
    for t, cell in zip(call.tokens, cells, strict=True):
        engine.kv.add(t.id, t.pos, t.seq_ids, index, cell)
    extras: dict[str, Any] = {}
    for obs in engine.observers:
        obs.after_decode(engine, call, extras)
    return ms, extras


def decode(
    engine: DecodeParts,
    call: DecodeCall,
    *,
    phase: str = "decode",
    chunk: tuple[int, int] = (1, 1),
    reused: int = 0,
    has_logits: bool = True,
    shift: ShiftEvent | None = None,
    seq_rows: Sequence[tuple[int, int]] = (),
    all_rows: bool = False,
    purpose: str = "step",
) -> StepRecord:
    """Decode ``call`` and complete its record.

    Without ``seq_rows`` the last logits row (if ``has_logits``) is sequence 0's. With them
    (several sequences in one call, after a fork) row ``i`` belongs to ``seq_rows[i]``, a
    (seq_id, token) pair, and each sequence gets its own :class:`SeqRow` and logits.
    ``purpose`` goes to the replay log (:mod:`tui.engine.run.replay`): "prompt" for a prefill
    chunk, "step", "verify" or "forks"."""
    ms, extras = run_decode(engine, call)
    engine.overlap.settle()  # the last step's views are noted before this decode (in order)
    seqs = tuple(s for s, _ in seq_rows)
    engine.replay.note(DecodeOp(call, len(engine.records), purpose, has_logits, all_rows, seqs))
    rec = StepRecord(
        len(engine.records),
        phase,
        call,
        ms,
        chunk=chunk,
        reused=reused,
        has_logits=has_logits,
        extras=extras,
        shift=shift,
    )
    n_vocab = engine.info.n_vocab
    contexts: list[int] = []  # per logits row: its sequence's length (the work counter)
    for i, (s, t) in enumerate(seq_rows):
        logits = read_row(engine.ctx, i, n_vocab)
        row = SeqRow(s, i, t, call.tokens[i].pos, n_ctx_tokens=engine.kv.count(s))
        row.top, row.entropy = top_candidates(logits, engine.vocab)
        rec.rows[s] = row
        contexts.append(row.n_ctx_tokens)
        engine.set_seq_logits(s, logits, rec.index)
    rec.n_ctx_tokens = engine.n_past
    rec.kv_used = engine.kv.used
    rec.kv_bytes = engine.kv_bytes_used
    rec.kv_problems = engine.kv.check(engine.ctx)
    if all_rows:
        n0 = rec.n_ctx_tokens - call.n_tokens
        rows = []
        for i in range(call.n_tokens):
            logits = read_row(engine.ctx, i, n_vocab)
            top, entropy = top_candidates(logits, engine.vocab)
            rows.append(SpecRow(top, entropy))
            engine.logits_memory.set(logits, rec.index, n0 + 1 + i)
            contexts.append(n0 + 1 + i)
        rec.spec = SpecInfo(rows=rows)
        rec.top, rec.entropy = rows[-1].top, rows[-1].entropy
    elif seq_rows:
        first = rec.rows[seq_rows[0][0]]
        rec.top, rec.entropy = first.top, first.entropy
    elif has_logits:
        logits = read_row(engine.ctx, -1, n_vocab)
        engine.set_seq_logits(0, logits, rec.index)
        # the top and entropy wait for the pick (overlap.py): it needs the chain only
        engine.overlap.defer(partial(observe_row, rec, logits, engine.vocab))
        contexts.append(rec.n_ctx_tokens)
    engine.records.append(rec)
    engine.run.note(Decode(rec.index, purpose, phase, call.n_tokens, ms, rec.n_ctx_tokens))
    engine.work.add(rec.index, call.n_tokens, contexts, ms, rec.phase)
    return rec
