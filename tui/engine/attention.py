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
        self._key_cache: dict[int, _KeyCache] = {}
        # layer -> kv_id of a query token -> where its row of weights is (see context_attention)
        self.row_sources: dict[int, dict[int, RowSource]] = {}

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
    def _remember(
        self, engine: Engine, call: DecodeCall, cells: list[int]
    ) -> list[tuple[Any, int, int]] | str:
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
        self, engine: Engine, seq: int = 0, fresh: list[tuple[Any, int, int]] | None = None
    ) -> np.ndarray:
        """:meth:`live_keys` as an int64 array (4, n): pos, llama.cpp cell, kv_id, token.

        Kept per sequence and extended in place while the mirror only grows (a decode step
        appends its tokens), so a step costs O(new tokens), not O(context). Any other edit of
        the mirror (rewind, shift, fork) gives the sequence a new token list, and the keys are
        rebuilt from the mirror. ``fresh`` are the slots this decode added (``_remember``)."""
        ref = engine.kv._seq(seq)  # replaced by the mirror on every edit other than add()
        ent = self._key_cache.get(seq)
        if ent is not None and ent.ref is ref:
            add = [(o.pos, cell, kid, o.token) for o, cell, kid in fresh or () if seq in o.seqs]
            if ent.n + len(add) == len(ref[0]) and ent.extend(add):
                return ent.rows
        rows = np.array(self.live_keys(engine, seq), dtype=np.int64).reshape(-1, 4).T
        ent = self._key_cache[seq] = _KeyCache(ref, rows)
        return ent.rows

    @property
    def next_kv_id(self) -> int:
        """The kv_id the next cell write gets (every id handed out so far is below it)."""
        return self._next_kv_id

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

    def peek(self, name: bytes, ptr: int, graph: int) -> bool:
        # The first K store of a graph: SET_ROWS(cache_k_l0 view, Kcur, k_idxs). k_idxs is a
        # graph input, so its data is there before the store runs: read it in the ask phase.
        if self._kidx_graph < graph:
            src = src_ptr(ptr, 1)
            if src and op_name(ptr) == "SET_ROWS" and self._get_name(src) == K_IDXS_INPUT:
                self._kidx.append(read_tensor(src).reshape(-1))
                self._kidx_graph = graph
                return True
        return False

    def on_data(self, name: bytes, ptr: int, graph: int) -> None:
        layer = self._soft_names.get(name)
        if layer is not None:
            self._soft.setdefault(layer, []).append(read_tensor(ptr))
        else:
            super().on_data(name, ptr, graph)

    def after_decode(self, engine: Engine, call: DecodeCall, extras: dict[str, Any]) -> None:
        super().after_decode(engine, call, extras)
        problems: list[str] = []
        cells = np.concatenate(self._kidx) if self._kidx else np.empty(0, np.int64)
        fresh: list[tuple[Any, int, int]] = []
        if len(cells) != call.n_tokens:
            problems.append(
                f"saw {len(cells)} KV cell indices for {call.n_tokens} tokens; cell map lost"
            )
        else:
            got = self._remember(engine, call, cells.tolist())
            if isinstance(got, str):
                problems.append(got)
            else:
                fresh = got
        if problems:
            self._slots.clear()
            self._by_cell.clear()
            self._key_cache.clear()
        if self._skipped:
            problems.append("attention not captured: it would exceed the capture memory limit")
        elif self.layers and not problems:
            seqs = sorted({s for t in call.tokens for s in t.seq_ids})
            att = self._assemble(engine, seqs, fresh, call, problems)
            if att is not None:
                extras["attention"], extras["attention_keys"], key_ids = att
                n = call.n_tokens
                rows = range(self._next_kv_id - n, self._next_kv_id)
                extras["attention_rows"] = {"kv_id": list(rows)}
                self._note_rows(extras["attention"], rows, key_ids)
                if len(seqs) > 1:
                    extras["attention_rows"]["seq"] = [list(t.seq_ids) for t in call.tokens]
        if problems:
            extras["attention_problems"] = problems

    def _assemble(
        self,
        engine: Engine,
        seqs: list[int],
        fresh: list[tuple[Any, int, int]],
        call: DecodeCall,
        problems: list[str],
    ) -> tuple[dict[int, np.ndarray], dict[str, list[Any]], np.ndarray] | None:
        """Key columns: every token the batch's sequences see, by (pos, kv_id). With several
        sequences in one decode (forks stepped together), a row gives exactly 0 to the keys
        of the other sequences: the mask hides them."""
        key_seqs: dict[int, list[int]] = {}
        try:
            if len(seqs) == 1:
                keys = self.key_rows(engine, seqs[0], fresh)
            else:
                by_id: dict[int, tuple[int, int, int, int]] = {}
                for seq in seqs:
                    for k in self.live_keys(engine, seq):
                        by_id[k[2]] = k
                        key_seqs.setdefault(k[2], []).append(seq)
                ordered = sorted(by_id.values(), key=lambda k: (k[0], k[2]))
                keys = np.array(ordered, dtype=np.int64).reshape(-1, 4).T
        except KeyError:
            problems.append(
                "a token of this batch's sequences was never seen decoded by the capture"
            )
            return None
        cols = keys[1]
        top_col = int(cols.max()) if len(cols) else -1
        n_tokens = call.n_tokens
        layers: list[int] = []
        fulls: list[np.ndarray] = []
        for layer in self.layers:
            parts = self._soft.get(layer, [])
            if not parts:
                problems.append(f"the graph had no node {SOFTMAX_NODE.format(layer)}")
                continue
            if len(parts) == 1:
                full = parts[0][0]
                n_kv = full.shape[-1]
            else:
                n_kv = max(p.shape[-1] for p in parts)
                full = np.concatenate(
                    [np.pad(p[0], ((0, 0), (0, 0), (0, n_kv - p.shape[-1]))) for p in parts],
                    axis=1,
                )
            if full.shape[1] != n_tokens or top_col >= n_kv:
                problems.append(f"layer {layer}: unexpected shape {full.shape}")
                continue
            layers.append(layer)
            fulls.append(full)
        out: dict[int, np.ndarray] = {}
        if fulls:
            # All layers at once, (n_layers, n_head, n_tokens, n_kv): one gather of the
            # columns, one count. Every bit of weight must be on the mapped cells (the rest is
            # masked: exactly 0), so the gather keeps every nonzero weight.
            # (Stacking copies: only small ones, a step's; a prefill's stay one per layer.)
            small = len(fulls) > 1 and fulls[0].size * len(fulls) <= 1 << 20
            same = small and all(f.shape == fulls[0].shape for f in fulls)
            groups = [np.stack(fulls)] if same else [f[None] for f in fulls]
            for g in groups:
                w = g[..., cols]
                lost = np.count_nonzero(g, axis=(1, 2, 3)) != np.count_nonzero(w, axis=(1, 2, 3))
                for i in range(len(g)):
                    layer = layers[len(out)]
                    if lost[i]:
                        other = np.ones(g.shape[-1], dtype=bool)
                        other[cols] = False
                        outside = float(g[i][..., other].max(initial=0.0))
                        problems.append(
                            f"layer {layer}: weight {outside:.3g} on cells not in the sequence"
                        )
                    out[layer] = w[i]
        if len(seqs) == 1:
            pos, cell, kv_id = (lst.copy() for lst in self._key_cache[seqs[0]].lists)
        else:
            pos, cell, kv_id = keys[0].tolist(), keys[1].tolist(), keys[2].tolist()
        info: dict[str, list[Any]] = {"pos": pos, "cell": cell, "kv_id": kv_id}
        if len(seqs) > 1:
            info["seqs"] = [key_seqs[k] for k in info["kv_id"]]
        return out, info, keys[2]

    def _note_rows(self, att: dict[int, np.ndarray], rows: range, key_ids: np.ndarray) -> None:
        """Remember where each query row's weights are, per layer; forget rows of tokens that
        are gone once they outnumber the live ones (amortized O(1) per token)."""
        for layer, w in att.items():
            src = self.row_sources.setdefault(layer, {})
            for r, kv_id in enumerate(rows):
                src[kv_id] = (w, r, key_ids)
            if len(src) > 2 * len(self._slots) + 256:
                live = {slot[2] for slot in self._slots.values()}
                self.row_sources[layer] = {k: v for k, v in src.items() if k in live}


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


# Where one query row's weights live: (the decode's weights for that layer, shape (n_head,
# n_rows, n_keys), the row in it, the kv_id of each of its key columns).
RowSource = tuple[np.ndarray, int, np.ndarray]


class ContextAttention:
    """One layer's attention over the whole current context, row by row.

    Rows and columns are the sequence's tokens in position order. Row i comes from the decode
    that computed token i (a prefill block, or one step); rows never captured (attention was
    off, or another layer was chosen then) are NaN and ``captured[i]`` is False. A row
    computed while tokens existed that have since gone (rewind, context shift) keeps only the
    weights on tokens still there, so it sums to less than 1.

    Nothing n × n is built: each row points at the decode's own array and is laid out over the
    current columns when asked for (:meth:`row`), so the pane pays for the rows it draws.
    ``weights`` and :meth:`head` build the dense matrix for small contexts and tests. Made
    from a dense ``weights`` array (n_head, n, n) instead of ``sources``, it reads that."""

    def __init__(
        self,
        layer: int,
        positions: list[int],
        tokens: list[int],
        weights: np.ndarray | None = None,
        captured: np.ndarray | None = None,
        *,
        sources: list[RowSource | None] | None = None,
        key_ids: np.ndarray | None = None,
        id_bound: int | None = None,
    ) -> None:
        self.layer = layer
        self.positions = positions
        self.tokens = tokens
        n = len(positions)
        self._dense = weights
        self._sources = sources
        self._cols: np.ndarray | None = None  # kv_id -> current column (-1: gone)
        if weights is not None:
            self.n_head = int(weights.shape[0])
            self.captured = (
                np.asarray(captured, dtype=bool)
                if captured is not None
                else ~np.isnan(weights[0, :, 0])
            )
            return
        if sources is None or key_ids is None:
            raise ValueError("ContextAttention needs dense weights or row sources and key ids")
        self.captured = np.fromiter((s is not None for s in sources), dtype=bool, count=n)
        first = next((s for s in sources if s is not None), None)
        self.n_head = int(first[0].shape[0]) if first is not None else 0
        self._key_ids = np.asarray(key_ids, dtype=np.int64)
        self._key_addr = _addr(self._key_ids)
        self._id_bound = id_bound

    def _columns(self) -> np.ndarray:
        """kv_id -> current column (-1: gone), built on first use."""
        if self._cols is None:
            ids = self._key_ids
            # kv_ids are handed out in order, so every id a row names is below id_bound.
            bound = int(ids.max(initial=-1)) + 1 if self._id_bound is None else self._id_bound
            self._cols = np.full(bound, -1, dtype=np.int64)
            self._cols[ids] = np.arange(len(ids))
        return self._cols

    def row(self, i: int, head: int | None) -> np.ndarray:
        """Query row ``i`` over the current keys (n,), float32: head ``head`` or the mean over
        heads for None. NaN when the row was not captured; 0 where the decode gave no weight
        or the key did not exist yet."""
        n = len(self.positions)
        if self._dense is not None:
            w = self._dense[:, i, :]
            return np.asarray(w[head] if head is not None else w.mean(axis=0))
        assert self._sources is not None
        src = self._sources[i]
        if src is None:
            return np.full(n, np.nan, dtype=np.float32)
        arr, r, ids = src
        vals = arr[head, r] if head is not None else arr[:, r].mean(axis=0)
        out = np.zeros(n, dtype=np.float32)
        m = len(ids)
        if m <= n and ids.strides == self._key_ids.strides and _addr(ids) == self._key_addr:
            # The decode's key ids are the start of the same, append-only id buffer as the
            # current keys: column j is key j, no lookup needed.
            out[:m] = vals
            return out
        cols = self._columns()[ids]
        keep = cols >= 0
        out[cols[keep]] = vals[keep]
        return out

    def head(self, h: int | None) -> np.ndarray:
        """(n, n) weights of head ``h``, or the mean over heads for None (dense: O(n²))."""
        if self._dense is not None:
            return np.asarray(self._dense.mean(axis=0) if h is None else self._dense[h])
        n = len(self.positions)
        return np.stack([self.row(i, h) for i in range(n)]) if n else np.zeros((0, 0), np.float32)

    @property
    def weights(self) -> np.ndarray:
        """(n_head, n, n), built on first use from the rows (dense: O(n_head·n²))."""
        if self._dense is None:
            self._dense = np.stack([self.head(h) for h in range(self.n_head)])
            self._sources = None
        return self._dense


def _addr(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def find_capture(engine: Engine) -> AttentionCapture | None:
    for obs in engine.observers:
        if isinstance(obs, AttentionCapture):
            return obs
    return None


def context_attention(engine: Engine, layer: int, seq: int = 0) -> ContextAttention | None:
    """Rows for every token now in sequence ``seq``, each from the decode that computed it,
    matched token for token by ``kv_id``. None without a capture or any row of ``layer``.

    O(n) in the context (a lookup per row), nothing n × n. Call it on the thread that owns
    the engine, as everything else."""
    cap = find_capture(engine)
    if cap is None:
        return None
    try:
        keys = cap.key_rows(engine, seq)
    except KeyError:
        return None
    return rows_from_sources(layer, keys, cap.row_sources.get(layer, {}), cap.next_kv_id)


def rows_from_sources(
    layer: int, keys: np.ndarray, src: dict[int, RowSource], id_bound: int
) -> ContextAttention | None:
    """The :class:`ContextAttention` for key rows ``keys`` (4, n: pos, cell, kv_id, token)
    from the per-row sources ``src`` (kv_id -> RowSource). One dict lookup per row."""
    if not src:
        return None
    get = src.get
    sources = [get(k) for k in keys[2].tolist()]
    if not any(s is not None for s in sources):
        return None
    return ContextAttention(
        layer,
        keys[0].tolist(),
        keys[3].tolist(),
        sources=sources,
        key_ids=keys[2],
        id_bound=id_bound,
    )


def top_attended(
    row: np.ndarray, k: int = 5, *, upto: int | None = None
) -> list[tuple[int, float]]:
    """The ``k`` key columns a query row gives most weight to, as (column, weight); equal
    weights in column order. O(n): a partition finds the k-th weight, only the columns at or
    above it are sorted."""
    r = np.nan_to_num(np.asarray(row[: upto if upto is not None else len(row)], dtype=np.float64))
    if k <= 0 or not len(r):
        return []
    if k < len(r):
        kth = np.partition(r, len(r) - k)[len(r) - k]
        cand = np.flatnonzero(r >= kth)  # k or more (ties), in column order
    else:
        cand = np.arange(len(r))
    order = cand[np.argsort(-r[cand], kind="stable")][:k]
    return [(int(i), float(r[i])) for i in order]
