"""One layer's attention over the whole current context, assembled for the Attention pane.

The capture (:mod:`tui.engine.observe.attention_capture`) keeps, per layer, where each query token's
row of weights is: the array of the decode that computed that token, its row there and the
kv_id of each of its key columns. :func:`context_attention` lines those rows up over the
tokens the sequence holds now, matched token for token by kv_id, without building anything
n × n: a row is laid out over the current keys only when the pane draws it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .attention_capture import RowSource, find_capture

if TYPE_CHECKING:
    from ..run.backend import Backend


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
        w = arr[:, r] if isinstance(arr, np.ndarray) else arr.row(r)  # in memory, or on disk
        vals = w[head] if head is not None else w.mean(axis=0)
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


def context_attention(engine: Backend, layer: int, seq: int = 0) -> ContextAttention | None:
    """Rows for every token now in sequence ``seq``, each from the decode that computed it,
    matched token for token by ``kv_id``. None without a capture or any row of ``layer``.

    O(n) in the context (a lookup per row), nothing n × n. Call it on the thread that owns
    the engine, as everything else."""
    local = engine.local  # a server backend captures nothing
    cap = find_capture(local) if local is not None else None
    if cap is None or local is None:
        return None
    try:
        keys = cap.key_rows(local, seq)
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
