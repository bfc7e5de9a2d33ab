"""Attention and graph census for the app, on the decode worker's side.

The :class:`~tui.worker.thread.Worker` owns one :class:`AttentionControl`, used on the worker
thread only; the app sends its commands through the queue and draws the
:class:`AttentionView` of each view. The weights come from the observer context
(:mod:`tui.worker.observers`: flash attention off and the callback, replaying the run's decode
calls), never from a rebuilt run context. A layer not being captured means a new observer
context that replays the run again, so every row of it is real. No Textual or Rich here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..engine.model.model import ModelInfo
from ..engine.observe.attention_capture import AttentionCapture
from ..engine.observe.attention_map import ContextAttention, context_attention
from .caches import Memo
from .commands import AttentionLayer

if TYPE_CHECKING:
    from ..engine.run.backend import Backend
    from .parts import WorkerParts


@dataclass(frozen=True)
class AttentionView:
    """What the Attention and Anatomy panes draw, copied out on the worker thread."""

    on: bool  # weights are being captured
    installed: bool  # this context has the eval callback (flash attention off)
    layer: int
    head: int | None  # None = mean over heads
    n_layer: int
    info: ModelInfo
    att: ContextAttention | None  # None unless the Attention tab asked for it
    census: dict[str, Any] | None  # the last step's graph census, if any
    profile: dict[str, Any] | None
    status: str


class AttentionControl:
    """Attention state of one worker (worker thread only)."""

    def __init__(
        self,
        worker: WorkerParts,
        *,
        on: bool = False,
        layer: int = 0,
        head: int | None = None,
    ) -> None:
        self.w = worker
        self.on = on
        self.layer = layer
        self.head = head
        self.want_matrix = False  # the Attention tab is showing
        self.want_census = False  # the Anatomy tab is showing
        self.replaying: int | None = None  # operations its context replays now (a, A, [ ])
        # O(n) (a lookup per row, nothing n × n), so it is rebuilt whenever the observer's
        # context changed; the pane lays out only the rows it draws.
        self._matrix: Memo[tuple[Any, ...], ContextAttention | None] = Memo(
            lambda: (
                id(self._seen()),
                len(self._seen().records),
                self._seen().n_past,
                self.layer,
                tuple(self._seen().tokens[-1:]),
            ),
            lambda: context_attention(self._seen(), self.layer),
        )

    def _seen(self) -> Backend:
        """The observer's session (its context holds what the run's holds, replayed)."""
        eng = self.w.observers.engine
        return eng if eng is not None else self.engine

    @property
    def engine(self) -> Backend:
        return self.w.engine

    @property
    def capture(self) -> AttentionCapture | None:
        """The observer context's capture (the engine's own context never has one)."""
        cap = self.w.observers.ctx.capture if self.w.observers.ctx is not None else None
        return cap if isinstance(cap, AttentionCapture) else None

    def state(self) -> dict[str, Any]:
        """For the saved session's header."""
        return {"on": self.on, "layer": self.layer, "head": self.head}

    def restore(self, state: Any) -> None:
        """The saved layer and head (``--resume``; before the worker starts). On/off comes
        from the context: ``--resume`` builds it with the capture when it was on."""
        if not isinstance(state, dict):
            return
        layer, head = state.get("layer"), state.get("head")
        if isinstance(layer, int) and 0 <= layer < self.engine.info.n_layer:
            cap = self.capture
            if cap is None or not cap.layers or layer in cap.layers:
                self.layer = layer
        if head is None or (isinstance(head, int) and 0 <= head < self.engine.info.n_head):
            self.head = head

    # -- commands (worker thread) ----------------------------------------------------------------
    def set_head(self, head: int | None) -> None:
        self.head = head
        self.w.state.dirty_since_save = True

    def set_tabs(self, matrix: bool, census: bool) -> None:
        """Which of the Attention (matrix) and Anatomy (census) tabs is showing."""
        self.want_matrix, self.want_census = matrix, census
        obs = self.w.observers
        if obs.local and census != obs.wants.census:  # the census comes from its context too
            obs.want(census=census)

    def start(self, layers: list[int]) -> None:
        """``--attention``: capture on from the start (before the worker runs)."""
        self.w.require("attention")
        self.layer = layers[0] if layers else self.layer
        self.w.observers.want(layers=tuple(layers or [self.layer]), census=self.want_census)
        self.on = True

    def toggle(self) -> None:
        self.w.require("attention")
        obs = self.w.observers
        if self.on:
            self.on = False
            self.w.state.dirty_since_save = True
            obs.want(layers=())
            self.w.state.note(
                "Attention capture off: its context copies nothing more (the run's context "
                "never had the callback)."
            )
            return
        self.w.state.dirty_since_save = True
        self._capture([self.layer], "Attention on")
        self.on = True  # only now: a view sent during the replay still shows it off
        ctx = obs.ctx
        what = ctx.describe() if ctx is not None else "no observer context"
        self.w.state.note(
            f"Attention on (layer {self.layer}), captured in an {what}. Each step now also "
            "runs there; the run's picks and logits stay as they were."
        )

    def _capture(self, layers: list[int], what: str) -> None:
        obs = self.w.observers
        obs.want(layers=tuple(layers), census=self.want_census)
        ctx = obs.ctx
        self.replaying = ctx.pending() if ctx is not None and obs.may_replay() else None
        try:  # a view sent during the replay says so (not "capture off")
            obs.fill(what)
        finally:
            self.replaying = None
        self._matrix.clear()

    def capture_all(self) -> None:
        """``A``: every layer in one replay, so [ and ] then switch layers at once."""
        self.w.require("attention")
        n_layer = self.engine.info.n_layer
        self.w.state.dirty_since_save = True
        self._capture(list(range(n_layer)), f"Capturing all {n_layer} layers")
        self.on = True
        self.w.state.note(
            f"All {n_layer} layers captured in the observer's own context; [ and ] now switch "
            "layers without another replay. Each step copies every layer while on."
        )

    def set_layer(self, layer: int) -> None:
        self.w.require("attention")
        # Presses of [ or ] made while a capture was replaying: only the newest is done.
        later = self.w.take_queued(AttentionLayer)
        skipped = 0
        while isinstance(later, AttentionLayer):
            skipped += 1
            layer = later.layer
            later = self.w.take_queued(AttentionLayer)
        n_layer = self.engine.info.n_layer
        layer %= n_layer
        cap = self.capture
        self.layer = layer
        self.w.state.dirty_since_save = True
        if not self.on or cap is None:
            self.w.state.note(f"Layer {layer} selected; press a to turn attention capture on.")
            return
        if layer in cap.layers:
            self.w.state.note(f"Layer {layer}: already captured, shown without another replay.")
            return
        self._capture([layer], f"Capturing layer {layer} of {n_layer}")
        taken = f" ({skipped + 1} layer presses taken together: the newest wins)" if skipped else ""
        self.w.state.note(
            f"Layer {layer}: the observer's own context replayed the run's decode calls to "
            f"capture it (the run's context untouched){taken}."
        )

    def forget_matrix(self) -> None:
        """The observer context was made anew (e.g. by the lens): rebuild the matrix."""
        self._matrix.clear()

    # -- the view ---------------------------------------------------------------------------------
    def view(self) -> AttentionView:
        eng = self.engine
        cap = self.capture
        att = None
        ctx = None
        replay = self.w.observers.progress  # fill()'s replay under way: how far it is
        if (self.want_matrix and cap is not None) or self.want_census:
            ctx = self.w.observers.ready()  # it catches up now, on this thread
        if self.want_matrix and self.on and cap is not None and replay is None:
            att = self._matrix.get()
        census = profile = None
        if self.want_census and eng.capabilities.graph:
            for rec in reversed(self._seen().records):
                if "graph" in rec.extras:
                    census, profile = rec.extras["graph"], rec.extras.get("profile")
                    break
        missing = eng.capabilities.missing("attention")
        if missing is not None:
            status = f"attention {missing}"
        elif self.replaying:
            status = (
                f"replaying the run's {self.replaying} operation(s) in its own context to "
                "capture its attention weights…"
            )
            if replay is not None:
                status += f" {replay.describe()}"
        elif not self.on:
            status = (
                "attention capture off · press a to capture (in a context of its own: the "
                "run's is never rebuilt)"
            )
        elif att is None:
            status = "no weights captured yet: send a message"
        else:
            status = f"captured from kq_soft_max-{self.layer} · a turns capture off"
        if ctx is not None:
            status += f" · {ctx.problem or ctx.describe()}"
        return AttentionView(
            on=self.on,
            installed=cap is not None,
            layer=self.layer,
            head=self.head,
            n_layer=eng.info.n_layer,
            info=eng.info,
            att=att,
            census=census,
            profile=profile,
            status=status,
        )
