"""Which llama.cpp cell each token's K and V went to, and keeping sequence 0's in order.

llama.cpp's KV cache (``llama_kv_cache::find_slot``, one stream) puts a ubatch's tokens in the
first free cells from its ``head``: after the last cell written, back to the lowest cell a
``llama_memory_seq_rm`` freed, to 0 after ``llama_memory_seq_add`` or when over 2 x n_tokens
cells below are free. A cell freed under newer ones (a dropped path or fork) is a *hole* the
next decode fills. Attention walks cells in cell order (flash attention adds each V into an
f16 accumulator), so another order rounds differently: with SmolLM2 Q4_1 on AVX-512, 6 of 53
cells out of order moved the last logits by up to 0.83 against a replay in position order
(0.46 on AVX2). Over 512 cells, or prompts of 64 rows and more, cell indices count too.
:class:`CellSlots` replays llama.cpp's choice on the mirror, :func:`read_positions` asks
llama.cpp, :func:`keep_from` finds how far back sequence 0 must be decoded again; after a
context shift llama.cpp's own order stays (decoding the window again would undo the shift).
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from typing import Protocol

import llama_cpp
import numpy as np

_STATE_MAGIC = 0xAF143CD8  # llama_context's io_magic, first in a sequence's state


class CellSlots:
    """llama.cpp's cell allocator for one stream: which cells are used, and its ``head``."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.used = np.zeros(size, dtype=bool)
        self.head = 0

    def copy(self) -> CellSlots:
        other = CellSlots(self.size)
        other.used[:] = self.used
        other.head = self.head
        return other

    @property
    def n_used(self) -> int:
        return int(self.used.sum())

    @property
    def holes(self) -> int:
        """Free cells below the highest used one: where the next tokens may land early."""
        top = np.flatnonzero(self.used)
        return int(top[-1] + 1 - len(top)) if len(top) else 0

    def place(self, n: int) -> list[int]:
        """The cells ``find_slot`` picks for a ubatch of ``n`` tokens, now marked used."""
        head = self.head
        if head > self.n_used + 2 * n:  # enough free below: search from the beginning
            head = 0
        free = np.flatnonzero(~self.used)
        order = np.concatenate((free[free >= head], free[free < head]))
        if len(order) < n:
            raise ValueError(f"no {n} free KV cells")
        got = order[:n]
        self.used[got] = True
        self.head = int(got[-1]) + 1
        return [int(c) for c in got]

    def place_calls(self, ubatches: Sequence[int]) -> list[int]:
        """The cells for ubatches of these sizes, decoded one after the other."""
        out: list[int] = []
        for n in ubatches:
            out += self.place(n)
        return out

    def free(self, cells: Sequence[int]) -> None:
        """``llama_memory_seq_rm`` emptied these cells: the head moves back to the lowest."""
        idx = [c for c in cells if c >= 0]
        if not idx:
            return
        self.used[idx] = False
        self.head = min(self.head, min(idx))

    def moved(self) -> None:
        """``llama_memory_seq_add`` moved positions: the next search starts at cell 0."""
        self.head = 0

    def clear(self) -> None:
        self.used[:] = False
        self.head = 0


class _Cell(Protocol):
    pos: int
    seqs: set[int]
    cell: int


class _Mirror(Protocol):
    """What :func:`keep_from` reads of the KV mirror (``kvcache.KVMirror``, which imports
    this module for :class:`CellSlots`)."""

    @property
    def cells(self) -> Sequence[_Cell]: ...
    @property
    def slots(self) -> CellSlots | None: ...
    @property
    def shifted(self) -> bool: ...


def ubatch_sizes(n: int, n_batch: int, n_ubatch: int) -> list[int]:
    """The ubatches a prompt of ``n`` tokens is decoded in (``plan_prompt``'s calls, each split
    by llama.cpp into ``n_ubatch`` pieces)."""
    out = []
    for start in range(0, n, n_batch):
        m = min(n_batch, n - start)
        out += [min(n_ubatch, m - u) for u in range(0, m, n_ubatch)]
    return out


def in_order(cells: Sequence[int]) -> bool:
    return all(a < b for a, b in zip(cells, cells[1:], strict=False))


def seq_cells(kv: _Mirror, seq: int = 0) -> list[int]:
    """The llama.cpp cell of each of ``seq``'s tokens, by position (-1: not known)."""
    return [c.cell for c in sorted((c for c in kv.cells if seq in c.seqs), key=lambda c: c.pos)]


def seq_in_order(kv: _Mirror, seq: int = 0) -> bool | None:
    """Are ``seq``'s cells in position order (as a fresh context or a replay writes them)?
    None when the mirror does not know its cells (a server's)."""
    cells = seq_cells(kv, seq)
    return None if any(c < 0 for c in cells) else in_order(cells)


def keep_from(
    kv: _Mirror, n_new: int, n_batch: int, n_ubatch: int, *, merged: bool = True
) -> int | None:
    """Where sequence 0 must be decoded again from (a token count) so that, with ``n_new``
    tokens decoded after it, its cells stay in position order; None when they do as they are
    (or cannot: no room, or the order is a context shift's).

    ``merged``: the tokens decoded again and the new ones go in one prompt (a prefill);
    otherwise the new ones follow in one call of their own (a step: one token, or one per
    sequence after a fork). Tried on a copy
    of the allocator, from the longest prefix that is in order down to the whole sequence."""
    slots = kv.slots
    if slots is None or kv.shifted:
        return None
    mine = [c for c in kv.cells if 0 in c.seqs]  # by position: the mirror appends in order
    n = len(mine)
    if n and (mine[0].pos != 0 or mine[-1].pos != n - 1 or mine[0].cell < 0):
        return None  # positions with a gap (decoded again, they would move), or cells unknown
    good = n
    for i in range(1, n):
        a, b = mine[i - 1], mine[i]
        if b.pos != a.pos + 1 or b.cell < 0:
            return None
        if b.cell <= a.cell:
            good = i
            break
    cells = [c.cell for c in mine]
    if good == n and not slots.holes:
        return None  # in order, and new cells go after every used one
    for k in range(good, -1, -1):
        sim = slots.copy()
        sim.free([c.cell for c in mine[k:] if len(c.seqs) == 1])
        if merged:
            sizes = ubatch_sizes(n - k + n_new, n_batch, n_ubatch)
        else:
            sizes = ubatch_sizes(n - k, n_batch, n_ubatch) + ubatch_sizes(n_new, n_new, n_ubatch)
        try:
            new = sim.place_calls(sizes)
        except ValueError:
            return None  # no room to decode again: llama.cpp's own order stays
        if (k == 0 or not new or new[0] > cells[k - 1]) and in_order(new):  # cells[:k] are
            return None if k == n else k
    return None


def read_positions(ctx: llama_cpp.llama_context_p, seq: int = 0) -> list[int] | None:
    """The positions of ``seq``'s cells in llama.cpp's cell order, from its own state
    (``llama_state_seq_get_data``: magic, seq_id, n_stream, then per stream its cell count and
    each cell's pos, seq count and seq ids, before the K and V rows). None when the state has
    another layout (a recurrent or hybrid memory, cells with 2-D positions)."""
    size = llama_cpp.llama_state_seq_get_size(ctx, seq)
    if size < 16:
        return None
    buf = (ctypes.c_uint8 * size)()
    got = llama_cpp.llama_state_seq_get_data(ctx, buf, size, seq)
    raw = bytes(buf[: min(got, size)])
    magic, seq_id, n_stream, count = struct.unpack_from("<IiII", raw, 0)
    if magic != _STATE_MAGIC or seq_id != seq or n_stream != 1:
        return None
    off, out = 16, []
    for _ in range(count):
        pos, n_seq = struct.unpack_from("<iI", raw, off)
        if n_seq != 1 or struct.unpack_from("<i", raw, off + 8)[0] != seq:
            return None
        out.append(pos)
        off += 12
    return out
