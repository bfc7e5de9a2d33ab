"""The logit lens for the app, on the decode worker's side.

The lens is computed only while its tab shows (:class:`~tui.worker.commands.LensShown`). It is
captured in the observer context (:mod:`tui.worker.observers`; flash attention as the run's),
which replays the run's decode calls with the same batches, so its last layer is the run's
logits bit for bit; a step replayed without the lens (shown after a rewind) makes that context
anew. Two lenses, switched by a key: the *preview* (the position being predicted, marking
llama.cpp's top-1) and the *last step* (the decode the newest token was sampled from, marking
it). No Textual or Rich here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..engine.model.errors import TokenstepError
from ..engine.model.tokens import display_bytes
from ..engine.observe.lens_capture import LensCapture
from ..engine.observe.lens_grid import GRID_MAX
from .lens_grid import GridView, grid_view
from .observers import mib_of

if TYPE_CHECKING:
    from ..engine.model.lens import LensHead
    from ..engine.run.backend import Backend
    from ..engine.run.step import StepRecord
    from .parts import WorkerParts

MODES = ("preview", "last")
OFF = (
    "the lens is off: it is computed only while tab 8 shows, and the worker turns it on "
    "when it reaches that key (after the command under way)"
)
NO_CONTEXT = "the lens has no observer context: nothing asks for one now (tab 8 makes it)"
NOTHING_YET = "no lens yet: no decode has been projected through the lens so far"


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
    status: str = ""  # empty: the general reason (see __post_init__)
    grid: GridView | None = None  # G: the position x layer grid instead of one step
    observer: str = ""  # what the observer context the lens comes from is
    loading_since: float | None = None  # time.monotonic() when the head's load began
    head: str = ""  # what the lens's head the worker keeps is (empty: none read yet)
    context: str = ""  # the observer context's kernel and KV memory, as attention says them

    def __post_init__(self) -> None:
        """A view without a step or grid always says why: an empty status becomes the
        general reason (off, or on with nothing computed yet), never a blank pane."""
        if self.step is None and self.grid is None and not self.status:
            object.__setattr__(self, "status", NOTHING_YET if self.visible else OFF)


def first_layers(layers: list[dict[str, Any]], token: int) -> tuple[int | None, int | None]:
    """The first layer where ``token`` is the top-1 and the first where it is in the top 5."""
    first1 = next((e["layer"] for e in layers if e["top"][0]["id"] == token), None)
    first5 = next((e["layer"] for e in layers if any(t["id"] == token for t in e["top"][:5])), None)
    return first1, first5


def head_note(head: LensHead) -> str:
    """What the kept head holds, each array by its own nbytes: the matrix, the per-block sums
    of |w| that bound llama.cpp's activation rounding, and the norm (and biases)."""
    mib = 1 << 20
    n_vocab, n_embd = head.out.shape
    parts = [f"{head.out.nbytes / mib:.1f} MiB"]
    if head.block_abs is not None:
        parts.append(f"{head.block_abs.nbytes / mib:.1f} MiB of rounding bounds")
    small = sum(a.nbytes for a in (head.norm, head.norm_bias, head.out_bias) if a is not None)
    parts.append(
        f"{small / 1024:.1f} KiB of norm"
        + (" and biases" if head.out_bias is not None or head.norm_bias is not None else "")
    )
    return (
        f"head: {head.out_name} as float32, {n_vocab:,} x {n_embd:,}, {' + '.join(parts)}, read "
        "once and kept while the lens is off (one head), so 8 shows it again at once"
    )


class LensControl:
    """Lens state of one worker (worker thread only)."""

    def __init__(self, worker: WorkerParts) -> None:
        self.w = worker
        self.visible = False
        self.mode = "preview"
        self.note: str | None = None
        self.grid = False  # G: the grid over every position (l_out copied whole)
        self._refilled: int | None = None  # the record the observer was last made anew for
        self.loading: tuple[str, float] | None = None  # the head's load: what, since when

    def _head_load(self) -> str | None:
        """The sentence for the head's load, or None when the head is already read."""
        obs = self.w.observers
        if (obs.ctx is not None and obs.ctx.head is not None) or obs.head is not None:
            return None
        info = self.engine.info
        return (
            f"loading the lens's output head ({info.n_vocab:,} x {info.n_embd:,} from the GGUF, "
            "dequantized to float32)"
        )

    def head_note(self) -> str:
        """What the kept head holds: one head, read once and kept while the lens is off."""
        obs = self.w.observers
        head = (obs.ctx.head if obs.ctx is not None else None) or obs.head
        if head is None:
            return ""
        return head_note(head)

    @property
    def engine(self) -> Backend:
        return self.w.engine

    # -- commands (worker thread) ----------------------------------------------------------------
    def set_visible(self, visible: bool) -> None:
        """The Lens tab shows (capture and project in the observer's context) or not."""
        self.visible = visible
        missing = self.engine.capabilities.missing("lens")
        if missing is not None:  # e.g. a llama-server backend: the tab and the notice say why
            if visible:  # the key's own answer replaces an earlier key's
                self.w.state.note(f"The logit lens {missing}.")
            return
        obs = self.w.observers
        if not visible:
            if obs.ctx is not None:
                obs.want(lens=False, grid=False)
            return
        self.note = None
        fresh = obs.ctx is None or not isinstance(obs.ctx.capture, LensCapture)
        loading = self._head_load()
        try:
            if loading is None:
                obs.want(lens=True, grid=self.grid)
            else:  # a view saying so goes out before the load, and the pane counts seconds
                self.loading = (loading, time.monotonic())
                with self.w.busy(loading[0].upper() + loading[1:]):
                    obs.want(lens=True, grid=self.grid)
        except TokenstepError as e:
            self.note = f"the lens's observer context could not be made: {e}"
            raise
        finally:
            self.loading = None
        obs.fill("Logit lens")
        if fresh and obs.ctx is not None:
            self.w.state.note(
                f"Logit lens on, in an {obs.ctx.describe()}: each step projects every layer's "
                "l_out through the model's head there; the run's context is untouched."
            )

    def toggle_grid(self) -> None:
        """G: the grid over every position of the context, or back to one step. Turning it on
        makes a new observer context that replays the run with each ``l_out`` copied whole
        and logits on every prompt row (llama.cpp keeps only rows with logits before the
        last layer): one lens projection per position of the newest 64."""
        eng = self.engine
        obs = self.w.observers
        if eng.capabilities.missing("lens") is not None or not self.visible or obs.ctx is None:
            self.w.state.note("The lens grid needs the lens on first (tab 8).")
            return
        self.grid = not self.grid
        obs.want(lens=True, grid=self.grid)
        if not self.grid:
            self.w.state.note("Lens: one step again (G shows the grid over every position).")
            return
        obs.fill("Lens grid")
        self.w.attention.forget_matrix()
        tokens = eng.tokens
        n = min(len(tokens), GRID_MAX)
        self.w.state.note(
            f"Lens grid: the observer's own context replayed the run with every l_out copied "
            f"whole and logits on every prompt row; {n} positions x {eng.info.n_layer} layers "
            "projected through the head. G goes back to one step."
        )

    def toggle_mode(self) -> None:
        if not self.engine.capabilities.graph:  # no local context (llama-server): as --lens
            self.w.require("lens")
        self.mode = MODES[(MODES.index(self.mode) + 1) % len(MODES)]

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

    def _step(self, rec: StepRecord | None, seen: StepRecord | None) -> LensStep | None:
        """``rec``: the run's record; ``seen``: the observer's replay of it, with the lens."""
        if rec is None or seen is None or "lens" not in seen.extras:
            return None
        layers, check = seen.extras["lens"], seen.extras["lens_check"]
        if self.mode == "last" and rec.sampled is not None:
            mark, what = rec.sampled, "the token sampled"
            piece = display_bytes(self.engine.vocab.piece(mark))
        else:
            mark, piece, what = check["top1"]["id"], check["top1"]["piece"], "llama.cpp's top-1"
        first1, first5 = first_layers(layers, mark)
        return LensStep(rec.index, check["pos"], layers, check, mark, piece, what, first1, first5)

    def _seen(self, rec: StepRecord | None) -> tuple[StepRecord | None, str]:
        """The observer's record of ``rec`` with the lens on it; a record replayed before the
        lens was wanted (e.g. after a rewind to an older step) makes the observer context
        anew, once, with the lens from that record on."""
        obs = self.w.observers
        ctx = obs.ready()
        if ctx is None:
            return None, ""
        if rec is None:
            return None, ctx.problem or ctx.brief()
        seen = ctx.record_for(rec.index)
        has = seen is not None and ("lens" in seen.extras or "lens_problems" in seen.extras)
        if not has and ctx.problem is None and self._refilled != rec.index and obs.may_replay():
            self._refilled = rec.index
            obs.rebuild(lens_from=rec.index)
            self.w.attention.forget_matrix()
            ctx = obs.ready()
            seen = ctx.record_for(rec.index) if ctx is not None else None
        if ctx is None:
            return None, ""
        return seen, ctx.problem or ctx.brief()

    def view(self) -> LensView:
        eng = self.engine
        n_layer = eng.info.n_layer
        missing = eng.capabilities.missing("lens")
        if missing is not None:
            return LensView(self.visible, self.mode, None, n_layer, f"the logit lens {missing}")
        obs = self.w.observers
        if self.loading is not None:  # the pane counts the seconds after the status
            what, since = self.loading
            read = f" {mib_of(*obs.head_read)} read," if obs.head_read is not None else ""
            return LensView(True, self.mode, None, n_layer, what + "…" + read, loading_since=since)
        if obs.progress is not None and self.visible:  # fill()'s replay under way
            p = obs.progress
            status = (
                f"replaying the run's {p.ops_total:,} operation(s) in its own context for the "
                f"lens… {p.describe()}"
            )
            return LensView(True, self.mode, None, n_layer, status, head=self.head_note())
        if not self.visible:
            return LensView(False, self.mode, None, n_layer, OFF)
        rec = self._preview_record() if self.mode == "preview" else self._last_record()
        seen, observer = self._seen(rec)
        step = self._step(rec, seen)
        if self.note is not None:
            status = self.note
        elif step is None and seen is not None and "lens_problems" in seen.extras:
            status = "; ".join(seen.extras["lens_problems"])
        elif step is None and self.w.observers.ctx is None:
            status = NO_CONTEXT
        elif step is None:
            status = (
                "no step yet: send a message"
                if self.mode == "preview"
                else "no sampled step with a lens yet: step once"
            )
        else:
            status = ""
        obs_eng = self.w.observers.engine
        grid = grid_view(obs_eng) if self.grid and obs_eng is not None else None
        ctx = self.w.observers.ctx
        context = (ctx.problem or ctx.describe()) if ctx is not None else ""
        return LensView(
            True,
            self.mode,
            step,
            n_layer,
            status,
            grid,
            observer,
            head=self.head_note(),
            context=context,
        )
