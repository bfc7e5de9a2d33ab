"""Attention weights copied out of the model's own graph during ``llama_decode``.

For each chosen layer the graph has a node ``kq_soft_max-<layer>``: softmax(Q·Kᵀ·scale + mask),
shape ne = [n_kv, n_tokens, n_head] (numpy: (n_head, n_tokens, n_kv)). Its columns are KV
*cells*, not positions: cell i holds position i only while the cache has never had holes.
After a rewind, a removed range or a reused slot, llama.cpp may put a new token in any free
cell. So we also copy ``attn_inp_k_idxs``, the cell index llama.cpp writes each token's K to
(the index input of the layer-0 ``SET_ROWS`` into ``cache_k_l0``), keep a map
(seq, pos) -> cell, and reorder the columns by position. The result for one decode is
``(n_head, n_tokens_in_batch, n_keys)`` with key j = the j-th position of the sequence, oldest
first. A check makes the mapping honest: all weight must fall on mapped columns (masked cells
are exactly 0 after softmax), otherwise the decode gets an ``attention_problems`` note.

Assumptions, checked rather than trusted: each decode's tokens belong to one sequence; the
positions of a sequence only change through decodes this capture saw, or through
:meth:`AttentionCapture.note_seq_add` / :meth:`note_seq_cp` (context shift, fork).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import TokenstepError
from .graph import GraphTap, op_name, read_tensor, src_ptr

if TYPE_CHECKING:
    from .batch import DecodeCall
    from .session import Engine

SOFTMAX_NODE = "kq_soft_max-{}"
K_IDXS_INPUT = b"attn_inp_k_idxs"


def parse_layers(spec: str, n_layer: int | None = None) -> list[int]:
    """``"3"``, ``"0,5,29"`` or ``"all"`` -> layer indices. With ``n_layer`` also check range."""
    text = spec.strip().lower()
    if text == "all":
        if n_layer is None:
            return []
        return list(range(n_layer))
    out: list[int] = []
    for part in text.split(","):
        try:
            out.append(int(part))
        except ValueError:
            raise TokenstepError(
                f"--attention takes a layer number, a comma list or 'all', not {spec!r}."
            ) from None
    if n_layer is not None:
        bad = [x for x in out if not 0 <= x < n_layer]
        if bad:
            raise TokenstepError(
                f"--attention {bad[0]} is out of range: this model has {n_layer} layers "
                f"(0 to {n_layer - 1})."
            )
    return sorted(set(out))


class AttentionCapture(GraphTap):
    """Capture ``kq_soft_max`` of chosen layers after each decode (a DecodeObserver).

    ``extras["attention"]`` becomes ``{layer: array (n_head, n_tokens, n_keys)}`` and
    ``extras["attention_keys"]`` ``{"pos": [...], "cell": [...]}`` says which position and
    which KV cell each key column is. ``layers`` may change between decodes
    (:meth:`set_layers`); an empty list captures no weights (the callback stays installed
    because llama.cpp fixes ``cb_eval`` when the context is created, and the cell map keeps
    following the cache)."""

    def __init__(
        self,
        n_layer: int,
        layers: Iterable[int] = (0,),
        *,
        census: bool = False,
        profile: bool = False,
        capture: tuple[str, ...] = (),
        max_bytes: int = 1 << 30,
    ) -> None:
        super().__init__(
            capture=capture,
            census=census,
            profile=profile,
            n_layer=n_layer,
            max_bytes=max_bytes,
            flash_attn_off=True,
        )
        self._extra_names = set(self.wanted)
        self.layers: list[int] = []
        self.set_layers(layers)
        self._cells: dict[tuple[int, int], int] = {}  # (seq, pos) -> cell
        self._cell_keys: dict[int, set[tuple[int, int]]] = {}
        self._kidx: list[np.ndarray] = []
        self._kidx_graph = -1
        self._soft: dict[int, list[np.ndarray]] = {}

    def set_layers(self, layers: Iterable[int]) -> None:
        chosen = sorted(set(int(x) for x in layers))
        bad = [x for x in chosen if not 0 <= x < self.n_layer]
        if bad:
            raise TokenstepError(
                f"layer {bad[0]} is out of range: this model has {self.n_layer} layers."
            )
        self.layers = chosen
        self._soft_names = {SOFTMAX_NODE.format(x).encode(): x for x in chosen}
        self.wanted = set(self._extra_names) | set(self._soft_names)

    # -- context shift / fork, for code that moves cells without a decode ------------------------
    def note_seq_add(self, seq: int, p0: int, p1: int, delta: int) -> None:
        """Mirror ``llama_memory_seq_add``: positions p0 <= pos < p1 (p1 < 0: to the end) move."""
        hi = p1 if p1 >= 0 else 1 << 62
        moved = {k: c for k, c in self._cells.items() if k[0] == seq and p0 <= k[1] < hi}
        for k in moved:
            del self._cells[k]
        for (s, p), c in moved.items():
            self._write(c, [s], p + delta)

    def note_seq_cp(self, src: int, dst: int) -> None:
        """Mirror ``llama_memory_seq_cp``: dst now sees src's cells."""
        for (s, p), c in list(self._cells.items()):
            if s == src:
                self._cells[(dst, p)] = c
                self._cell_keys.setdefault(c, set()).add((dst, p))

    def _write(self, cell: int, seqs: Iterable[int], pos: int) -> None:
        for key in self._cell_keys.pop(cell, set()):
            if self._cells.get(key) == cell:
                del self._cells[key]
        keys = {(s, pos) for s in seqs}
        for k in keys:
            self._cells[k] = cell
        self._cell_keys[cell] = keys

    # -- GraphTap hooks --------------------------------------------------------------------------
    def before_decode(self, engine: Engine, call: DecodeCall) -> None:
        super().before_decode(engine, call)
        self._kidx = []
        self._kidx_graph = -1
        self._soft = {}

    hook_prefix = b"cache_k_l"

    def wants(self, name: bytes, ptr: int) -> bool:
        # The first K store of a graph: SET_ROWS(cache_k_l0 view, Kcur, k_idxs).
        if self._kidx_graph < self._graph:
            src = src_ptr(ptr, 1)
            if src and op_name(ptr) == "SET_ROWS":
                return bool(self._get_name(src) == K_IDXS_INPUT)
        return False

    def on_data(self, name: bytes, ptr: int, graph: int) -> None:
        layer = self._soft_names.get(name)
        if layer is not None:
            self._soft.setdefault(layer, []).append(read_tensor(ptr))
            return
        if name in self._extra_names:
            super().on_data(name, ptr, graph)
            return
        src = src_ptr(ptr, 1)
        if src and self._kidx_graph < graph:
            self._kidx.append(read_tensor(src).reshape(-1))
            self._kidx_graph = graph

    def after_decode(self, engine: Engine, call: DecodeCall, extras: dict[str, Any]) -> None:
        super().after_decode(engine, call, extras)
        problems: list[str] = []
        cells = np.concatenate(self._kidx) if self._kidx else np.empty(0, np.int64)
        if len(cells) != call.n_tokens:
            problems.append(
                f"saw {len(cells)} KV cell indices for {call.n_tokens} tokens; cell map lost"
            )
            self._cells.clear()
            self._cell_keys.clear()
        else:
            for t, c in zip(call.tokens, cells.tolist(), strict=True):
                self._write(int(c), t.seq_ids, t.pos)
        seqs = {t.seq_ids for t in call.tokens}
        if self._skipped:
            problems.append("attention not captured: it would exceed the capture memory limit")
        elif self.layers and not problems:
            if len(seqs) != 1 or len(next(iter(seqs))) != 1:
                problems.append("attention is only captured for decodes of a single sequence")
            else:
                seq = next(iter(seqs))[0]
                got = self._assemble(engine, seq, call, problems)
                if got is not None:
                    extras["attention"], extras["attention_keys"] = got
        if problems:
            extras["attention_problems"] = problems

    def _assemble(
        self, engine: Engine, seq: int, call: DecodeCall, problems: list[str]
    ) -> tuple[dict[int, np.ndarray], dict[str, list[int]]] | None:
        positions = engine.kv.positions(seq)
        missing = [p for p in positions if (seq, p) not in self._cells]
        if missing:
            problems.append(f"no KV cell known for position {missing[0]} of sequence {seq}")
            return None
        cols = np.array([self._cells[(seq, p)] for p in positions], dtype=np.int64)
        out: dict[int, np.ndarray] = {}
        for layer in self.layers:
            parts = self._soft.get(layer, [])
            if not parts:
                problems.append(f"the graph had no node {SOFTMAX_NODE.format(layer)}")
                continue
            n_kv = max(p.shape[-1] for p in parts)
            full = np.concatenate(
                [np.pad(p[0], ((0, 0), (0, 0), (0, n_kv - p.shape[-1]))) for p in parts], axis=1
            )
            if full.shape[1] != call.n_tokens or (len(cols) and cols.max() >= n_kv):
                problems.append(f"layer {layer}: unexpected shape {full.shape}")
                continue
            w = full[:, :, cols]
            other = np.ones(n_kv, dtype=bool)
            other[cols] = False
            outside = float(full[:, :, other].max(initial=0.0))
            if outside > 0.0:
                problems.append(f"layer {layer}: weight {outside:.3g} on cells not in the sequence")
            out[layer] = w
        keys = {"pos": [int(p) for p in positions], "cell": cols.tolist()}
        return out, keys


@dataclass
class ContextAttention:
    """One layer's attention over the whole current context, assembled from step records.

    Rows and columns are the sequence's tokens in position order. A row is the decode that
    computed that token (prefill rows, then one row per generated token); rows never captured
    (attention was off then) are NaN and ``captured[i]`` is False."""

    layer: int
    positions: list[int]
    tokens: list[int]
    weights: np.ndarray  # (n_head, n, n)
    captured: np.ndarray  # (n,) bool

    @property
    def n_head(self) -> int:
        return int(self.weights.shape[0])

    def head(self, h: int | None) -> np.ndarray:
        """(n, n) weights of head ``h``, or the mean over heads for None."""
        if h is None:
            return np.asarray(self.weights.mean(axis=0))
        return np.asarray(self.weights[h])


def context_attention(engine: Engine, layer: int, seq: int = 0) -> ContextAttention | None:
    """Rows for every token now in sequence ``seq``, from the latest record that decoded it.

    None when no record holds this layer."""
    positions = engine.kv.positions(seq)
    tokens = engine.kv.tokens(seq)
    index = {p: i for i, p in enumerate(positions)}
    n = len(positions)
    w: np.ndarray | None = None
    captured = np.zeros(n, dtype=bool)
    for rec in engine.records:
        att = rec.extras.get("attention")
        if not att or layer not in att:
            continue
        a = att[layer]
        if w is None:
            w = np.full((a.shape[0], n, n), np.nan, dtype=np.float32)
        kcols = [index.get(p) for p in rec.extras["attention_keys"]["pos"]]
        keep = np.array([c is not None for c in kcols], dtype=bool)
        dst = np.array([c for c in kcols if c is not None], dtype=np.int64)
        for i, t in enumerate(rec.call.tokens):
            r = index.get(t.pos)
            if r is None or seq not in t.seq_ids or tokens[r] != t.id:
                continue
            row = np.zeros((a.shape[0], n), dtype=np.float32)
            row[:, dst] = a[:, i, keep]
            w[:, r, :] = row
            captured[r] = True
    if w is None:
        return None
    return ContextAttention(layer, positions, tokens, w, captured)


def top_attended(
    row: np.ndarray, k: int = 5, *, upto: int | None = None
) -> list[tuple[int, float]]:
    """The ``k`` key columns a query row gives most weight to, as (column, weight)."""
    r = np.nan_to_num(np.asarray(row[: upto if upto is not None else len(row)], dtype=np.float64))
    order = np.argsort(-r, kind="stable")[:k]
    return [(int(i), float(r[i])) for i in order]
