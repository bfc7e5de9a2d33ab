"""The logit lens pane (tab 8): what each layer would predict if the model stopped there.

Layers down, each layer's top 5 with p (``l_out`` through the model's own head,
:mod:`tui.engine.model.lens`); the marked token (llama.cpp's top-1 for the preview, the sampled
one for the last step) bold wherever it appears, and the layers where it enters the top 5 and
the top 1 flagged. The header checks the method: the last layer's max |Δ| against llama.cpp's
logits. PgUp/PgDn and Home/End scroll; a new step opens where the marked token enters the top
5 (layer 20 to 28 of 30 on SmolLM2, below a 10-row pane). Pieces follow
:func:`tui.widgets.common.visible`. A backend without the lens gets ``Capabilities.missing``.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.timer import Timer
from textual.widgets import Static

from ..engine.model.tokens import escape_controls, visible
from ..worker.lens import LensStep, LensView
from .common import DIM
from .lens_grid import GridRows, fitting, grid_summary

MODE_NAMES = {"preview": "preview", "last": "last step"}
MIN_LAYER_ROWS = 6  # rows the tab keeps for the layers before it adds its about lines
MARK = "bold bright_cyan"
SEP = "│"
NARROW = 48  # below this width the summary is one line


def _piece(text: str, width: int) -> str:
    shown = visible(escape_controls(text)) or "∅"
    return shown if len(shown) <= width else shown[: width - 1] + "…"


def _p(p: float) -> str:
    """p in three characters: .78, .05, 1.0 (rounded to two decimals)."""
    return "1.0" if p >= 0.995 else f"{p:.2f}"[1:]


def cell_layout(full: int) -> tuple[int, int]:
    """(cells, piece width) for a row ``full`` columns wide: the flag and layer (4), then per
    cell a separator, a space, the piece, a space, p (3) and a space. Five cells while pieces
    get 5 columns or more, else as many as fit (at least one)."""
    for n in range(5, 0, -1):
        width = (full - 4) // n - 7
        if width >= 5 or n == 1:
            return n, max(3, min(14, width))
    return 1, 3


class LensRows:
    """One line per layer: a flag, the layer, then the top 5 as piece and p. The pieces get
    whatever width the pane has (5 to 14 characters; fewer cells on a narrow pane)."""

    def __init__(self, step: LensStep) -> None:
        self.step = step

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        step = self.step
        full = options.max_width
        n, width = cell_layout(full)
        for entry in step.layers:
            layer = entry["layer"]
            t = Text(no_wrap=True, overflow="ellipsis")
            if layer == step.first_top1:
                t.append("★", "bold green")
            elif layer == step.first_top5:
                t.append("▸", "bold yellow")
            else:
                t.append(" ")
            t.append(f"{layer:>2} ", "grey62")
            for c in entry["top"][:n]:
                style = MARK if c["id"] == step.mark else ""
                t.append(SEP, "grey30")
                t.append(" ")
                t.append(f"{_piece(c['piece'], width):<{width}}", style)
                t.append(" " + _p(c["p"]) + " ", "grey50")
            t.truncate(full)
            yield t


class LensHeader:
    """The header: what is shown, the marked token's first layers, the check against
    llama.cpp; on two lines, or one short line below :data:`NARROW` columns."""

    def __init__(self, step: LensStep, mode: str) -> None:
        self.step, self.mode = step, mode

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        step, check = self.step, self.step.check
        mark = visible(escape_controls(step.mark_piece))
        if options.max_width < NARROW:
            f5 = step.first_top5 if step.first_top5 is not None else "–"
            f1 = step.first_top1 if step.first_top1 is not None else "–"
            t = Text.assemble(
                (mark, MARK),
                (f" pos {step.pos} ", "grey70"),
                ("▸", "bold yellow"),
                f"{f5} ",
                ("★", "bold green"),
                f"{f1} · |Δ| {check['max_abs_diff']:.3f}",
                no_wrap=True,
                overflow="ellipsis",
            )
            yield t
            return
        first5 = f"layer {step.first_top5}" if step.first_top5 is not None else "no layer"
        first1 = f"layer {step.first_top1}" if step.first_top1 is not None else "no layer"
        yield Text.assemble(
            (f"{MODE_NAMES.get(self.mode, self.mode)} ", "bold"),
            (f"· position {step.pos} · ", "grey70"),
            (mark, MARK),
            (f" ({step.mark_what})", "grey70"),
        )
        yield Text.assemble(
            ("▸", "bold yellow"),
            f" top 5 first at {first5} · ",
            ("★", "bold green"),
            f" top-1 first at {first1}",
        )
        yield Text.assemble(
            "last layer vs llama.cpp's logits: ",
            (f"max |Δ| {check['max_abs_diff']:.3f}", "bold"),
        )


def summary(step: LensStep, mode: str) -> RenderableType:
    return LensHeader(step, mode)


NO_VIEW = "the lens waits for the worker's first view (it is busy with the command before)"


class LensPane(Static):
    """The layers of one decode's lens, or a sentence saying why there is none."""

    _loading: tuple[str, float] | None = None  # the head's load: the sentence, since when
    _ticking: Timer | None = None

    def show_lens(self, lv: LensView | None, missing: str | None) -> None:
        self._loading = None
        if missing is not None:
            self.update(Text(missing, "grey70"))
        elif lv is None:
            self.update(Text(NO_VIEW, "grey70"))
        elif lv.step is None:
            if lv.loading_since is not None:  # the worker is blocked in the load: count here
                self._loading = (lv.status, lv.loading_since)
                self._tick()
                if self._ticking is None:
                    self._ticking = self.set_interval(1.0, self._tick)
                return
            self.update(Text(lv.status, "grey70"))  # never empty: a LensView says why
        else:
            self.update(LensRows(lv.step))
        if self._ticking is not None:
            self._ticking.stop()
            self._ticking = None

    def _tick(self) -> None:
        if self._loading is not None:
            what, since = self._loading
            self.update(Text(f"{what} {time.monotonic() - since:.0f} s", "grey70"))


class LensTab(Vertical):
    """Tab 8: the summary (fixed) above the layers (they scroll)."""

    DEFAULT_CSS = """
    LensTab > #lens-summary { height: auto; }
    LensTab > VerticalScroll { height: 1fr; }
    LensTab LensPane { height: auto; }
    """

    _opened: tuple[int, int, str] | None = None  # the step the rows were last opened at

    def compose(self) -> ComposeResult:
        yield Static(id="lens-summary")
        with VerticalScroll():
            yield LensPane()

    def scroll_to_layer(self, layer: int) -> None:
        """Put ``layer``'s row at the top (as far as the rows go), once they are laid out."""
        rows = self.query_one(VerticalScroll)
        self.call_after_refresh(rows.scroll_to, y=max(0, layer), animate=False)

    def scroll_tab(self, direction: int) -> None:
        """PgDn/PgUp (±1) page the layers; Home/End (±2) go to the first or the last."""
        rows = self.query_one(VerticalScroll)
        if direction >= 2:
            rows.scroll_end(animate=False)
        elif direction <= -2:
            rows.scroll_home(animate=False)
        elif direction > 0:
            rows.scroll_page_down(animate=False)
        else:
            rows.scroll_page_up(animate=False)

    def _about(self, lv: LensView, above: list[RenderableType]) -> list[RenderableType]:
        """The observer context and the head it holds, one dim paragraph each, where the tab
        keeps :data:`MIN_LAYER_ROWS` rows for the layers under them and the lines ``above``
        (wrapped at the tab's width); else none: the layers are what the tab is for (at 80x24
        and at 120x34 these lines pushed every layer row out of it)."""
        lines = [*(["lens " + lv.context] if lv.context else []), *([lv.head] if lv.head else [])]
        about: list[RenderableType] = [Text(line, DIM) for line in lines]
        console = self.app.console
        opts = console.options.update_width(max(self.content_size.width - 2, 1))  # padding
        used = sum(len(console.render_lines(t, opts, pad=False)) for t in [*above, *about])
        return about if self.content_size.height - used >= MIN_LAYER_ROWS else []

    def show(self, view: Any) -> None:
        lv: LensView | None = getattr(view, "lens", None)
        missing = view.capabilities.missing("lens")
        note = None if missing is None else f"the logit lens {missing}"
        head = self.query_one("#lens-summary", Static)
        if note is None and lv is not None and lv.grid is not None:
            width = self.content_size.width or 60
            n = fitting(lv.grid, width - 2)  # less the scrollbar
            self.query_one(LensPane).update(GridRows(lv.grid, n))
            rows: list[RenderableType] = [grid_summary(lv.grid, n, narrow=width < NARROW)]
            if lv.status:
                rows.append(Text(lv.status, "bright_yellow"))
            rows.extend(self._about(lv, rows))
            head.update(Group(*rows))
            head.display = True
            key = (-1, lv.grid.n_tokens, "grid")
            if key != self._opened:  # the deep layers first, where the answers form
                self._opened = key
                self.scroll_to_layer(lv.grid.n_layer)
            self.border_title = "logit lens · every position (G: one step)"
            cols = lv.grid.columns[-n:]
            shown = f"{cols[0].pos}–{cols[-1].pos} of {lv.grid.n_tokens} · " if cols else ""
            own = f" · {lv.observer}" if lv.observer else ""
            self.border_subtitle = f"grid {shown}PgUp/PgDn{own}"
            return
        self.query_one(LensPane).show_lens(lv, note)
        if note is None and lv is not None and lv.step is not None:
            parts: list[RenderableType] = [summary(lv.step, lv.mode)]
            if lv.status:
                parts.append(Text(lv.status, "bright_yellow"))
            parts.extend(self._about(lv, parts))
            head.update(Group(*parts))
            head.display = True
            key = (lv.step.record, lv.step.mark, lv.mode)
            if key != self._opened:  # a new step: open where the mark enters the top 5
                self._opened = key
                first = lv.step.first_top5
                self.scroll_to_layer(first if first is not None else len(lv.step.layers))
        else:
            head.update("")
            head.display = False
        self.border_title = "logit lens · what each layer would predict"
        mode = lv.mode if lv is not None else "preview"
        ms = f" · {lv.step.check['ms']:.0f} ms" if lv is not None and lv.step is not None else ""
        own = f" · {lv.observer}" if lv is not None and lv.observer else ""
        self.border_subtitle = f"{MODE_NAMES.get(mode, mode)}{ms} · L switches · PgUp/PgDn{own}"
