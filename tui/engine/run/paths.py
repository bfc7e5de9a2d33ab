"""The paths not taken: sequences that keep an abandoned continuation's cells.

Before a rewind (or a jump to another path) sequence 0 can be copied into a free seq_id with
``llama_memory_seq_cp``: the cells are only tagged with both ids, nothing is copied or computed.
The parked sequence is never decoded; it keeps the cells alive after sequence 0 drops them, so
going back to that path later is a ``seq_rm`` on sequence 0 and a ``seq_cp`` of the parked
cells (:func:`restore`). When no seq_id is free, or the cells were dropped to make room, the
path is decoded again from its tokens (one prefill call), and :func:`restore` says which.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import llama_cpp

from ..model.errors import TokenstepError
from ..record.run_record import Pick
from ..record.run_record import Restore as RunRestore
from . import prompt, replay
from .step import Parked

if TYPE_CHECKING:
    from .parts import PathParts


@dataclass(frozen=True)
class Restored:
    """How :func:`restore` put a path back: tokens taken from parked cells, tokens decoded."""

    from_cache: int
    recomputed: int
    seq: int | None  # the parked sequence the cells came from
    # tokens decoded again so that sequence 0's cells stay in position order (kv_order): a
    # hole under the parked cells would have taken the next step's token
    reordered: int = 0
    common: int = 0  # tokens of sequence 0 kept as they were (their picks stay in the record)


def holds(engine: PathParts, seq: int | None, tokens: Sequence[int]) -> bool:
    """Does llama.cpp still hold ``tokens`` (a whole context, from position 0) in the cells of
    parked sequence ``seq``? Asked of llama.cpp itself: ``llama_memory_seq_pos_min`` and
    ``llama_memory_seq_pos_max`` of ``seq`` must span the positions those tokens were decoded
    at, and the parked record must be of these tokens (a seq_id freed and parked again holds
    another path). A branch is shown as cached, and :func:`restore` takes its cells, only then.
    """
    if seq is None or not tokens:
        return False
    parked = engine.parked.get(seq)
    if parked is None or parked.tokens[: len(tokens)] != list(tokens):
        return False
    pos = engine.kv.positions(seq)
    if len(pos) < len(tokens) or engine.kv.tokens(seq)[: len(tokens)] != list(tokens):
        return False
    mem = llama_cpp.llama_get_memory(engine.ctx)
    lo = llama_cpp.llama_memory_seq_pos_min(mem, seq)
    hi = llama_cpp.llama_memory_seq_pos_max(mem, seq)
    return 0 <= lo <= pos[0] and hi >= pos[len(tokens) - 1]


def free_seqs(engine: PathParts) -> list[int]:
    """seq_ids neither forked nor parked."""
    used = set(engine.branches) | set(engine.parked)
    return [s for s in range(1, engine.config.n_seq_max) if s not in used]


def park(engine: PathParts) -> int | None:
    """Copy sequence 0 into a free seq_id so its cells outlive a rewind; None when every seq_id
    is taken (the path can still be recomputed from its tokens)."""
    free = free_seqs(engine)
    if not free or engine.n_past == 0:
        return None
    seq = free[0]
    replay.seq_cp(engine.ctx, engine.replay, 0, seq, -1, -1)
    engine.kv.seq_cp(0, seq)
    tokens = engine.tokens
    engine.parked[seq] = Parked(
        seq, tokens, engine.logits, engine.logits_record, list(engine.run.picks_along(tokens))
    )
    return seq


def park_fork(engine: PathParts, seq: int) -> None:
    """A forked sequence stops being stepped but keeps its cells, as a parked path."""
    br = engine.branches.pop(seq)
    br.chain.free()
    tokens = engine.kv.tokens(seq)
    values = list(engine.run.picks_along(tokens, seq))  # its own, and its parent's before it
    engine.parked[seq] = Parked(seq, tokens, br.logits, br.record, values)


def drop(engine: PathParts, seq: int) -> None:
    """Forget a parked sequence: the cells only it still sees are freed."""
    if engine.parked.pop(seq, None) is None:
        return
    replay.seq_rm(engine.ctx, engine.replay, seq, -1, -1)
    engine.kv.seq_rm(seq, 0, -1)


def drop_all(engine: PathParts) -> None:
    for seq in list(engine.parked):
        drop(engine, seq)


def make_room(engine: PathParts, n: int) -> None:
    """Drop parked sequences (oldest first) until ``n`` more cells fit in the cache."""
    for seq in list(engine.parked):
        if engine.kv.used + n <= engine.n_cells:
            return
        engine.overlap.settle()  # dropping reads the picks the last step noted
        drop(engine, seq)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def restore(
    engine: PathParts,
    tokens: list[int],
    seq: int | None = None,
    values: Sequence[Pick | None] | None = None,
) -> Restored:
    """Make sequence 0 hold ``tokens``: keep the common prefix, take the rest from parked
    sequence ``seq`` when it holds them (``seq_rm`` + ``seq_cp``), else decode them again.
    The picks of the tokens past the prefix (``values``, else the parked sequence's) are
    written to the record again at their indices: the path's tokens were picked with them."""
    if engine.branches:
        raise TokenstepError("drop the forked sequences first: a path replaces sequence 0.")
    if not tokens:
        raise TokenstepError("a path needs at least one token.")
    parked = engine.parked.get(seq) if seq is not None and holds(engine, seq, tokens) else None
    common = min(common_prefix(engine.tokens, tokens), len(tokens) - 1)
    if parked is not None:
        got = _from_parked(engine, parked, tokens, common)
    else:
        engine.truncate(common)
        recs = engine.prefill(tokens[common:])
        got = Restored(0, sum(r.call.n_tokens for r in recs), None, 0, common)
    if values is None:
        values = parked.values if parked is not None else ()
    for i in range(got.common, len(tokens)):
        v = values[i] if i < len(values) else None
        if v is not None and v.token == tokens[i]:
            engine.run.note(replace(v, seq=0, index=i))
    return got


def _from_parked(engine: PathParts, parked: Parked, tokens: list[int], common: int) -> Restored:
    # Keep only the prefix whose cells the parked sequence shares: a cell sequence 0 decoded
    # again after parking sits at the same position as the parked one and must go.
    common = min(common, engine.kv.shared_prefix(0, parked.seq))
    engine.truncate(common)
    p0 = engine.kv.positions(parked.seq)[common]
    n = len(tokens)
    p1 = engine.kv.positions(parked.seq)[n - 1] + 1
    replay.seq_cp(engine.ctx, engine.replay, parked.seq, 0, p0, p1)
    engine.kv.seq_cp(parked.seq, 0, p0, p1)
    engine.run.note(RunRestore(parked.seq, engine.n_past))
    # The parked cells came after the kept prefix's when they were decoded, but a hole under
    # them (a path dropped since) may be filled by the next step: keep the order (kv_order).
    reordered = prompt.keep_in_order(engine, 1)
    recomputed = 0
    if reordered:
        pass  # the logits of the path's last position came with the tokens decoded again
    elif n == len(parked.tokens) and parked.logits is not None and parked.record is not None:
        engine.logits_memory.set(parked.logits, parked.record, engine.n_past)
    else:  # the row of the path's last position was not kept: decode that token again
        engine.ensure_logits()
        recomputed = 1
    kept = max(0, n - common - recomputed - reordered)
    return Restored(kept, recomputed, parked.seq, reordered, common)
