"""Which llama.cpp KV cell holds which token: the key columns of the attention weights.

The columns of ``kq_soft_max`` are KV *cells*, not positions (see
:mod:`tui.engine.observe.attention_capture`). The capture reads, for each decoded token, the cell
llama.cpp wrote its K to, and :class:`CellMap` ties that cell to the engine's own record of
the token, the :class:`~tui.engine.model.kvcache.KVCell` object the mirror appended for it. The
mirror edits those objects in place when positions move (shift) or sequences are added
(fork), so the tie survives both; each write also gets a ``kv_id`` that never repeats, so
weights from different steps can be matched token for token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ..model.kvcache import KVCell
    from ..run.batch import DecodeCall
    from ..run.parts import ObservedParts

# One cell write: (the mirror's cell object, llama.cpp cell index, kv_id).
Slot = tuple["KVCell", int, int]


class CellMap:
    """The mirror's cells tied to llama.cpp's cells, and per sequence its key rows."""

    def __init__(self) -> None:
        self._slots: dict[int, Slot] = {}  # id(KVCell) -> its slot
        self._by_cell: dict[int, int] = {}  # llama.cpp cell -> id(KVCell) living there
        self._next_kv_id = 0
        self._key_cache: dict[int, _KeyCache] = {}

    def __len__(self) -> int:
        """How many tokens the map knows (live cells of the mirror)."""
        return len(self._slots)

    @property
    def next_kv_id(self) -> int:
        """The kv_id the next cell write gets (every id handed out so far is below it)."""
        return self._next_kv_id

    def live_ids(self) -> set[int]:
        """The kv_id of every token still in the cache."""
        return {slot[2] for slot in self._slots.values()}

    def forget(self) -> None:
        """The map is lost (a decode the capture could not follow): know no cell."""
        self._slots.clear()
        self._by_cell.clear()
        self._key_cache.clear()

    def remember(self, engine: ObservedParts, call: DecodeCall, cells: list[int]) -> list[Slot] | str:
        """Tie the mirror cells this decode appended to the llama.cpp cells it wrote; returns
        (cell object, llama.cpp cell, kv_id) of each, or what went wrong."""
        n = call.n_tokens
        new = engine.kv.cells[-n:] if n else []
        if len(new) != n or any(
            c.token != t.id or c.pos != t.pos for c, t in zip(new, call.tokens, strict=True)
        ):
            return "the engine's KV mirror does not end with this batch; cell map lost"
        fresh = []
        for obj, cell in zip(new, cells, strict=True):
            old = self._by_cell.get(cell)
            if old is not None:  # llama.cpp reused the cell: whatever we knew there is gone
                self._slots.pop(old, None)
            slot = (obj, cell, self._next_kv_id)
            self._slots[id(obj)] = slot
            self._by_cell[cell] = id(obj)
            fresh.append(slot)
            self._next_kv_id += 1
        if len(self._slots) > len(engine.kv.cells):  # drop cells the mirror has freed
            live = {id(c) for c in engine.kv.cells}
            for key in [k for k in self._slots if k not in live]:
                _, cell, _ = self._slots.pop(key)
                if self._by_cell.get(cell) == key:
                    del self._by_cell[cell]
        return fresh

    def key_rows(
        self, engine: ObservedParts, seq: int = 0, fresh: list[Slot] | None = None
    ) -> np.ndarray:
        """:meth:`live_keys` as an int64 array (4, n): pos, llama.cpp cell, kv_id, token.

        Kept per sequence and extended in place while the mirror only grows (a decode step
        appends its tokens), so a step costs O(new tokens), not O(context). Any other edit of
        the mirror (rewind, shift, fork) gives the sequence a new token list, and the keys are
        rebuilt from the mirror. ``fresh`` are the slots this decode added (:meth:`remember`)."""
        ref = engine.kv._seq(seq)  # replaced by the mirror on every edit other than add()
        ent = self._key_cache.get(seq)
        if ent is not None and ent.ref is ref:
            add = [(o.pos, cell, kid, o.token) for o, cell, kid in fresh or () if seq in o.seqs]
            if ent.n + len(add) == len(ref[0]) and ent.extend(add):
                return ent.rows
        rows = np.array(self.live_keys(engine, seq), dtype=np.int64).reshape(-1, 4).T
        ent = self._key_cache[seq] = _KeyCache(ref, rows)
        return ent.rows

    def key_lists(self, seq: int) -> tuple[list[int], list[int], list[int]]:
        """Copies of pos, cell and kv_id of sequence ``seq``'s keys, as :meth:`key_rows` last
        built them (a copy shares the int objects: 8 bytes a key)."""
        pos, cell, kv_id = (lst.copy() for lst in self._key_cache[seq].lists)
        return pos, cell, kv_id

    def live_keys(self, engine: ObservedParts, seq: int = 0) -> list[tuple[int, int, int, int]]:
        """(pos, llama.cpp cell, kv_id, token) of every token sequence ``seq`` sees, by
        position. Raises KeyError for a token this map never saw decoded."""
        objs = sorted((c for c in engine.kv.cells if seq in c.seqs), key=lambda c: c.pos)
        out = []
        for c in objs:
            _, cell, kv_id = self._slots[id(c)]
            out.append((c.pos, cell, kv_id, c.token))
        return out


class _KeyCache:
    """The key rows of one sequence, (4, n) int64, with room to grow at the end; and pos,
    cell and kv_id as Python lists too. Each step's record gets copies of those lists: a copy
    shares the int objects, so n keys cost 8 bytes a list per record, not a new int each."""

    def __init__(self, ref: Any, rows: np.ndarray) -> None:
        self.ref = ref  # the mirror's token/position lists of the sequence when built
        self.buf = np.array(rows, dtype=np.int64, order="C")
        self.n = rows.shape[1]
        self.lists: tuple[list[int], list[int], list[int]] = (
            self.buf[0].tolist(),
            self.buf[1].tolist(),
            self.buf[2].tolist(),
        )

    @property
    def rows(self) -> np.ndarray:
        return self.buf[:, : self.n]

    def extend(self, add: list[tuple[int, int, int, int]]) -> bool:
        """Append keys that come after every known one; False (unchanged) if they do not."""
        m = len(add)
        last = int(self.buf[0, self.n - 1]) if self.n else -(1 << 62)
        for k in add:
            if k[0] <= last:
                return False
            last = k[0]
        if self.n + m > self.buf.shape[1]:
            grown = np.empty((4, max(2 * (self.n + m), 256)), dtype=np.int64)
            grown[:, : self.n] = self.buf[:, : self.n]
            self.buf = grown
        for k in add:
            self.buf[:, self.n] = k
            self.n += 1
            for lst, v in zip(self.lists, k, strict=False):
                lst.append(v)
        return True
