"""Pane 8, causal mask: which earlier tokens each token may attend to (the lower triangle).

Query i (a row, top to bottom) may see key j (a column) when j <= i. Each character cell holds
two query rows (upper and lower half block), so the triangle keeps its shape on a terminal.
The rows the last ``llama_decode`` computed are lit: a block for a prefill, one row for a
decode step. When the context is wider than the pane, the mask is down-sampled (one cell
stands for f keys by f queries) and the title says so; when it is taller, it scrolls."""

from __future__ import annotations

from rich.color import Color
from rich.segment import Segment
from rich.style import Style

from .common import LinePane

LABEL = Style(color="grey50")
LABEL_LIT = Style(color="bright_yellow", bold=True)
LABEL_W = 6
# Pixel states: outside the context, masked (future), partly visible (a down-sampled
# diagonal block), visible; each with a lit variant for rows the last decode computed.
COLORS = {
    "none": None,
    "masked": Color.parse("#2e2e2e"),
    "partial": Color.parse("#2f6f2f"),
    "visible": Color.parse("#3fae3f"),
    "masked_lit": Color.parse("#4d4300"),
    "partial_lit": Color.parse("#a08a20"),
    "visible_lit": Color.parse("#ffd75f"),
}


_STYLES: dict[tuple[Color | None, Color | None], Style] = {}  # (upper, lower) -> Style, made once


class CausalMaskPane(LinePane):
    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.factor = 1

    @property
    def n_rows(self) -> int:
        """Query rows in the mask: one per token in the context."""
        return self.view.n_past if self.view else 0

    def relayout(self) -> None:
        n = self.n_rows
        avail = max(self.size.width - LABEL_W - 1, 4)
        self.factor = max(1, -(-n // avail))
        super().relayout()
        self._titles()

    def _blocks(self) -> int:
        return -(-self.n_rows // self.factor)

    def count_rows(self) -> int:
        return -(-self._blocks() // 2)

    def follow_row(self) -> int | None:
        if self.view is None or not self.n_rows:
            return None
        return self.count_rows() - 1

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        self._titles()

    def _titles(self) -> None:
        v = self.view
        if v is None:
            return
        n = self.n_rows
        a, b = v.new_cells
        self.border_title = f"causal mask · {n}×{n} · query ↓ key → · lit = last llama_decode"
        how = (
            "1 cell = 1 key × 2 queries"
            if self.factor == 1
            else f"down-sampled: 1 cell = {self.factor} keys × {2 * self.factor} queries"
        )
        rows = self.count_rows()
        if rows > self.size.height > 0:
            top = int(self.scroll_offset.y)
            how += f" · scrolls: lines {top + 1}–{min(rows, top + self.size.height)}/{rows}"
        if b > a:
            what = f"row {a}" if b - a == 1 else f"rows {a}–{b - 1}"
            how += f" · lit: {what}"
        self.border_subtitle = how

    def _pixel(self, block_row: int, block_col: int) -> str:
        """State of the f×f block of (queries, keys) at this block position."""
        f, n = self.factor, self.n_rows
        q0, q1 = block_row * f, min(block_row * f + f, n) - 1
        if q0 >= n:
            return "none"
        k0, k1 = block_col * f, min(block_col * f + f, n) - 1
        if k1 <= q0:
            state = "visible"
        elif k0 > q1:
            state = "masked"
        else:
            state = "partial"
        a, b = self.view.new_cells if self.view else (0, 0)
        if q0 < b and a <= q1:
            state += "_lit"
        return state

    def build_row(self, row: int, width: int) -> list[Segment]:
        v = self.view
        assert v is not None
        f, n = self.factor, self.n_rows
        top, bottom = 2 * row, 2 * row + 1
        a, b = v.new_cells
        q0 = top * f
        q_last = min((bottom + 1) * f, n) - 1
        lit = q0 < b and a <= q_last
        segs = [Segment(f"{q0:>{LABEL_W - 1}} ", LABEL_LIT if lit else LABEL)]
        run: list[str] = []
        run_style: Style | None = None
        for c in range(self._blocks()):
            up, down = COLORS[self._pixel(top, c)], COLORS[self._pixel(bottom, c)]
            style = _STYLES.get((up, down)) or _STYLES.setdefault(
                (up, down), Style(color=up, bgcolor=down)
            )
            ch = "▀" if up is not None else " "
            if style is not run_style and run:
                segs.append(Segment("".join(run), run_style))
                run = []
            run_style = style
            run.append(ch)
        if run:
            segs.append(Segment("".join(run), run_style))
        return segs
