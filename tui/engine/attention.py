"""Attention weights copied out of the model's own graph during ``llama_decode``.

For each chosen layer the graph has a node ``kq_soft_max-<layer>``: softmax(Q·Kᵀ·scale + mask),
shape ne = [n_kv, n_tokens, n_head] (numpy: (n_head, n_tokens, n_kv)). Its columns are KV
*cells*, not positions: cell i holds position i only while the cache has never had holes.
After a rewind, a removed range, a context shift or a fork, llama.cpp puts new tokens in
whatever cells are free. So we also copy ``attn_inp_k_idxs``, the cell index llama.cpp writes
each token's K to (the index input of the first ``SET_ROWS`` into ``cache_k_l0``), and tie it
to the engine's own record of that token, the :class:`~tui.engine.kvcache.KVCell` object the
mirror appended for it. The mirror edits those objects in place when positions move (shift)
or sequences are added (fork), so the tie survives both; each write also gets a ``kv_id`` that
never repeats, so weights from different steps can be matched token for token.

One decode gives ``(n_head, n_tokens_in_batch, n_keys)``, key j = the j-th token of the
sequence by position, oldest first. A check keeps the mapping honest: every bit of weight must
fall on mapped cells (masked cells are exactly 0 after softmax), else the decode gets an
``attention_problems`` note instead of silently wrong columns. When one decode carries
several sequences (forks stepped together), the key axis is the union of what they see and
each row is exactly 0 on the other sequences' tokens.
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

    ``extras["attention"]`` becomes ``{layer: array (n_head, n_tokens, n_keys)}``;
    ``extras["attention_keys"]`` ``{"pos", "cell", "kv_id"}`` says, per key column, its
    position, its llama.cpp KV cell and the id of that cell write (plus ``"seqs"`` when the
    decode carried several sequences); ``extras["attention_rows"]["kv_id"]`` names the query
    rows the same way. ``layers`` may change between decodes
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
        # id(KVCell) -> (the mirror's cell object, llama.cpp cell index, kv_id)
        self._slots: dict[int, tuple[Any, int, int]] = {}
        self._by_cell: dict[int, int] = {}  # llama.cpp cell -> id(KVCell) living there
        self._next_kv_id = 0
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

    # -- which llama.cpp cell holds which token ------------------------------------------------
    def _remember(self, engine: Engine, call: DecodeCall, cells: list[int]) -> str | None:
        """Tie the mirror cells this decode appended to the llama.cpp cells it wrote."""
        n = call.n_tokens
        new = engine.kv.cells[-n:] if n else []
        if len(new) != n or any(
            c.token != t.id or c.pos != t.pos for c, t in zip(new, call.tokens, strict=True)
        ):
            return "the engine's KV mirror does not end with this batch; cell map lost"
        for obj, cell in zip(new, cells, strict=True):
            old = self._by_cell.get(cell)
            if old is not None:  # llama.cpp reused the cell: whatever we knew there is gone
                self._slots.pop(old, None)
            self._slots[id(obj)] = (obj, cell, self._next_kv_id)
            self._by_cell[cell] = id(obj)
            self._next_kv_id += 1
        if len(self._slots) > len(engine.kv.cells):  # drop cells the mirror has freed
            live = {id(c) for c in engine.kv.cells}
            for key in [k for k in self._slots if k not in live]:
                _, cell, _ = self._slots.pop(key)
                if self._by_cell.get(cell) == key:
                    del self._by_cell[cell]
        return None

    def live_keys(self, engine: Engine, seq: int = 0) -> list[tuple[int, int, int, int]]:
        """(pos, llama.cpp cell, kv_id, token) of every token sequence ``seq`` sees, by
        position. Raises KeyError for a token this capture never saw decoded."""
        objs = sorted((c for c in engine.kv.cells if seq in c.seqs), key=lambda c: c.pos)
        out = []
        for c in objs:
            _, cell, kv_id = self._slots[id(c)]
            out.append((c.pos, cell, kv_id, c.token))
        return out

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
        else:
            lost = self._remember(engine, call, [int(c) for c in cells])
            if lost:
                problems.append(lost)
        if problems:
            self._slots.clear()
            self._by_cell.clear()
        if self._skipped:
            problems.append("attention not captured: it would exceed the capture memory limit")
        elif self.layers and not problems:
            seqs = sorted({s for t in call.tokens for s in t.seq_ids})
            got = self._assemble(engine, seqs, call, problems)
            if got is not None:
                extras["attention"], extras["attention_keys"] = got
                n = call.n_tokens
                extras["attention_rows"] = {
                    "kv_id": list(range(self._next_kv_id - n, self._next_kv_id))
                }
                if len(seqs) > 1:
                    extras["attention_rows"]["seq"] = [list(t.seq_ids) for t in call.tokens]
        if problems:
            extras["attention_problems"] = problems

    def _assemble(
        self, engine: Engine, seqs: list[int], call: DecodeCall, problems: list[str]
    ) -> tuple[dict[int, np.ndarray], dict[str, list[Any]]] | None:
        """Key columns: every token the batch's sequences see, by (pos, kv_id). With several
        sequences in one decode (forks stepped together), a row gives exactly 0 to the keys
        of the other sequences: the mask hides them."""
        keys_by_id: dict[int, tuple[int, int, int, int]] = {}
        key_seqs: dict[int, list[int]] = {}
        for seq in seqs:
            try:
                for k in self.live_keys(engine, seq):
                    keys_by_id[k[2]] = k
                    key_seqs.setdefault(k[2], []).append(seq)
            except KeyError:
                problems.append(f"a token of sequence {seq} was never seen decoded by the capture")
                return None
        keys = sorted(keys_by_id.values(), key=lambda k: (k[0], k[2]))
        cols = np.array([k[1] for k in keys], dtype=np.int64)
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
        info: dict[str, list[Any]] = {
            "pos": [k[0] for k in keys],
            "cell": [k[1] for k in keys],
            "kv_id": [k[2] for k in keys],
        }
        if len(seqs) > 1:
            info["seqs"] = [key_seqs[k[2]] for k in keys]
        return out, info


@dataclass
class ContextAttention:
    """One layer's attention over the whole current context, assembled from step records.

    Rows and columns are the sequence's tokens in position order. Row i comes from the decode
    that computed token i (a prefill block, or one step); rows never captured (attention was
    off, or another layer was chosen then) are NaN and ``captured[i]`` is False. A row
    computed while tokens existed that have since gone (rewind, context shift) keeps only the
    weights on tokens still there, so it sums to less than 1."""

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


def find_capture(engine: Engine) -> AttentionCapture | None:
    for obs in engine.observers:
        if isinstance(obs, AttentionCapture):
            return obs
    return None


def context_attention(engine: Engine, layer: int, seq: int = 0) -> ContextAttention | None:
    """Rows for every token now in sequence ``seq``, each from the latest record that decoded
    it, matched token for token by ``kv_id``. None without a capture or any row of ``layer``.

    Reads only Python objects (records, the mirror); call it on the thread that owns the
    engine, as everything else."""
    cap = find_capture(engine)
    if cap is None:
        return None
    try:
        keys = cap.live_keys(engine, seq)
    except KeyError:
        return None
    index = {k[2]: i for i, k in enumerate(keys)}
    n = len(keys)
    w: np.ndarray | None = None
    captured = np.zeros(n, dtype=bool)
    for rec in engine.records:
        att = rec.extras.get("attention")
        if not att or layer not in att:
            continue
        a = att[layer]
        if w is None:
            w = np.full((a.shape[0], n, n), np.nan, dtype=np.float32)
        kcols = [index.get(k) for k in rec.extras["attention_keys"]["kv_id"]]
        keep = np.array([c is not None for c in kcols], dtype=bool)
        dst = np.array([c for c in kcols if c is not None], dtype=np.int64)
        for i, kv_id in enumerate(rec.extras["attention_rows"]["kv_id"]):
            r = index.get(kv_id)
            if r is None:
                continue
            row = np.zeros((a.shape[0], n), dtype=np.float32)
            row[:, dst] = a[:, i, keep]
            w[:, r, :] = row
            captured[r] = True
    if w is None:
        return None
    return ContextAttention(layer, [k[0] for k in keys], [k[3] for k in keys], w, captured)


def top_attended(
    row: np.ndarray, k: int = 5, *, upto: int | None = None
) -> list[tuple[int, float]]:
    """The ``k`` key columns a query row gives most weight to, as (column, weight)."""
    r = np.nan_to_num(np.asarray(row[: upto if upto is not None else len(row)], dtype=np.float64))
    order = np.argsort(-r, kind="stable")[:k]
    return [(int(i), float(r[i])) for i in order]
