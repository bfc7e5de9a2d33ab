"""The compute graph of one decode, seen through llama.cpp's eval callback (``cb_eval``).

``llama_decode`` builds a ggml graph for each ubatch and runs it on the backend. With
``cb_eval`` set, the scheduler first *asks* the callback about every node in order (``ask`` is
true); for a node we answer True to, it computes the graph up to that node, synchronizes, and
calls again with ``ask`` false while the node's data is still in the (reused) compute buffer.

:class:`GraphTap` owns that callback. It can

- copy chosen nodes by name (``capture``), e.g. ``kq_soft_max-3`` or ``Qcur-3``;
- record the node names and ops seen in the ask phase: the graph *census* (how many nodes a
  decode runs and the chain of named operations in each layer, as the graph names them);
- *profile*: answer True for every node so each one runs on its own, and time it. That breaks
  the graph into ~1000 separate runs, so a profiled decode is much slower than a normal one.

The ask phase runs for every node of every decode, so it is the cost of capture: after the
first decode of a graph, the tap only compares node addresses with the ones it recorded (see
:class:`_Plan`), and inputs it needs (the KV cell indices) are read in the ask phase, where
they cost no graph split. Without a GraphTap the context has no callback at all, and decoding
costs nothing extra.
"""

from __future__ import annotations

import ctypes
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from operator import length_hint
from typing import TYPE_CHECKING, Any

import llama_cpp
import numpy as np

from . import ggml

if TYPE_CHECKING:
    from .batch import DecodeCall
    from .session import Engine

GGML_MAX_DIMS = 4
GGML_MAX_SRC = 10
GGML_MAX_NAME = 64

# ggml_type values of the tensors we read.
_NP_TYPES: dict[int, Any] = {0: np.float32, 1: np.float16, 26: np.int32, 27: np.int64}

PROFILE_NOTE = (
    "profile mode: every graph node was run and synchronized on its own to time it, "
    "so this decode was slower than a normal one"
)


class TensorHeader(ctypes.Structure):
    """The start of ``struct ggml_tensor`` (ggml.h, as vendored in llama-cpp-python 0.3.36).

    :func:`check_layout` compares the ``name`` field with ``ggml_get_name`` on a live tensor,
    so a changed layout is caught instead of read as garbage."""

    _fields_ = [
        ("type", ctypes.c_int32),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * GGML_MAX_DIMS),
        ("nb", ctypes.c_size_t * GGML_MAX_DIMS),
        ("op", ctypes.c_int32),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * GGML_MAX_SRC),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * GGML_MAX_NAME),
    ]


_OP_OFFSET = TensorHeader.op.offset  # type: ignore[attr-defined]
_tensor_get = ggml.libggml_base().ggml_backend_tensor_get


def _lib() -> ctypes.CDLL:
    lib = ggml.libggml_base()
    if not getattr(lib, "_tokenstep_graph_types", False):
        lib.ggml_op_name.argtypes = [ctypes.c_int]
        lib.ggml_op_name.restype = ctypes.c_char_p
        lib.ggml_op_desc.argtypes = [ctypes.c_void_p]
        lib.ggml_op_desc.restype = ctypes.c_char_p
        lib.ggml_is_contiguous.argtypes = [ctypes.c_void_p]
        lib.ggml_is_contiguous.restype = ctypes.c_bool
        lib._tokenstep_graph_types = True  # type: ignore[attr-defined]
    return lib


def check_layout(ptr: int) -> bool:
    """True when our :class:`TensorHeader` agrees with ggml about where the name is."""
    hdr = TensorHeader.from_address(ptr)
    return bool(hdr.name == _lib().ggml_get_name(ptr))


def op_name(ptr: int) -> str:
    """The node's operation as ggml names it (unary ops by their own name, e.g. SILU)."""
    desc = _lib().ggml_op_desc(ptr)
    return desc.decode() if desc else "?"


def src_ptr(ptr: int, i: int) -> int | None:
    return TensorHeader.from_address(ptr).src[i] or None


def read_tensor(ptr: int) -> np.ndarray:
    """Copy a contiguous tensor out of its backend buffer; shape is ggml's ``ne`` reversed
    (so ne = [n_kv, n_tokens, n_head, 1] becomes (1, n_head, n_tokens, n_kv)).

    It runs inside the eval callback, between graph splits, so it keeps to a few calls."""
    hdr = TensorHeader.from_address(ptr)
    dtype = _NP_TYPES.get(hdr.type)
    if dtype is None:
        raise ValueError(f"cannot read ggml type {ggml.type_name(hdr.type)}")
    out = np.empty(hdr.ne[::-1], dtype=dtype)
    # ggml's byte strides nb are those of a C-ordered array of that shape when the tensor is
    # contiguous; ggml_is_contiguous decides the rare other cases (strides of size-1 dims).
    if hdr.nb[::-1] != list(out.strides) and not _lib().ggml_is_contiguous(ptr):
        raise ValueError("cannot read a non-contiguous tensor")
    _tensor_get(ptr, out.__array_interface__["data"][0], 0, out.nbytes)
    return out


# -- census --------------------------------------------------------------------------------------
_LAYER_NAME = re.compile(r"^(.+)-(\d+)$")


def split_layer(name: str) -> tuple[str, int | None]:
    """``"kq_soft_max-3"`` -> ``("kq_soft_max", 3)``; ``"Kcur-0 (view)"`` -> ``("Kcur", 0)``;
    ``"result_norm"`` -> ``("result_norm", None)``."""
    core = name.split(" (", 1)[0]
    m = _LAYER_NAME.match(core)
    if m is None:
        return core, None
    return m.group(1), int(m.group(2))


@dataclass
class NodeSeen:
    name: str
    op: str


@dataclass
class Section:
    """Where a node sits in the decode: ``prologue`` (embedding), a layer's ``attention`` or
    ``ffn`` part, or the ``epilogue`` (final norm and lm_head)."""

    part: str
    layer: int | None = None


def sections(nodes: list[NodeSeen]) -> list[Section]:
    """Assign every node to a part of the decode, using only the names the graph gives them.

    Nodes before the first layer-suffixed name are the prologue, nodes after the last one the
    epilogue. Inside a layer, unnamed helpers (views, ``node_123``) belong to the layer of the
    named node before them; a layer's attention part runs up to and including ``ffn_inp``
    (the residual add after attention), the rest of the layer is its feed-forward part."""
    layers = [split_layer(n.name)[1] for n in nodes]
    idx = [i for i, lay in enumerate(layers) if lay is not None]
    out: list[Section] = []
    if not idx:
        return [Section("prologue") for _ in nodes]
    first, last = idx[0], idx[-1]
    cur: int | None = None
    part = "attention"
    for i, n in enumerate(nodes):
        if i < first:
            out.append(Section("prologue"))
            continue
        if i > last:
            out.append(Section("epilogue"))
            continue
        base, lay = split_layer(n.name)
        if lay is not None and lay != cur:
            cur, part = lay, "attention"
        out.append(Section(part, cur))
        if base == "ffn_inp":
            part = "ffn"
    return out


@dataclass
class GraphCensus:
    """What one ``llama_decode`` computed: node count and the named chain of each layer."""

    n_nodes: int  # nodes in the graph of the first ubatch (all ops, views included)
    n_graphs: int  # graphs run by this decode: one per ubatch
    n_layers: int
    ops: dict[str, int]  # op -> how many nodes
    prologue: list[str]  # "name:OP" before the first layer
    layer_chain: list[str]  # named ops of layer 0, suffix dropped, views left out
    same_chain_every_layer: bool
    nodes_per_layer: list[int]
    epilogue: list[str]
    layer_nodes: list[str] = field(default_factory=list)  # every node of layer 0, "name:OP"
    # Nodes of graphs run before the ubatch graphs in the same llama_decode (the K shift that
    # re-rotates cached keys after a context shift), by op.
    pre_graph_ops: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_nodes": self.n_nodes,
            "n_graphs": self.n_graphs,
            "n_layers": self.n_layers,
            "prologue": self.prologue,
            "layer_chain": self.layer_chain,
            "same_chain_every_layer": self.same_chain_every_layer,
            "nodes_per_layer": self.nodes_per_layer,
            "epilogue": self.epilogue,
            "ops": self.ops,
            **(
                {
                    "pre_graph_nodes": sum(self.pre_graph_ops.values()),
                    "pre_graph_ops": self.pre_graph_ops,
                }
                if self.pre_graph_ops
                else {}
            ),
        }


def _chain(nodes: list[NodeSeen]) -> list[str]:
    out: list[str] = []
    for n in nodes:
        if " (" in n.name:  # views, permutes and reshapes ggml named after their source
            continue
        base, layer = split_layer(n.name)
        if layer is None:  # helpers such as node_1073 (llama.cpp gave them no name)
            continue
        if not out or out[-1] != base:
            out.append(base)
    return out


def census(
    nodes: list[NodeSeen], n_graphs: int = 1, pre: list[NodeSeen] | None = None
) -> GraphCensus:
    """Describe one ubatch graph (``nodes``); ``pre`` are nodes of other graphs run first."""
    secs = sections(nodes)
    by_layer: dict[int, list[NodeSeen]] = {}
    for n, s in zip(nodes, secs, strict=True):
        if s.layer is not None:
            by_layer.setdefault(s.layer, []).append(n)
    chains = [_chain(by_layer[k]) for k in sorted(by_layer)]
    first = by_layer[min(by_layer)] if by_layer else []
    return GraphCensus(
        n_nodes=len(nodes),
        n_graphs=n_graphs,
        n_layers=len(by_layer),
        ops=dict(Counter(n.op for n in nodes).most_common()),
        prologue=[
            f"{n.name}:{n.op}" for n, s in zip(nodes, secs, strict=True) if s.part == "prologue"
        ],
        layer_chain=chains[0] if chains else [],
        same_chain_every_layer=all(c == chains[0] for c in chains),
        nodes_per_layer=[len(by_layer[k]) for k in sorted(by_layer)],
        epilogue=[
            f"{n.name}:{n.op}" for n, s in zip(nodes, secs, strict=True) if s.part == "epilogue"
        ],
        layer_nodes=[f"{n.name}:{n.op}" for n in first],
        pre_graph_ops=dict(Counter(n.op for n in pre or []).most_common()),
    )


# -- profile -------------------------------------------------------------------------------------
@dataclass
class GraphProfile:
    """Measured time per node of one decode (profile mode), summed by part and by op."""

    total_ms: float
    prologue_ms: float
    attention_ms: list[float]  # per layer
    ffn_ms: list[float]  # per layer
    epilogue: dict[str, float]  # node name -> ms (final norm, lm_head)
    by_op: dict[str, float]
    slowest: list[tuple[str, str, float]]  # (name, op, ms)
    other_ms: float = 0.0  # graphs run before the ubatch graphs (K shift)

    @staticmethod
    def combine(parts: list[GraphProfile], other_ms: float = 0.0) -> GraphProfile:
        """Sum the profiles of a decode's ubatch graphs."""
        if not parts:
            return GraphProfile(other_ms, 0.0, [], [], {}, {}, [], other_ms)
        by_op: dict[str, float] = {}
        epi: dict[str, float] = {}
        for p in parts:
            for k, v in p.by_op.items():
                by_op[k] = by_op.get(k, 0.0) + v
            for k, v in p.epilogue.items():
                epi[k] = epi.get(k, 0.0) + v
        slow = sorted((x for p in parts for x in p.slowest), key=lambda x: -x[2])[:10]
        return GraphProfile(
            total_ms=sum(p.total_ms for p in parts) + other_ms,
            prologue_ms=sum(p.prologue_ms for p in parts),
            attention_ms=[sum(x) for x in zip(*(p.attention_ms for p in parts), strict=True)],
            ffn_ms=[sum(x) for x in zip(*(p.ffn_ms for p in parts), strict=True)],
            epilogue=epi,
            by_op=dict(sorted(by_op.items(), key=lambda kv: -kv[1])),
            slowest=slow,
            other_ms=other_ms,
        )

    def to_dict(self) -> dict[str, Any]:
        r = 4
        return {
            "note": PROFILE_NOTE,
            "total_ms": round(self.total_ms, r),
            "prologue_ms": round(self.prologue_ms, r),
            "attention_ms": [round(x, r) for x in self.attention_ms],
            "ffn_ms": [round(x, r) for x in self.ffn_ms],
            "epilogue_ms": {k: round(v, r) for k, v in self.epilogue.items()},
            "by_op_ms": {k: round(v, r) for k, v in self.by_op.items()},
            "slowest": [[n, o, round(ms, r)] for n, o, ms in self.slowest],
            "other_graphs_ms": round(self.other_ms, r),
        }


def profile(nodes: list[NodeSeen], times_ms: list[float], n_layer: int) -> GraphProfile:
    secs = sections(nodes)
    attn = [0.0] * n_layer
    ffn = [0.0] * n_layer
    pro = 0.0
    epi: dict[str, float] = {}
    by_op: dict[str, float] = {}
    for n, s, ms in zip(nodes, secs, times_ms, strict=True):
        by_op[n.op] = by_op.get(n.op, 0.0) + ms
        if s.part == "prologue":
            pro += ms
        elif s.part == "epilogue":
            key = split_layer(n.name)[0] if " (" not in n.name else n.name
            epi[key] = epi.get(key, 0.0) + ms
        elif s.layer is not None and 0 <= s.layer < n_layer:
            (attn if s.part == "attention" else ffn)[s.layer] += ms
    slow = sorted(zip(nodes, times_ms, strict=True), key=lambda x: -x[1])[:10]
    return GraphProfile(
        total_ms=float(sum(times_ms)),
        prologue_ms=pro,
        attention_ms=attn,
        ffn_ms=ffn,
        epilogue=epi,
        by_op=dict(sorted(by_op.items(), key=lambda kv: -kv[1])),
        slowest=[(n.name, n.op, ms) for n, ms in slow],
    )


# -- the callback --------------------------------------------------------------------------------
# What the ask phase did with a node, remembered in a :class:`_Plan` so that the next decode of
# the same graph can do it again without reading any name.
_COPY = 1  # answered True: the node's data is copied when it is ready (one extra graph split)
_PEEK = 2  # read the node's graph inputs right away (``peek``) and answered False (no split)


@dataclass
class _Plan:
    """The ask phase of one decode, replayed by the next decodes of the same graph.

    ``ptrs`` are the addresses of the nodes asked about, in order, negated for the nodes that
    needed something (``special`` says what, with the name checked again and the graph index),
    and ending with a 0 that no node matches. llama.cpp reuses the graph between decodes of the
    same shape, and when it rebuilds one it builds it in the same memory, in the same order:
    the same node addresses in the same order are the same graph. A decode whose nodes differ
    (a prefill after steps, a K shift) falls back to reading names from that node on."""

    key: tuple[Any, ...]  # what the decisions depend on: the wanted names and the hook
    ptrs: list[int]
    special: list[tuple[int, bytes, int]]  # (_COPY or _PEEK, node name, graph index)
    starts: list[int]  # index in ptrs of each ubatch graph's first node


class GraphTap:
    """A :class:`~tui.engine.session.DecodeObserver` that installs ``cb_eval``.

    ``capture`` names nodes to copy (exact graph names, e.g. ``b"Qcur-3"``). Several nodes can
    share a name (``Qcur-3`` is the matmul, then its reshape, then the RoPE); the last one in
    graph order wins, which for ``Qcur``/``Kcur`` is the tensor after RoPE. Copies are kept per
    graph (ubatch) in :attr:`captured`: ``{name: [array per ubatch]}``. ``flash_attn_off``
    makes the context run without flash attention (needed to see ``kq_soft_max`` nodes); the
    census and profile alone leave the graph as the engine's settings build it.

    The scheduler asks about every node of every graph (~1000 per decode), so that path is kept
    to a pointer comparison: the first decode of a graph reads each node's name and records
    what it did (:class:`_Plan`); later decodes of the same graph only check that the node
    addresses come in the same order. Census and profile read every name each decode.

    Only one thread may decode: the callback runs inside ``llama_decode`` on that thread."""

    def __init__(
        self,
        *,
        capture: tuple[str, ...] = (),
        census: bool = False,
        profile: bool = False,
        n_layer: int = 0,
        max_bytes: int = 1 << 30,
        flash_attn_off: bool = False,
    ) -> None:
        self.wanted: set[bytes] = {c.encode() for c in capture}
        self.census_on = census
        self.profile_on = profile
        self.n_layer = n_layer
        self.max_bytes = max_bytes
        self.flash_attn_off = flash_attn_off
        self.captured: dict[str, list[np.ndarray]] = {}
        self.last_census: GraphCensus | None = None
        self.last_profile: GraphProfile | None = None
        self.errors: list[str] = []
        self._nodes: list[NodeSeen] = []
        self._times: list[float] = []
        # The name of the first node of the first graph this context ever ran (the model's
        # input, e.g. "embd"): each ubatch graph starts with it. Nodes before it in a decode
        # belong to other graphs llama.cpp runs first, such as the K shift after a context
        # shift; they are counted apart and never captured.
        self._head: bytes | None = None
        self._graph = -1
        self._starts: list[int] = []
        self._bytes = 0
        self._skipped = False
        self._t_ask = 0.0
        self._get_name = _lib().ggml_get_name
        self._nbytes = _lib().ggml_nbytes
        self._layout_ok: bool | None = None
        # The node answered True in the ask phase, waiting for its data: (name, graph).
        self._pending: tuple[bytes, int] | None = None
        self._plan: _Plan | None = None
        self._mode = "learn"  # "slow" (census/profile), "learn" or "replay", per decode
        self._rec: list[int] = []  # learn mode: the plan being recorded
        self._rec_special: list[tuple[int, bytes, int]] = []
        self._replay_left: Any = None  # replay mode: the plan's iterator (its length hint)
        self._ask: Any = self._ask_learn
        # Decodes that replayed a plan / learned one, and the nodes the last decode answered
        # True for (each one splits the graph there), for tests and benchmarks.
        self.n_replayed = 0
        self.n_learned = 0
        self.copies = 0
        # Replay mode: the plan's ``__next__``, read by the callback's first lines.
        self._replay_next: list[Any] = [None]
        self._replay_plan: _Plan | None = None
        self._replay_special_it: Any = None
        # Keep the ctypes callback object alive as long as the context may call it.
        self._cfunc = llama_cpp.ggml_backend_sched_eval_callback(self._make_callback())

    # -- DecodeObserver --------------------------------------------------------------------------
    def configure(self, params: llama_cpp.llama_context_params) -> None:
        params.cb_eval = self._cfunc
        params.cb_eval_user_data = None  # type: ignore[assignment]
        if self.flash_attn_off:
            params.flash_attn_type = 0  # flash attention fuses the softmax away: no kq_soft_max

    def before_decode(self, engine: Engine, call: DecodeCall) -> None:
        self.captured = {}
        self.errors = []
        self._nodes, self._times = [], []
        self._graph, self._starts = -1, []
        self._bytes, self._skipped = 0, False
        self._pending = None
        self.copies = 0
        if self.census_on or self.profile_on:
            self._replay_next[0] = None
            self._mode, self._ask = "slow", self._ask_slow
            return
        plan = self._plan
        if plan is not None and plan.key == self._plan_key():
            self._start_replay(plan)
        else:
            self._start_learn([], [], [], -1)

    def after_decode(self, engine: Engine, call: DecodeCall, extras: dict[str, Any]) -> None:
        if self._mode == "learn":
            self._plan = _Plan(self._plan_key(), [*self._rec, 0], self._rec_special, self._starts)
            self._rec, self._rec_special = [], []
            self.n_learned += 1
        elif self._mode == "replay":
            self._replay_next[0] = None
            if length_hint(self._replay_left) != 1:  # fewer nodes than the plan: learn again
                self._plan = None
            self.n_replayed += 1
        bounds = [*self._starts, len(self._nodes)]
        graphs = [(bounds[i], bounds[i + 1]) for i in range(len(self._starts))]
        pre = self._starts[0] if self._starts else len(self._nodes)
        if self.census_on and self._mode == "slow":
            a, b = graphs[0] if graphs else (0, 0)
            self.last_census = census(self._nodes[a:b], len(graphs), self._nodes[:pre])
            extras["graph"] = self.last_census.to_dict()
        if self.profile_on and self._mode == "slow" and len(self._times) == len(self._nodes):
            parts = [profile(self._nodes[a:b], self._times[a:b], self.n_layer) for a, b in graphs]
            self.last_profile = GraphProfile.combine(parts, sum(self._times[:pre]))
            extras["profile"] = self.last_profile.to_dict()
        if self.errors:
            extras["graph_errors"] = list(self.errors)

    # -- hooks for subclasses --------------------------------------------------------------------
    # Names starting with this prefix are passed to :meth:`peek` (besides ``wanted``).
    hook_prefix: bytes | None = None

    def peek(self, name: bytes, ptr: int, graph: int) -> bool:
        """Ask phase, for a node whose name starts with :attr:`hook_prefix`: read what is
        needed now and return True to be called again at this node in later decodes.

        Nothing has run yet from this node on, so those of its sources that are graph inputs
        (set before the graph runs, freed only after their last consumer) hold their data:
        reading them here costs no graph split."""
        return False

    def on_data(self, name: bytes, ptr: int, graph: int) -> None:
        """The node's data is ready (copy it now: the buffer is reused)."""
        key = name.decode()
        arrs = self.captured.setdefault(key, [])
        data = read_tensor(ptr)
        if len(arrs) > graph:
            arrs[graph] = data  # a later node with the same name (e.g. after RoPE) wins
        else:
            arrs.append(data)

    # -- the callback itself ---------------------------------------------------------------------
    def _make_callback(self) -> Any:
        """The function llama.cpp calls. Its first lines are the whole cost of a replayed ask
        (~1000 per decode): one call for the expected address and one comparison."""
        replay_next = self._replay_next
        other = self._callback

        def callback(t: int, ask: bool, user_data: int | None) -> bool:
            if ask:
                nxt = replay_next[0]
                if nxt is not None:
                    try:
                        e = nxt()
                        if t == e:  # the same node as in the plan, and not needed
                            return False
                        return self._replay_miss(t, e)
                    except Exception as exc:  # never let an exception cross into C
                        self.errors.append(f"{type(exc).__name__}: {exc}")
                        return False
            return other(t, ask, user_data)

        return callback

    def _callback(self, t: int, ask: bool, _user_data: int | None) -> bool:
        try:
            if ask:
                return bool(self._ask(t))
            if self.profile_on and self._mode == "slow":
                self._times.append((time.perf_counter() - self._t_ask) * 1000.0)
            self.copies += 1
            p = self._pending
            if p is not None:
                self._pending = None
                self.on_data(p[0], t, p[1])
            return True
        except Exception as exc:  # never let an exception cross into C
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return not ask

    def _plan_key(self) -> tuple[Any, ...]:
        return (frozenset(self.wanted), self.hook_prefix)

    def _start_learn(
        self, rec: list[int], special: list[tuple[int, bytes, int]], starts: list[int], graph: int
    ) -> None:
        self._replay_next[0] = None
        self._mode, self._ask = "learn", self._ask_learn
        self._rec, self._rec_special, self._starts, self._graph = rec, special, starts, graph

    def _start_replay(self, plan: _Plan) -> None:
        self._mode = "replay"
        self._starts = list(plan.starts)
        self._replay_left = iter(plan.ptrs)
        self._replay_plan = plan
        self._replay_special_it = iter(plan.special)
        self._replay_next[0] = self._replay_left.__next__

    def _replay_miss(self, t: int, e: int) -> bool:
        """Replay, at a node the plan marks as needed (``-t == e``) or at one it does not
        know (the graph changed)."""
        plan, special = self._replay_plan, self._replay_special_it
        assert plan is not None
        if -t == e:
            return self._replay_special(t, plan, special)
        return self._diverge(t, plan, special, 0)

    def _replay_special(self, t: int, plan: _Plan, special: Any) -> bool:
        action, name, graph = next(special)
        if self._get_name(t) != name:
            return self._diverge(t, plan, special, 1)
        self._graph = graph
        if action == _COPY:
            return self._take(name, t)
        self.peek(name, t, graph)
        return False

    def _diverge(self, t: int, plan: _Plan, special: Any, consumed: int) -> bool:
        """This decode's graph differs from the plan from node ``t`` on: keep the part that
        matched and read names from here (the new plan is recorded as it goes)."""
        i = len(plan.ptrs) - length_hint(self._replay_left) - 1
        k = len(plan.special) - length_hint(special) - consumed
        starts = [s for s in plan.starts if s < i]
        self._start_learn(plan.ptrs[:i], plan.special[:k], starts, len(starts) - 1)
        return self._ask_learn(t)

    def _ask_learn(self, t: int) -> bool:
        name = self._get_name(t)
        if name == self._head or self._head is None:
            self._new_graph(name, t, len(self._rec))
        if self._graph >= 0 and self._layout_ok:
            if name in self.wanted:
                self._rec.append(-t)
                self._rec_special.append((_COPY, name, self._graph))
                return self._take(name, t)
            if (
                self.hook_prefix is not None
                and name.startswith(self.hook_prefix)
                and self.peek(name, t, self._graph)
            ):
                self._rec.append(-t)
                self._rec_special.append((_PEEK, name, self._graph))
                return False
        self._rec.append(t)
        return False

    def _new_graph(self, name: bytes, t: int, index: int) -> None:
        """A ubatch graph starts (its first node has the model's input name)."""
        if self._head is None:
            self._head = name
            self._layout_ok = check_layout(t)
            if not self._layout_ok:
                self.errors.append("ggml_tensor layout differs from tokenstep's header")
        self._graph += 1
        self._starts.append(index)

    def _ask_slow(self, t: int) -> bool:
        """Census and profile: note every node (and in profile mode, run each on its own)."""
        name = self._get_name(t)
        if name == self._head or self._head is None:
            self._new_graph(name, t, len(self._nodes))
        self._nodes.append(NodeSeen(name.decode(errors="replace"), op_name(t)))
        take = False
        if self._graph >= 0 and self._layout_ok:
            if name in self.wanted:
                take = self._take(name, t)
            elif self.hook_prefix is not None and name.startswith(self.hook_prefix):
                self.peek(name, t, self._graph)
        if self.profile_on:
            self._t_ask = time.perf_counter()
            return bool(self._layout_ok)
        return take

    def _take(self, name: bytes, t: int) -> bool:
        """A wanted node: copy it unless the memory cap is hit."""
        size = int(self._nbytes(t))
        if self._bytes + size > self.max_bytes:
            self._skipped = True
            return False
        self._bytes += size
        self._pending = (name, self._graph)
        return True
