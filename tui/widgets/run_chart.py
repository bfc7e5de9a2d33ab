"""The run over time (key ``c``): the reply's entropy and its picks' p, one point per step,
drawn with textual-plot's ``PlotWidget``; the prompt's perplexity above them.

Keys when focused (from the key table, ``keys.PANE_KEYS["run"]``): ←/→ move the cursor one
step, Home/End to the first and newest step, ↑/↓ switch the plot. A plot needs about ten rows
to be read (a tab 15 rows high gave each of two plots three rows of points), so below
``BOTH_ROWS`` rows the chart draws one plot at a time; ``z`` (the whole window) fits both.
The cursor's token is marked in the text pane (the app hears :class:`RunChart.Moved`) and the
footer gives its piece, p, p′ and entropy. The figures are the run record's picks
(:class:`tui.engine.record.run_record.Pick`, through the surprise map's view), not recomputed; over
llama-server a pick saw only the server's top K, and the footer says so.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Static
from textual_plot import HiResMode, PlotWidget

from ..worker.surprise import SurpriseView
from ..worker.views import View
from .common import DIM, literal
from .keys import pane_bindings

PLOTS = {"entropy": "#run-entropy", "p": "#run-p"}
NAMES = {"entropy": "entropy", "p": "p of the pick", "both": "both"}
BOTH_ROWS = 24  # the chart's height from which both plots show at once (10 rows of points)
MIN_ROWS = 9  # below this a plot has fewer than four rows of points: say z instead


class RunChart(Vertical, can_focus=True):
    DEFAULT_CSS = """
    RunChart { height: 1fr; }
    RunChart > PlotWidget { height: 1fr; }
    RunChart > Static { height: 1; }
    RunChart > #run-small { height: 1fr; }
    """
    BINDINGS = [Binding(k, a, d, show=False) for k, a, d in pane_bindings("run")]

    class Moved(Message):
        """The cursor is on context token ``index`` (None: no reply yet)."""

        def __init__(self, index: int | None) -> None:
            super().__init__()
            self.index = index

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.cursor: int | None = None  # step of the reply (0 = its first token)
        self._follow = True  # stay on the newest step until moved by hand
        self._entropy: list[float | None] = []
        self._p: list[float | None] = []
        self._pieces: tuple[bytes, ...] = ()
        self._start = 0
        self._key: tuple[object, ...] | None = None
        self._sv: SurpriseView | None = None
        self.which: str | None = None  # "entropy", "p" or "both"; None: both if tall enough

    @property
    def tall(self) -> bool:
        return self.size.height >= BOTH_ROWS

    @property
    def small(self) -> bool:
        return 0 < self.size.height < MIN_ROWS

    def modes(self) -> tuple[str, ...]:
        return ("both", "entropy", "p") if self.tall else ("entropy", "p")

    @property
    def showing(self) -> str:
        """The plot(s) on screen."""
        modes = self.modes()
        if self.which in modes:
            return self.which
        return modes[0] if self.which is None else "entropy"

    def compose(self) -> ComposeResult:
        yield Static(id="run-head")
        yield PlotWidget(id="run-entropy", allow_pan_and_zoom=False)
        yield PlotWidget(id="run-p", allow_pan_and_zoom=False)
        yield Static(
            Text(
                f"Too short to draw a plot (it needs {MIN_ROWS} rows): z enlarges the bottom "
                "pane. ←/→ move the cursor; its step's figures are below.",
                DIM,
            ),
            id="run-small",
        )
        yield Static(id="run-foot")

    def on_mount(self) -> None:
        for plot in self.query(PlotWidget):
            plot.can_focus = False
            plot.margin_left = 8
        # The tab is a dozen rows high: the plots share the x axis, drawn once at the bottom.
        h = self.query_one("#run-entropy", PlotWidget)
        h.margin_top, h.margin_bottom = 1, 0
        h.set_ylabel("entropy, bits")
        p = self.query_one("#run-p", PlotWidget)
        p.margin_top, p.margin_bottom = 1, 1
        p.set_ylabel("p of the pick")
        self._layout_plots()

    def on_resize(self) -> None:
        self._layout_plots()

    def _layout_plots(self) -> None:
        """One plot, or both when the chart is tall; the lowest one draws the x axis."""
        showing = self.showing
        h = self.query_one("#run-entropy", PlotWidget)
        p = self.query_one("#run-p", PlotWidget)
        small = self.small
        h.display = not small and showing in ("entropy", "both")
        p.display = not small and showing in ("p", "both")
        self.query_one("#run-small", Static).display = small
        h.margin_bottom = 0 if showing == "both" else 1
        self._head()

    def action_plot(self, delta: int) -> None:
        modes = self.modes()
        i = modes.index(self.showing) if self.showing in modes else 0
        self.which = modes[(i + delta) % len(modes)]
        self._layout_plots()
        self._foot()

    def show(self, view: View) -> None:
        self.show_run(view.text.surprise, view.text.reply_start, view.text.pieces)

    def show_run(
        self, sv: SurpriseView, reply_start: int | None, pieces: tuple[bytes, ...]
    ) -> None:
        """New data: redraw the plots only when the series changed."""
        self._sv = sv
        start = reply_start if reply_start is not None else len(pieces)
        vals = sv.values[start:]
        key = (start, vals)
        self._pieces, self._start = pieces, start
        if key != self._key:
            self._key = key
            self._entropy = [None if v is None else v[2] for v in vals]
            self._p = [None if v is None else v[0] for v in vals]
            n = len(vals)
            if self._follow or self.cursor is None or self.cursor >= n:
                self.cursor = n - 1 if n else None
            self._redraw()
        self._head()
        self._foot()

    def _redraw(self) -> None:
        n = len(self._p)
        for wid, ys, colour, top in (
            ("#run-entropy", self._entropy, "medium_purple1", None),
            ("#run-p", self._p, "green3", 1.0),
        ):
            plot = self.query_one(wid, PlotWidget)
            plot.clear()
            xs = [i for i, y in enumerate(ys) if y is not None]
            yv = [y for y in ys if y is not None]
            if xs:
                plot.plot(xs, yv, line_style=colour, hires_mode=HiResMode.BRAILLE)
                plot.scatter(xs, yv, marker="•", marker_style=colour)
            plot.set_xlimits(0, max(n - 1, 1))
            plot.set_ylimits(0, top if top is not None else max([1.0, *yv]) * 1.1)
            if self.cursor is not None:
                plot.add_v_line(self.cursor, "bright_yellow")

    def _head(self) -> None:
        sv = self._sv
        t = Text(no_wrap=True, overflow="ellipsis")
        if self.small:
            t.append("run chart", Style(bold=True))
            t.append(" (z to draw it)", DIM)
        else:
            t.append(NAMES[self.showing], Style(bold=True))
            t.append(" (↑↓ other plot" + (")" if self.tall else ", z both)"), DIM)
        t.append(f" · reply {len(self._p)} step(s) · ", DIM)
        if sv is not None and sv.prompt_ppl is not None:
            t.append(f"prompt perplexity {sv.prompt_ppl:.2f}", Style(bold=True))
            t.append(f" over {sv.prompt_scored} of {sv.prompt_tokens} prompt tokens", DIM)
        else:
            t.append("prompt perplexity not measured ", DIM)
            t.append(
                "(press u: the next prompt is decoded with logits on every row)"
                if sv is None or sv.scores_prompts
                else "(it needs every prompt row's logits: only a local model gives them)",
                DIM,
            )
        self.query_one("#run-head", Static).update(t)

    def _foot(self) -> None:
        t = Text(no_wrap=True, overflow="ellipsis")
        k = self.cursor
        if k is None or self._sv is None:
            t.append("No reply yet: each step adds a point.", DIM)
        else:
            i = self._start + k
            piece = (
                literal(self._pieces[i].decode("utf-8", "replace")) if i < len(self._pieces) else ""
            )
            t.append(f"step {k}: {piece!r} ", Style(bold=True))
            v = self._sv.values[i] if i < len(self._sv.values) else None
            if v is None:
                t.append("(not known)", DIM)
            else:
                pf = "—" if v[1] is None else f"{v[1]:.4f}"
                if i in self._sv.partial:  # over llama-server: its top K only
                    t.append(f"p {v[0]:.4f} (server's top K) · p′ {pf} · entropy ≤ {v[2]:.2f} bits")
                else:
                    t.append(f"p {v[0]:.4f} · p′ {pf} · entropy {v[2]:.2f} bits")
            t.append("   ←/→ move, Home/End", DIM)
        self.query_one("#run-foot", Static).update(t)

    def action_move(self, delta: int) -> None:
        if self.cursor is not None:
            self.move_to(self.cursor + delta)

    def action_move_to(self, k: int) -> None:
        self.move_to(k if k >= 0 else len(self._p) - 1)

    def move_to(self, k: int) -> None:
        n = len(self._p)
        if not n:
            return
        self.cursor = max(0, min(k, n - 1))
        self._follow = self.cursor == n - 1
        self._redraw()
        self._foot()
        self.post_message(self.Moved(self._start + self.cursor))
