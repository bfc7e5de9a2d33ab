"""The logit lens for the app, on the decode worker's side.

The lens is computed only while its tab is showing: the app says which tabs show
(:class:`~tui.worker.commands.LensTab`), and the worker turns the capture on or off. llama.cpp
fixes the eval callback when a context is created, so the first time the tab shows in a
context built without one, a new context is made with the callback (flash attention as it
was) and the cache's tokens are prefilled again. When the current position was decoded while
the lens was off, its last token is decoded again (one token) so the lens has it.

Two lenses can be shown (a key switches): the *preview*, the position being predicted now
(from the decode whose logits the preview samples from), marking llama.cpp's top-1; and the
*last step*, the decode the newest token was sampled from, marking that token.

Nothing here imports Textual or Rich.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..engine.attention_capture import find_capture
from ..engine.lens_capture import AttentionLensCapture, LensCapture, find_lens
from ..engine.lens_grid import GRID_MAX
from ..engine.session import Engine
from ..engine.tokens import display_bytes
from . import surprise
from .lens_grid import GridView, grid_view

if TYPE_CHECKING:
    from ..engine.step import StepRecord
    from .parts import WorkerParts

MODES = ("preview", "last")


@dataclass(frozen=True)
class LensStep:
    """One decode's lens, with the token the pane marks."""

    record: int
    pos: int  # the position whose residual stream was projected
    layers: list[dict[str, Any]]  # extras["lens"]: {"layer", "top": [...], ...} per layer
    check: dict[str, Any]  # extras["lens_check"]
    mark: int  # the token marked
    mark_piece: str
    mark_what: str  # "llama.cpp's top-1" or "the token sampled"
    first_top1: int | None  # the first layer where the mark is the top-1
    first_top5: int | None  # ... where it is in the top 5


@dataclass(frozen=True)
class LensView:
    """What the Lens pane draws, copied out on the worker thread."""

    visible: bool
    mode: str  # "preview" or "last"
    step: LensStep | None
    n_layer: int
    status: str
    grid: GridView | None = None  # G: the position x layer grid instead of one step


def first_layers(layers: list[dict[str, Any]], token: int) -> tuple[int | None, int | None]:
    """The first layer where ``token`` is the top-1 and the first where it is in the top 5."""
    first1 = next((e["layer"] for e in layers if e["top"][0]["id"] == token), None)
    first5 = next((e["layer"] for e in layers if any(t["id"] == token for t in e["top"][:5])), None)
    return first1, first5


class LensControl:
    """Lens state of one worker (worker thread only)."""

    def __init__(self, worker: WorkerParts) -> None:
        self.w = worker
        self.visible = False
        self.mode = "preview"
        self.note: str | None = None
        self.grid = False  # G: the grid over every position (l_out copied whole)

    @property
    def engine(self) -> Engine:
        return self.w.engine

    # -- commands (worker thread) ----------------------------------------------------------------
    def set_visible(self, visible: bool) -> None:
        """The Lens tab shows (capture and project each step) or not (copy nothing)."""
        self.visible = visible
        if self.engine.capabilities.missing("lens") is not None:
            return  # e.g. a llama-server backend: the tab says why
        cap = find_lens(self.engine)
        if not visible:
            if cap is not None:
                cap.set_grid(False)
                cap.set_lens(False)
            return
        if self.engine.branches:
            self.note = "the lens waits: a fork is live (send a message or rewind to drop it)"
            return
        self.note = None
        if cap is None:
            n = self._rebuild()
            self.w.state.note(
                "Logit lens on: a new context was created with the eval callback"
                + (f", and its {n} tokens were prefilled again" if n else "")
                + "; each step now projects every layer's l_out through the model's head."
            )
            return
        cap.set_lens(True)
        cap.set_grid(self.grid)
        self._fill_current()

    def toggle_grid(self) -> None:
        """G: the grid over every position of the context, or back to one step. Turning it on
        decodes the context again with each ``l_out`` copied whole and logits on every row
        (llama.cpp keeps only rows with logits before the last layer): one lens projection
        per position, each about as long as one step's."""
        eng = self.engine
        cap = find_lens(eng)
        if eng.capabilities.missing("lens") is not None or cap is None or self.note:
            self.w.state.note("The lens grid needs the lens on first (tab 8).")
            return
        self.grid = not self.grid
        cap.set_grid(self.grid)
        surprise.keep(self.w)  # the grid asks for logits on every prompt row while it is on
        if not self.grid:
            self.w.state.note("Lens: one step again (G shows the grid over every position).")
            return
        tokens = eng.tokens
        if tokens:
            eng.decode_again(tokens)
            self._noted(eng)
        n = min(len(tokens), GRID_MAX)
        self.w.state.note(
            f"Lens grid: the context's {len(tokens)} tokens were decoded again with every "
            f"l_out copied whole and logits on every row; {n} positions x "
            f"{eng.info.n_layer} layers projected through the head. G goes back to one step."
        )

    def toggle_mode(self) -> None:
        if not self.engine.capabilities.graph:  # no local context (llama-server): as --lens
            self.w.require("lens")
        self.mode = MODES[(MODES.index(self.mode) + 1) % len(MODES)]

    def _rebuild(self) -> int:
        old = self.engine
        att = find_capture(old)
        cap: LensCapture
        if att is not None:
            cap = AttentionLensCapture(
                n_layer=old.info.n_layer, layers=att.layers, census=att.census_on, lens=True
            )
        else:
            census = self.w.attention.want_census
            cap = LensCapture(n_layer=old.info.n_layer, census=census, lens=True)
        new = Engine(old.model, old.config, old.settings, [cap])
        new.adopt_history(old)
        tokens = old.tokens
        self.w.replace_engine(new)
        surprise.keep(self.w)  # the new context scores prompts as the old one did
        if tokens:
            new.decode_again(tokens)
            self._noted(new)
        return len(tokens)

    def _fill_current(self) -> None:
        """Decode the last token again when the current position has no lens yet."""
        eng = self.engine
        rec = self._preview_record()
        tokens = eng.tokens
        if not tokens or (rec is not None and "lens" in rec.extras):
            return
        eng.decode_again(tokens, reuse=True)  # everything but the last token is re-used
        self._noted(eng)
        self.w.state.note(
            "Logit lens on: the last token was decoded again (the rest re-used) so the lens "
            "sees the position being predicted."
        )

    def _noted(self, eng: Engine) -> None:
        s = self.w.state
        if eng.turns:
            a, b = eng.turns[-1].records
            s.note_records(tuple(eng.records[a:b]), (0, eng.kv.used))
        self.w.attention.forget_matrix()

    # -- the view ---------------------------------------------------------------------------------
    def _preview_record(self) -> StepRecord | None:
        idx = self.engine.logits_record
        return self.engine.records.get(idx) if idx is not None else None

    def _last_record(self) -> StepRecord | None:
        """The decode the newest token of the context was sampled from."""
        eng = self.engine
        top = eng.logits_record
        for rec in reversed(eng.records):
            if top is not None and rec.index >= top:
                continue
            if rec.sampled is not None:
                return rec if eng.tokens[-1:] == [rec.sampled] else None
        return None

    def _step(self, rec: StepRecord | None) -> LensStep | None:
        if rec is None or "lens" not in rec.extras:
            return None
        layers, check = rec.extras["lens"], rec.extras["lens_check"]
        if self.mode == "last" and rec.sampled is not None:
            mark, what = rec.sampled, "the token sampled"
            piece = display_bytes(self.engine.vocab.piece(mark))
        else:
            mark, piece, what = check["top1"]["id"], check["top1"]["piece"], "llama.cpp's top-1"
        first1, first5 = first_layers(layers, mark)
        return LensStep(rec.index, check["pos"], layers, check, mark, piece, what, first1, first5)

    def view(self) -> LensView:
        eng = self.engine
        n_layer = eng.info.n_layer
        missing = eng.capabilities.missing("lens")
        if missing is not None:
            return LensView(self.visible, self.mode, None, n_layer, f"the logit lens {missing}")
        if not self.visible:
            return LensView(False, self.mode, None, n_layer, "")
        rec = self._preview_record() if self.mode == "preview" else self._last_record()
        step = self._step(rec)
        if self.note is not None:
            status = self.note
        elif step is None and rec is not None and "lens_problems" in rec.extras:
            status = "; ".join(rec.extras["lens_problems"])
        elif step is None:
            status = (
                "no step yet: send a message"
                if self.mode == "preview"
                else "no sampled step with a lens yet: step once"
            )
        else:
            status = ""
        grid = grid_view(eng) if self.grid else None
        return LensView(True, self.mode, step, n_layer, status, grid)
