"""The compute graph of one decode, seen through llama.cpp's eval callback (``cb_eval``).

With ``cb_eval`` set, the scheduler first *asks* the callback about every node (``ask`` true);
for a node answered True it computes the graph up to it, synchronizes, and calls again with
``ask`` false while the data is in the (reused) compute buffer. :class:`GraphTap` owns that
callback: it copies chosen nodes by name (``kq_soft_max-3``), records the ask phase's names
and ops (the *census*, :mod:`tui.engine.observe.census`), or *profiles* by answering True for
every node (~1000 separate runs, much slower; :mod:`tui.engine.observe.profile`). The ask
phase is the cost of capture, so after a graph's first decode the tap only compares node
addresses (:mod:`tui.engine.observe.ask_plan`) and reads the KV cell indices there, where they
cost no graph split. Without a GraphTap the context has no callback and pays nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import llama_cpp
import numpy as np

from ..model import interrupt
from .ask_plan import END, Action, AskPlan, Marked, PlanEntry, Replay
from .census import GraphCensus, NodeSeen, census
from .profile import GraphProfile, profile
from .tensor import check_layout, get_name, nbytes, op_name, read_tensor

if TYPE_CHECKING:
    from ..run.batch import DecodeCall
    from ..run.parts import ObservedParts


class GraphTap:
    """A :class:`~tui.engine.run.session.DecodeObserver` that installs ``cb_eval``.

    ``capture`` names nodes to copy (``b"Qcur-3"``); of several nodes with one name the last in
    graph order wins (for ``Qcur``/``Kcur`` the tensor after RoPE), kept per ubatch in
    :attr:`captured`. ``flash_attn_off`` runs the context without flash attention (to see
    ``kq_soft_max``). The scheduler asks about ~1000 nodes a decode, so each decode runs in one
    of three modes: ``"slow"`` (census or profile: every name read), ``"learn"`` (names read, an
    :class:`~tui.engine.observe.ask_plan.AskPlan` recorded) or ``"replay"`` (node addresses
    compared with the plan). Only one thread may decode: the callback runs inside
    ``llama_decode``."""

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
        self._layout_ok: bool | None = None
        # The node answered True in the ask phase, waiting for its data: (name, graph).
        self._pending: tuple[bytes, int] | None = None
        self._plan: AskPlan | None = None
        self._mode = "learn"  # "slow" (census/profile), "learn" or "replay", per decode
        self._rec: list[PlanEntry] = []  # learn mode: the plan being recorded
        self._ask: Callable[[int], bool] = self._ask_learn
        # Replay mode: the plan being walked, and its ``next`` (read by the callback's first
        # lines; None in the other modes).
        self._replay: Replay | None = None
        self._replay_next: Callable[[], tuple[int, PlanEntry]] | None = None
        # Decodes that replayed a plan / learned one, and the nodes the last decode answered
        # True for (each one splits the graph there), for tests and benchmarks.
        self.n_replayed = 0
        self.n_learned = 0
        self.copies = 0
        # Keep the ctypes callback object alive as long as the context may call it.
        self._cfunc = llama_cpp.ggml_backend_sched_eval_callback(self._make_callback())

    # -- DecodeObserver --------------------------------------------------------------------------
    def configure(self, params: llama_cpp.llama_context_params) -> None:
        params.cb_eval = self._cfunc
        params.cb_eval_user_data = None  # type: ignore[assignment]
        if self.flash_attn_off:
            params.flash_attn_type = 0  # flash attention fuses the softmax away: no kq_soft_max

    def before_decode(self, engine: ObservedParts, call: DecodeCall) -> None:
        self.captured = {}
        self.errors = []
        self._nodes, self._times = [], []
        self._graph, self._starts = -1, []
        self._bytes, self._skipped = 0, False
        self._pending = None
        self.copies = 0
        if self.census_on or self.profile_on:
            self._replay = self._replay_next = None
            self._mode, self._ask = "slow", self._ask_slow
            return
        plan = self._plan
        if plan is not None and plan.key == self._plan_key():
            self._start_replay(plan)
        else:
            self._start_learn([], [], -1)

    def after_decode(self, engine: ObservedParts, call: DecodeCall, extras: dict[str, Any]) -> None:
        if self._mode == "learn":
            self._plan = AskPlan(self._plan_key(), [*self._rec, END], self._starts)
            self._rec = []
            self.n_learned += 1
        elif self._mode == "replay":
            replay = self._replay
            self._replay = self._replay_next = None
            if replay is not None and not replay.ran_whole_plan():  # fewer nodes: learn again
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
        (~1000 per decode): one call for the plan's next entry and one comparison."""
        other = self._callback

        def callback(t: int, ask: bool, user_data: int | None) -> bool:
            if ask:
                nxt = self._replay_next
                if nxt is not None:
                    try:
                        i, e = nxt()
                        if t == e:  # the same node as in the plan, and not needed
                            return False
                        return self._replay_miss(t, i, e)
                    except Exception as exc:  # never let an exception cross into C
                        self.errors.append(f"{type(exc).__name__}: {exc}")
                        return False
            return other(t, ask, user_data)

        return interrupt.called_from_c(callback)  # a Ctrl-C here is kept for the next decode

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

    def _start_learn(self, rec: list[PlanEntry], starts: list[int], graph: int) -> None:
        self._replay = self._replay_next = None
        self._mode, self._ask = "learn", self._ask_learn
        self._rec, self._starts, self._graph = rec, starts, graph

    def _start_replay(self, plan: AskPlan) -> None:
        self._mode = "replay"
        self._starts = list(plan.starts)
        self._replay = Replay(plan)
        self._replay_next = self._replay.next

    def _replay_miss(self, t: int, i: int, e: PlanEntry) -> bool:
        """Replay, at plan entry ``i``: a node the plan marks as needed, or one it does not
        know (the graph changed)."""
        if isinstance(e, Marked) and e.ptr == t:
            if get_name(t) != e.name:
                return self._diverge(t, i)
            self._graph = e.graph
            if e.action is Action.COPY:
                return self._take(e.name, t)
            self.peek(e.name, t, e.graph)
            return False
        return self._diverge(t, i)

    def _diverge(self, t: int, i: int) -> bool:
        """This decode's graph differs from the plan from node ``t`` (entry ``i``) on: keep the
        part that matched and read names from here (the new plan is recorded as it goes)."""
        assert self._replay is not None
        rec, starts = self._replay.plan.prefix(i)
        self._start_learn(rec, starts, len(starts) - 1)
        return self._ask_learn(t)

    def _ask_learn(self, t: int) -> bool:
        name = get_name(t)
        if name == self._head or self._head is None:
            self._new_graph(name, t, len(self._rec))
        if self._graph >= 0 and self._layout_ok:
            if name in self.wanted:
                self._rec.append(Marked(t, Action.COPY, name, self._graph))
                return self._take(name, t)
            if (
                self.hook_prefix is not None
                and name.startswith(self.hook_prefix)
                and self.peek(name, t, self._graph)
            ):
                self._rec.append(Marked(t, Action.PEEK, name, self._graph))
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
        name = get_name(t)
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
        size = int(nbytes(t))
        if self._bytes + size > self.max_bytes:
            self._skipped = True
            return False
        self._bytes += size
        self._pending = (name, self._graph)
        return True
