"""Attention weights copied out of the model's own graph during ``llama_decode``.

Per layer the node ``kq_soft_max-<layer>`` holds softmax(Q·Kᵀ·scale + mask), ne = [n_kv,
n_tokens, n_head]. Its columns are KV *cells*, not positions: after a rewind, a shift or a
fork llama.cpp puts new tokens in whatever cells are free. So ``attn_inp_k_idxs`` (the index
input of the first ``SET_ROWS`` into ``cache_k_l0``) is copied too and tied to the mirror's
:class:`~tui.engine.model.kvcache.KVCell` for that token (:mod:`tui.engine.observe.cell_map`),
which moves with shifts and forks and carries a ``kv_id`` that never repeats. One decode gives
``(n_head, n_tokens_in_batch, n_keys)``, keys by position. Every bit of weight must fall on
mapped cells (masked cells are exactly 0), else the decode gets an ``attention_problems``
note; with several sequences in one decode each row is exactly 0 on the others' tokens.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..model.errors import TokenstepError
from ..record.attention_store import StoredArray, WeightStore
from .cell_map import CellMap, Slot
from .graph_tap import GraphTap
from .tensor import get_name, op_name, read_tensor, src_ptr

if TYPE_CHECKING:
    from ..run.backend import LocalSession
    from ..run.batch import DecodeCall
    from ..run.parts import ObservedParts

SOFTMAX_NODE = "kq_soft_max-{}"
K_IDXS_INPUT = b"attn_inp_k_idxs"

# Where one query row's weights live: (the decode's weights for that layer, shape (n_head,
# n_rows, n_keys), in memory or moved to the weight store; the row in it; the kv_id of each of
# its key columns).
RowSource = tuple[np.ndarray | StoredArray, int, np.ndarray]
# Decodes whose weights stay in memory; older ones go to the weight store (attention_store.py).
HOT_DECODES = 8


def parse_layers(arg: str, n_layer: int | None = None) -> list[int]:
    """``"3"``, ``"0,5,29"`` or ``"all"`` -> layer indices. With ``n_layer`` also check range."""
    text = arg.strip().lower()
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
                f"--attention takes a layer number, a comma list or 'all', not {arg!r}."
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
        self.cell_map = CellMap()  # which llama.cpp cell holds which token
        self._kidx: list[np.ndarray] = []
        self._kidx_graph = -1
        self._soft: dict[int, list[np.ndarray]] = {}
        # layer -> kv_id of a query token -> where its row of weights is (see context_attention)
        self.row_sources: dict[int, dict[int, RowSource]] = {}
        self.store: WeightStore | None = None  # made on the first decode that leaves memory
        self._hot: deque[tuple[dict[str, Any], range]] = deque()
        self.hot_decodes = HOT_DECODES

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

    # -- which llama.cpp cell holds which token (the CellMap) ---------------------------------
    def key_rows(
        self, engine: ObservedParts, seq: int = 0, fresh: list[Slot] | None = None
    ) -> np.ndarray:
        """The keys of sequence ``seq``, (4, n): pos, llama.cpp cell, kv_id, token
        (:meth:`~tui.engine.observe.cell_map.CellMap.key_rows`)."""
        return self.cell_map.key_rows(engine, seq, fresh)

    @property
    def next_kv_id(self) -> int:
        """The kv_id the next cell write gets (every id handed out so far is below it)."""
        return self.cell_map.next_kv_id

    def live_keys(self, engine: ObservedParts, seq: int = 0) -> list[tuple[int, int, int, int]]:
        """(pos, llama.cpp cell, kv_id, token) of every token sequence ``seq`` sees, by
        position. Raises KeyError for a token this capture never saw decoded."""
        return self.cell_map.live_keys(engine, seq)

    # -- GraphTap hooks --------------------------------------------------------------------------
    def before_decode(self, engine: ObservedParts, call: DecodeCall) -> None:
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
            if src and op_name(ptr) == "SET_ROWS" and get_name(src) == K_IDXS_INPUT:
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

    def after_decode(self, engine: ObservedParts, call: DecodeCall, extras: dict[str, Any]) -> None:
        super().after_decode(engine, call, extras)
        problems: list[str] = []
        cells = np.concatenate(self._kidx) if self._kidx else np.empty(0, np.int64)
        fresh: list[Slot] = []
        if len(cells) != call.n_tokens:
            problems.append(
                f"saw {len(cells)} KV cell indices for {call.n_tokens} tokens; cell map lost"
            )
        else:
            got = self.cell_map.remember(engine, call, cells.tolist())
            if isinstance(got, str):
                problems.append(got)
            else:
                fresh = got
        if problems:
            self.cell_map.forget()
        if self._skipped:
            problems.append("attention not captured: it would exceed the capture memory limit")
        elif self.layers and not problems:
            seqs = sorted({s for t in call.tokens for s in t.seq_ids})
            att = self._assemble(engine, seqs, fresh, call, problems)
            if att is not None:
                extras["attention"], extras["attention_keys"], key_ids = att
                n = call.n_tokens
                rows = range(self.cell_map.next_kv_id - n, self.cell_map.next_kv_id)
                extras["attention_rows"] = {"kv_id": list(rows)}
                self._note_rows(extras["attention"], rows, key_ids)
                if len(seqs) > 1:
                    extras["attention_rows"]["seq"] = [list(t.seq_ids) for t in call.tokens]
                self._hot.append((extras, rows))
                while len(self._hot) > self.hot_decodes:
                    self._cool(*self._hot.popleft())
        if problems:
            extras["attention_problems"] = problems

    def _assemble(
        self,
        engine: ObservedParts,
        seqs: list[int],
        fresh: list[Slot],
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
            pos, cell, kv_id = self.cell_map.key_lists(seqs[0])
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
            if len(src) > 2 * len(self.cell_map) + 256:
                live = self.cell_map.live_ids()
                self.row_sources[layer] = {k: v for k, v in src.items() if k in live}

    def _cool(self, extras: dict[str, Any], rows: range) -> None:
        """Move a decode's weights and key lists out of memory, into the weight store: the
        record and the row sources then point at the file (read back a row at a time)."""
        if self.store is None:
            self.store = WeightStore()
        store = self.store
        att = extras.get("attention", {})
        for layer, w in list(att.items()):
            if not isinstance(w, np.ndarray):
                continue
            moved = att[layer] = store.put(w)
            src = self.row_sources.get(layer, {})
            for kv_id in rows:
                s = src.get(kv_id)
                if s is not None and s[0] is w:
                    src[kv_id] = (moved, s[1], s[2])
        keys = extras.get("attention_keys", {})
        for name in ("pos", "cell", "kv_id"):
            if isinstance(keys.get(name), list):
                keys[name] = store.put_ints(keys[name])


def find_capture(engine: LocalSession) -> AttentionCapture | None:
    """The engine's attention capture among its decode observers, or None."""
    for obs in engine.observers:
        if isinstance(obs, AttentionCapture):
            return obs
    return None
