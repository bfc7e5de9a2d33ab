"""Feed back: a mirror of the KV cache cells, and what they cost in bytes.

Each token that has been decoded leaves one cell behind: its K and V vectors for every layer,
tagged with its position and the sequences that may see it. The mirror is our own record of
those cells; after every step it is checked against llama.cpp's ``llama_memory_seq_pos_min/max``
so the picture on screen can be trusted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import llama_cpp

from . import ggml

# llama_kv_cache: size =   90.00 MiB (  4096 cells,  30 layers,  1/1 seqs), K (f16): ...
_KV_LOG = re.compile(
    r"llama_kv_cache(?:_\w+)?: size =\s*([\d.]+) MiB \(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)/(\d+) seqs\),"
    r" K \((\w+)\):\s*([\d.]+) MiB, V \((\w+)\):\s*([\d.]+) MiB"
)


@dataclass
class KVCell:
    token: int
    pos: int
    seqs: set[int]


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


def parse_kv_log(lines: list[str]) -> list[KVLogReport]:
    out = []
    for line in lines:
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
                )
            )
    return out


@dataclass
class KVMirror:
    n_ctx: int
    cells: list[KVCell] = field(default_factory=list)

    @property
    def used(self) -> int:
        return len(self.cells)

    def tokens(self, seq: int = 0) -> list[int]:
        return [c.token for c in self.cells if seq in c.seqs]

    def positions(self, seq: int = 0) -> list[int]:
        return [c.pos for c in self.cells if seq in c.seqs]

    def add(self, token: int, pos: int, seqs: tuple[int, ...]) -> None:
        self.cells.append(KVCell(token, pos, set(seqs)))

    def seq_rm(self, seq: int, p0: int, p1: int = -1) -> None:
        """Drop ``seq`` from cells with p0 <= pos < p1 (p1 < 0: to the end); free empty cells."""
        hi = p1 if p1 >= 0 else 1 << 62
        for c in self.cells:
            if seq in c.seqs and p0 <= c.pos < hi:
                c.seqs.discard(seq)
        self.cells = [c for c in self.cells if c.seqs]

    def seq_cp(self, src: int, dst: int) -> None:
        for c in self.cells:
            if src in c.seqs:
                c.seqs.add(dst)

    def seq_add(self, seq: int, p0: int, p1: int, delta: int) -> None:
        hi = p1 if p1 >= 0 else 1 << 62
        for c in self.cells:
            if seq in c.seqs and p0 <= c.pos < hi:
                c.pos += delta

    def clear(self) -> None:
        self.cells.clear()

    def seq_ids(self) -> list[int]:
        return sorted({s for c in self.cells for s in c.seqs})

    def check(self, ctx: llama_cpp.llama_context_p) -> list[str]:
        """Compare with llama.cpp's view of every sequence; an empty list means they agree."""
        mem = llama_cpp.llama_get_memory(ctx)
        problems = []
        seqs = set(self.seq_ids()) | {0}
        for s in sorted(seqs):
            pos = self.positions(s)
            want = (min(pos), max(pos)) if pos else (-1, -1)
            got = (
                llama_cpp.llama_memory_seq_pos_min(mem, s),
                llama_cpp.llama_memory_seq_pos_max(mem, s),
            )
            if want != got:
                problems.append(f"seq {s}: mirror has pos {want}, llama.cpp has {got}")
        return problems
