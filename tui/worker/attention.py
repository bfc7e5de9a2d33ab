"""Attention and graph census for the app, on the decode worker's side.

The :class:`~tui.worker.thread.Worker` owns one :class:`AttentionControl`; every method here
runs on the worker thread (the only one that touches the engine). The app sends commands
(attention on/off, layer, head, whether the Attention/Anatomy tab is showing) through the
worker's queue and draws the :class:`AttentionView` the worker puts in each view.

llama.cpp fixes the eval callback when a context is created. So attention on, in a context
built without the capture, means a new context: flash attention off, the callback installed,
and the tokens already in the cache prefilled again (one batched prefill). Attention off keeps
the callback installed but idle (it asks for no tensor). A layer that was not being captured
is captured by prefilling the same tokens again, so every row of the new layer is real.

Nothing here imports Textual or Rich.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..engine.attention_capture import AttentionCapture, find_capture
from ..engine.attention_map import ContextAttention, context_attention
from ..engine.errors import TokenstepError
from ..engine.lens_capture import AttentionLensCapture, find_lens
from ..engine.model import ModelInfo
from ..engine.session import Engine
from .caches import Memo
from .commands import AttentionLayer

if TYPE_CHECKING:
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
    """Attention state of one controller (worker thread only)."""

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
        self._layers: list[int] | None = None  # the next rebuild captures these (A: all)
        cap = self.capture
        if cap is not None:
            if cap.layers:
                self.on = True
                if self.layer not in cap.layers:
                    self.layer = cap.layers[0]
            elif self.on:
                cap.set_layers([self.layer])
        # O(n) (a lookup per row, nothing n × n), so it is rebuilt whenever the context
        # changed; the pane lays out only the rows it draws.
        self._matrix: Memo[tuple[Any, ...], ContextAttention | None] = Memo(
            lambda: (
                len(self.engine.records),
                self.engine.n_past,
                self.layer,
                tuple(self.engine.tokens[-1:]),
            ),
            lambda: context_attention(self.engine, self.layer),
        )

    @property
    def engine(self) -> Engine:
        return self.w.engine

    @property
    def capture(self) -> AttentionCapture | None:
        return find_capture(self.engine)

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
        cap = self.capture
        if cap is not None:
            cap.census_on = self.want_census

    def toggle(self) -> None:
        self.w.require("attention")
        cap = self.capture
        if self.on:
            self.on = False
            self.w.state.dirty_since_save = True
            if cap is not None:
                cap.set_layers([])
            fa = self.engine.flash_attn_resolved
            how = (
                "the eval callback stays installed but copies nothing (flash attention stays "
                "off in this context)"
                if cap is not None
                else f"nothing was being copied (flash attention {fa} in this context)"
            )
            self.w.state.note(f"Attention capture off: {how}.")
            return
        # Refuse before changing anything: a refused toggle leaves pane, notice and header as
        # they were (capture off, the context and its flash-attention setting untouched).
        self._no_forks()
        if cap is None:
            self._no_quantized_v()
        self.w.state.dirty_since_save = True
        n_tok = len(self.engine.tokens)
        if cap is None:
            with self.w.busy(
                "Attention on: building a context with flash attention off and the eval "
                f"callback, then prefilling its {n_tok} tokens again"
            ):
                n = self._rebuild()
            self.on = True  # only now: a view sent during the rebuild still shows it off
            again = f", and its {n} tokens were prefilled again" if n else ""
            self.w.state.note(
                f"Attention on (layer {self.layer}): a new context was created with flash "
                f"attention off and the eval callback{again}; decoding is now slower "
                "(capture copies kq_soft_max each step)."
            )
            return
        cap.set_layers([self.layer])
        with self.w.busy(f"Attention on: prefilling the {n_tok} tokens in the cache again"):
            try:
                n = self._reprefill()
            except Exception:
                cap.set_layers([])
                raise
        self.on = True
        again = f"; the {n} tokens in the cache were prefilled again to capture them" if n else ""
        self.w.state.note(f"Attention on (layer {self.layer}){again}. Decoding is slower while on.")

    def capture_all(self) -> None:
        """``A``: every layer in one prefill, so [ and ] then switch layers at once."""
        self.w.require("attention")
        n_layer = self.engine.info.n_layer
        everything = list(range(n_layer))
        cap = self.capture
        n_tok = len(self.engine.tokens)
        self._no_forks()  # refused before anything changes
        if cap is None:
            self._layers = everything
            self.on = False
            try:
                self.toggle()
            finally:
                self._layers = None
            if self.on:
                self.w.state.note(
                    f"All {n_layer} layers captured in one prefill (a new context with flash "
                    "attention off); [ and ] now switch layers without another."
                )
            return
        before = list(cap.layers)
        cap.set_layers(everything)
        self.w.state.dirty_since_save = True
        with self.w.busy(f"Capturing all {n_layer} layers: prefilling the {n_tok} tokens again"):
            try:
                n = self._reprefill()
            except Exception:
                cap.set_layers(before)
                raise
        self.on = True
        self.w.state.note(
            f"All {n_layer} layers captured in one prefill of {n} tokens; [ and ] now switch "
            "layers without another. Decoding is slower while every layer is copied."
        )

    def set_layer(self, layer: int) -> None:
        self.w.require("attention")
        # Presses of [ or ] made while a capture was prefilling: only the newest is done.
        later = self.w.take_queued(AttentionLayer)
        skipped = 0
        while isinstance(later, AttentionLayer):
            skipped += 1
            layer = later.layer
            later = self.w.take_queued(AttentionLayer)
        n_layer = self.engine.info.n_layer
        layer %= n_layer
        cap = self.capture
        if self.on and cap is not None and layer not in cap.layers:
            self._no_forks()  # a refused layer leaves the captured one as it was
        self.layer = layer
        self.w.state.dirty_since_save = True
        if not self.on or cap is None:
            self.w.state.note(f"Layer {layer} selected; press a to turn attention capture on.")
            return
        if layer in cap.layers:
            self.w.state.note(f"Layer {layer}: already captured, shown without a new prefill.")
            return
        cap.set_layers([layer])
        n_tok = len(self.engine.tokens)
        with self.w.busy(f"Capturing layer {layer} of {n_layer}: prefilling the {n_tok} tokens "
                         "in the cache again"):
            n = self._reprefill()
        taken = f" ({skipped + 1} layer presses taken together: the newest wins)" if skipped else ""
        self.w.state.note(
            f"Layer {layer}: the {n} tokens in the cache were prefilled again to capture it "
            f"(same tokens, same KV cache contents){taken}."
        )

    def _no_forks(self) -> None:
        if self.engine.branches:
            raise TokenstepError(
                "capturing attention prefills the context again; send a message or rewind "
                "to drop the fork first."
            )

    def _no_quantized_v(self) -> None:
        type_v = self.engine.config.cache_type_v
        if type_v not in ("f16", "f32"):
            raise TokenstepError(
                f"attention needs flash attention off, and a {type_v} V cache needs it on; "
                "start with -ctv f16."
            )

    def _reprefill(self) -> int:
        """Decode the context's tokens again so the capture sees every row."""
        self._no_forks()
        eng = self.engine
        tokens = eng.tokens
        if not tokens:
            return 0
        eng.decode_again(tokens)
        self._after_prefill(eng)
        return len(tokens)

    def _rebuild(self) -> int:
        """A new context with the capture installed; the cache's tokens are prefilled again."""
        self._no_forks()
        old = self.engine
        config = dataclasses.replace(old.config, flash_attn="off")
        layers = self._layers or [self.layer]
        self._layers = None
        lens = find_lens(old)  # the lens shares the one eval callback: keep it as it was
        cap = AttentionLensCapture(
            n_layer=old.info.n_layer,
            layers=layers,
            census=self.want_census,
            lens=lens is not None and lens.lens_on,
        )
        new = Engine(old.model, config, old.settings, [cap])
        # The session keeps its history: step records, prefill turns, context shifts.
        new.adopt_history(old)
        tokens = old.tokens
        self.w.replace_engine(new)  # the worker made this one: it frees it
        new.decode_again(tokens)
        self._after_prefill(new)
        return len(tokens)

    def forget_matrix(self) -> None:
        """The context was prefilled again (e.g. by the lens): rebuild the matrix."""
        self._matrix.clear()

    def _after_prefill(self, eng: Engine) -> None:
        s = self.w.state
        recs = [r for r in eng.records[s.records_from :] if r.phase == "prefill"]
        if recs and eng.turns:
            a, b = eng.turns[-1].records
            s.note_records(tuple(eng.records[a:b]), (0, eng.kv.used))
        self._matrix.clear()

    # -- the view ---------------------------------------------------------------------------------
    def view(self) -> AttentionView:
        eng = self.engine
        cap = self.capture
        att = None
        if self.want_matrix and self.on and cap is not None:
            att = self._matrix.get()
        census = profile = None
        if self.want_census and eng.capabilities.graph:
            for rec in reversed(eng.records):
                if "graph" in rec.extras:
                    census, profile = rec.extras["graph"], rec.extras.get("profile")
                    break
        missing = eng.capabilities.missing("attention")
        if missing is not None:
            status = f"attention {missing}"
        elif not self.on:
            status = "attention capture off · press a to capture (rebuilds the context if needed)"
        elif att is None:
            status = "no weights captured yet: send a message"
        else:
            status = f"captured from kq_soft_max-{self.layer} · a turns capture off"
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
