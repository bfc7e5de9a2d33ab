"""Feed back: a mirror of the KV cache cells, and what they cost in bytes.

Each token that has been decoded leaves one cell behind: its K and V vectors for every layer,
tagged with its position and the sequences that may see it. The mirror is our own record of
those cells; after every step it is checked against llama.cpp's ``llama_memory_seq_pos_min/max``
so the picture on screen can be trusted.

Per-sequence token and position lists are cached and extended on every ``add``, so the
per-step path stays O(1); only the rare structural edits (remove, copy, shift) rebuild them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import llama_cpp
import numpy as np

from . import ggml
from .kv_order import CellSlots

# llama_kv_cache: size =   90.00 MiB (  4096 cells,  30 layers,  1/1 seqs), K (f16): ...
_KV_LOG = re.compile(
    r"llama_kv_cache(?:_\w+)?: size =\s*([\d.]+) MiB \(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)/(\d+) seqs\),"
    r" K \((\w+)\):\s*([\d.]+) MiB, V \((\w+)\):\s*([\d.]+) MiB"
)
# llama_kv_cache_iswa: creating non-SWA KV cache, size = 4096 cells   (and "...     SWA KV cache")
_ISWA_LOG = re.compile(r"creating\s+(non-SWA|SWA) KV cache, size = (\d+) cells")


@dataclass(slots=True)
class KVCell:
    token: int
    pos: int
    seqs: set[int]
    call: int = -1  # index of the StepRecord whose llama_decode computed this cell
    cell: int = -1  # the llama.cpp cell holding it (kv_order.CellSlots; -1: not known)


@dataclass(slots=True)
class Forgotten:
    """A token a context shift dropped from the cache (out of attention's reach)."""

    token: int
    pos: int  # its position before it was dropped
    seq: int
    shift: int  # 0 for the first shift, 1 for the second...


@dataclass
class KVLayout:
    """Bytes per cell: n_layer x (K row + V row), rows sized by ggml for the cache types."""

    n_layer: int
    n_embd_k_gqa: int
    n_embd_v_gqa: int
    type_k: int
    type_v: int

    @property
    def k_bytes_per_token(self) -> int:
        return self.n_layer * ggml.row_size(self.type_k, self.n_embd_k_gqa)

    @property
    def v_bytes_per_token(self) -> int:
        return self.n_layer * ggml.row_size(self.type_v, self.n_embd_v_gqa)

    @property
    def bytes_per_token(self) -> int:
        return self.k_bytes_per_token + self.v_bytes_per_token


@dataclass
class KVLogReport:
    """What llama.cpp itself logged when it allocated the cache."""

    size_mib: float
    cells: int
    layers: int
    type_k: str
    k_mib: float
    type_v: str
    v_mib: float
    kind: str = "kv"  # "kv" (one cache), or "non-SWA" / "SWA" for a model with sliding windows
    n_seq_max: int = 1


def parse_kv_log(lines: list[str]) -> list[KVLogReport]:
    """Every cache llama.cpp allocated, in log order. A model with sliding-window layers gets
    two: llama.cpp announces each ("creating non-SWA/SWA KV cache") before its size line."""
    out = []
    kind = "kv"
    for line in lines:
        mk = _ISWA_LOG.search(line)
        if mk:
            kind = mk.group(1)
            continue
        m = _KV_LOG.search(line)
        if m:
            out.append(
                KVLogReport(
                    size_mib=float(m.group(1)),
                    cells=int(m.group(2)),
                    layers=int(m.group(3)),
                    type_k=m.group(6),
                    k_mib=float(m.group(7)),
                    type_v=m.group(8),
                    v_mib=float(m.group(9)),
                    kind=kind,
                    n_seq_max=int(m.group(4)),
                )
            )
            kind = "kv"
    return out


@dataclass
class KVMirror:
    n_ctx: int
    cells: list[KVCell] = field(default_factory=list)
    forgotten: list[Forgotten] = field(default_factory=list)
    n_shifts: int = 0
    # llama.cpp's cell allocator, replayed (a local context's mirror; None for a server's)
    slots: CellSlots | None = field(default=None, repr=False, compare=False)
    shifted: bool = False  # a context shift moved cells since the cache was last empty
    # seq -> (tokens, positions) in cell order; built lazily, extended by add()
    _by_seq: dict[int, tuple[list[int], list[int]]] = field(
        default_factory=dict, repr=False, compare=False
    )
    _ids: list[int] | None = field(default=None, repr=False, compare=False)

    @property
    def used(self) -> int:
        return len(self.cells)

    def _seq(self, seq: int) -> tuple[list[int], list[int]]:
        got = self._by_seq.get(seq)
        if got is None:
            cells = [c for c in self.cells if seq in c.seqs]
            got = ([c.token for c in cells], [c.pos for c in cells])
            self._by_seq[seq] = got
        return got

    def _changed(self) -> None:
        self._by_seq.clear()
        self._ids = None

    def tokens(self, seq: int = 0) -> list[int]:
        return list(self._seq(seq)[0])

    def positions(self, seq: int = 0) -> list[int]:
        return list(self._seq(seq)[1])

    def count(self, seq: int = 0) -> int:
        """Cells that sequence ``seq`` can see (its context length)."""
        return len(self._seq(seq)[0])

    def last_pos(self, seq: int = 0) -> int:
        """The newest position of ``seq``, or -1 when it is empty."""
        pos = self._seq(seq)[1]
        return pos[-1] if pos else -1

    def place(self, ubatches: list[tuple[int, int]], n_tokens: int) -> list[int]:
        """The llama.cpp cells a decode of these ubatches writes (see :class:`CellSlots`)."""
        if self.slots is None:
            return [-1] * n_tokens
        sizes = [b - a for a, b in ubatches] or [n_tokens]
        try:
            return self.slots.place_calls(sizes)
        except ValueError:  # llama.cpp placed them after all: the replay lost track
            self.slots = None
            return [-1] * n_tokens

    def add(
        self, token: int, pos: int, seqs: tuple[int, ...], call: int = -1, cell: int = -1
    ) -> None:
        self.cells.append(KVCell(token, pos, set(seqs), call, cell))
        if self._ids is not None and any(s not in self._ids for s in seqs):
            self._ids = None
        for s in seqs:
            got = self._by_seq.get(s)
            if got is not None:
                got[0].append(token)
                got[1].append(pos)

    def seq_rm(self, seq: int, p0: int, p1: int = -1) -> None:
        """Drop ``seq`` from cells with p0 <= pos < p1 (p1 < 0: to the end); free empty cells."""
        lo = max(p0, 0)
        hi = p1 if p1 >= 0 else 1 << 62
        for c in self.cells:
            if seq in c.seqs and lo <= c.pos < hi:
                c.seqs.discard(seq)
        if self.slots is not None:
            self.slots.free([c.cell for c in self.cells if not c.seqs])
        self.cells = [c for c in self.cells if c.seqs]
        self._changed()

    def seq_cp(self, src: int, dst: int, p0: int = 0, p1: int = -1) -> None:
        """Tag ``src``'s cells with p0 <= pos < p1 (p1 < 0: to the end) with ``dst`` too."""
        hi = p1 if p1 >= 0 else 1 << 62
        for c in self.cells:
            if src in c.seqs and p0 <= c.pos < hi:
                c.seqs.add(dst)
        self._changed()

    def shared_prefix(self, a: int, b: int) -> int:
        """How many of ``a``'s first cells (in order) ``b`` sees too."""
        n = 0
        for c in self.cells:
            if a in c.seqs:
                if b not in c.seqs:
                    break
                n += 1
        return n

    def seq_add(self, seq: int, p0: int, p1: int, delta: int) -> None:
        hi = p1 if p1 >= 0 else 1 << 62
        for c in self.cells:
            if seq in c.seqs and p0 <= c.pos < hi:
                c.pos += delta
        if self.slots is not None:
            self.slots.moved()
        self.shifted = True
        self._changed()

    def shift(self, seq: int, n_keep: int, n_discard: int) -> list[Forgotten]:
        """llama.cpp's context shift on ``seq``: keep the first ``n_keep`` tokens, forget the
        next ``n_discard`` and slide the rest back by ``n_discard`` positions."""
        pos = self._seq(seq)[1]
        gone, _ = self.shift_seqs([seq], pos[n_keep], pos[n_keep + n_discard])
        return gone[seq]

    def shift_seqs(
        self, seqs: list[int], p0: int, p1: int
    ) -> tuple[dict[int, list[Forgotten]], list[tuple[int, int]]]:
        """One context shift for several sequences at once: every sequence forgets positions
        [p0, p1) and everything after moves back by ``p1 - p0``.

        A cell shared by two sequences has ONE position, and ``llama_memory_seq_add`` moves
        every cell tagged with the sequence it names, shared or not. Calling it with the same
        range for each sequence would move a shared cell twice. So sequence by sequence, only
        the cells no earlier call has moved are moved: the moves are returned as
        (seq, from_pos) in order, for the engine to make the same calls on llama.cpp."""
        delta = -(p1 - p0)
        gone: dict[int, list[Forgotten]] = {}
        for s in seqs:
            toks, pos = self._seq(s)
            gone[s] = [
                Forgotten(t, p, s, self.n_shifts)
                for t, p in zip(toks, pos, strict=True)
                if p0 <= p < p1
            ]
        for s in seqs:
            self.seq_rm(s, p0, p1)
        moves: list[tuple[int, int]] = []
        moved: set[int] = set()
        for s in seqs:
            mine = [c for c in self.cells if s in c.seqs and c.pos >= p1]
            fresh = [c.pos for c in mine if not c.seqs & moved]
            if fresh:
                lo = min(fresh)
                if any(c.seqs & moved for c in mine if c.pos >= lo):
                    raise ValueError(
                        f"sequence {s} interleaves cells it shares with cells of its own past "
                        f"position {lo}: one seq_add per sequence cannot shift it"
                    )
                self.seq_add(s, lo, -1, delta)
                moves.append((s, lo))
            moved.add(s)
        for s in seqs:
            self.forgotten.extend(gone[s])
        self.n_shifts += 1
        return gone, moves

    def clear(self) -> None:
        self.cells.clear()
        if self.slots is not None:
            self.slots.clear()
        self.shifted = False
        self._changed()

    def seq_ids(self) -> list[int]:
        if self._ids is None:
            self._ids = sorted({s for c in self.cells for s in c.seqs})
        return list(self._ids)

    def shared(self, a: int, b: int) -> int:
        """Cells both sequences see: the prefix they share after a fork."""
        return sum(1 for c in self.cells if a in c.seqs and b in c.seqs)

    def visible(self, seq: int, pos: int) -> np.ndarray:
        """One row of the causal mask, per sequence: which cells (in mirror order) a token of
        ``seq`` at ``pos`` may attend to. Cells of other sequences are masked out."""
        return np.fromiter(
            (seq in c.seqs and c.pos <= pos for c in self.cells), dtype=bool, count=len(self.cells)
        )

    def mask(self, tokens: list[tuple[int, int]]) -> np.ndarray:
        """The mask for a batch of (seq, pos) rows: shape (len(tokens), used)."""
        if not tokens:
            return np.zeros((0, self.used), dtype=bool)
        return np.stack([self.visible(s, p) for s, p in tokens])

    def check(self, ctx: llama_cpp.llama_context_p) -> list[str]:
        """Compare with llama.cpp's view of every sequence; an empty list means they agree.

        Positions of a sequence are appended in increasing order, so first/last are its
        min/max."""
        mem = llama_cpp.llama_get_memory(ctx)
        problems = []
        for s in sorted({0, *self.seq_ids()}):
            pos = self._seq(s)[1]
            want = (pos[0], pos[-1]) if pos else (-1, -1)
            got = (
                llama_cpp.llama_memory_seq_pos_min(mem, s),
                llama_cpp.llama_memory_seq_pos_max(mem, s),
            )
            if want != got:
                problems.append(f"seq {s}: mirror has pos {want}, llama.cpp has {got}")
        return problems
