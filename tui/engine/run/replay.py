"""Everything the engine does to its ``llama_context``'s memory, in order, so another context
can do the same (an observer's own context, :mod:`tui.engine.observe.observer_context`).

Every ``llama_decode`` (:func:`tui.engine.run.decode.decode`) and ``llama_memory_*`` edit
(``seq_rm``, ``seq_cp``, ``seq_add``, ``clear``) is noted in the :class:`ReplayLog`. A context
with the same model, ``n_ctx``, ``n_batch``, ``n_ubatch`` and ``n_seq_max`` running the same
operations from an empty cache puts every token in the same cell and splits every batch the
same way, so its rows are the engine's bit for bit (``verify``'s replay shows it) unless its
own parameters differ (flash attention off for attention). The log restarts at every
``llama_memory_clear``; noting is a list append of the records' own objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import llama_cpp

if TYPE_CHECKING:
    from .batch import DecodeCall


@dataclass(frozen=True)
class DecodeOp:
    """One ``llama_decode`` of the engine, as its record has it."""

    call: DecodeCall
    index: int  # the engine's record for it
    purpose: str  # "prompt" (a prefill chunk), "step", "verify", "forks", "again"
    has_logits: bool
    all_rows: bool
    seqs: tuple[int, ...]  # with several sequences: the seq_id of each logits row, in order


@dataclass(frozen=True)
class MemoryOp:
    """One ``llama_memory_*`` edit: ``name`` is ``seq_rm``, ``seq_cp`` or ``seq_add``."""

    name: str
    args: tuple[int, ...]


Op = DecodeOp | MemoryOp


class ReplayLog:
    """The operations since the engine's memory was last cleared. A position in the log
    (``end``) is (clears so far, operations since the last one): a clear always moves it on,
    even when nothing was logged between two clears."""

    def __init__(self, on: bool = True) -> None:
        self.on = on  # an observer's own context keeps no log of its own
        self.ops: list[Op] = []
        self.clears = 0

    @property
    def end(self) -> tuple[int, int]:
        return self.clears, len(self.ops)

    def note(self, op: Op) -> None:
        if self.on:
            self.ops.append(op)

    def cleared(self) -> None:
        self.clears += 1
        self.ops = []

    def since(self, cursor: tuple[int, int] | None) -> tuple[bool, list[Op]]:
        """The operations after ``cursor`` (None: nothing run yet); True first when a clear
        came after it (the other context must be cleared, then run every operation logged)."""
        if cursor is None or cursor[0] != self.clears:
            return True, list(self.ops)
        return False, self.ops[cursor[1] :]


def _mem(ctx: llama_cpp.llama_context_p) -> llama_cpp.llama_memory_t:
    return llama_cpp.llama_get_memory(ctx)


def apply(ctx: llama_cpp.llama_context_p, op: MemoryOp) -> bool:
    """Run one memory edit on ``ctx`` (llama.cpp's own return value)."""
    m = _mem(ctx)
    if op.name == "seq_rm":
        return bool(llama_cpp.llama_memory_seq_rm(m, *op.args))
    if op.name == "seq_cp":
        llama_cpp.llama_memory_seq_cp(m, *op.args)
        return True
    if op.name == "seq_add":
        llama_cpp.llama_memory_seq_add(m, *op.args)
        return True
    raise ValueError(f"unknown memory operation {op.name!r}")


def seq_rm(ctx: llama_cpp.llama_context_p, log: ReplayLog, seq: int, p0: int, p1: int) -> bool:
    """``llama_memory_seq_rm``, noted when llama.cpp did it."""
    op = MemoryOp("seq_rm", (seq, p0, p1))
    done = apply(ctx, op)
    if done:
        log.note(op)
    return done


def seq_cp(
    ctx: llama_cpp.llama_context_p, log: ReplayLog, src: int, dst: int, p0: int, p1: int
) -> None:
    op = MemoryOp("seq_cp", (src, dst, p0, p1))
    apply(ctx, op)
    log.note(op)


def seq_add(
    ctx: llama_cpp.llama_context_p, log: ReplayLog, seq: int, p0: int, p1: int, delta: int
) -> None:
    op = MemoryOp("seq_add", (seq, p0, p1, delta))
    apply(ctx, op)
    log.note(op)


def clear(ctx: llama_cpp.llama_context_p, log: ReplayLog) -> None:
    llama_cpp.llama_memory_clear(_mem(ctx), True)
    log.cleared()
