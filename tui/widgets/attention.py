"""Attention pane: the model's own attention weights as a heatmap, and what one token looks at.

Rows are query tokens, columns key tokens; a cell's colour is the weight from llama.cpp's
``kq_soft_max`` node for the layer and head (or the mean over heads; see
:mod:`tui.engine.observe.attention_capture`). Future keys are ``·`` (the causal mask's exact 0).
Keys that do not fit the width are summed in groups, and the subtitle says so. A frame lays
out only the rows on screen (and the cursor's), kept in small LRU caches until the data, head
or size changes; the pieces are in :mod:`tui.widgets.heatmap` and
:mod:`tui.widgets.attention_text`. The app calls ``update_from(att, pieces, n_layer=...,
status=...)``; the pane posts ``LayerRequested(layer)`` and ``SelectionChanged(layer, head)``.
Keys: ↑/↓ (k/j), PgUp/PgDn, Home/End move the cursor; ←/→ head; m mean; [ / ] layer; s scale
(row max or absolute); a click selects a row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ..engine.observe.attention_map import ContextAttention, top_attended
from .attention_text import Ranked, footer_line, titles
from .heatmap import (
    HEADER_H,
    LABEL_W,
    NOT_CAPTURED,
    Palette,
    cell_layout,
    header_line,
    label,
    row_cells,
)
from .heatmap_rows import HeatmapRows
from .keys import pane_bindings
from .lru import LRU

TOP_K = 5
_CACHED_ROWS = 256  # rows (weights, cell sums, colour runs, drawn lines) kept between frames


class AttentionPane(ScrollView, can_focus=True):
    """Heatmap of one layer's attention over the context, with a ranked list for the cursor."""

    DEFAULT_CSS = """
    AttentionPane { height: 1fr; scrollbar-size-vertical: 1; overflow-x: hidden; }
    """

    BINDINGS = [Binding(k, a, d, show=False) for k, a, d in pane_bindings("attention")]

    class LayerRequested(Message):
        """The user asked for another layer; capture it and call ``update_from`` again."""

        def __init__(self, layer: int) -> None:
            super().__init__()
            self.layer = layer

    class SelectionChanged(Message):
        """Layer or head changed (head None = mean over heads)."""

        def __init__(self, layer: int, head: int | None) -> None:
            super().__init__()
            self.layer = layer
            self.head = head

    def __init__(
        self,
        *,
        layer: int = 0,
        head: int | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.att: ContextAttention | None = None
        self.pieces: list[bytes] = []
        self.n_layer = 0
        self.att_layer = layer
        self.head = head
        self.cursor = 0
        self.scale = "row"
        self.status = ""
        self._wanted_layer: int | None = None  # asked for, its capture not yet drawn
        self._follow = True  # the cursor stays on the newest token until moved by hand
        # Rows of the current (att, head) as drawn, and the body lines drawn from them (before
        # the pane's style): built for the rows drawn, reused by the next frames.
        self._drawn = HeatmapRows(_CACHED_ROWS)
        self._strips: LRU[Strip] = LRU(_CACHED_ROWS)  # (row, cursor?, scale, ...) -> line
        # ranked() for (cursor, k) on the current matrix: a frame asks for it once per line
        self._ranked: LRU[Ranked] = LRU(1)
        self._palette: LRU[Palette] = LRU(1)  # base style -> palette
        self._frame_size: Size | None = None  # set while Textual renders a frame
        self._frame_style: Style | None = None

    # -- the app's API ---------------------------------------------------------------------------
    def update_from(
        self,
        att: ContextAttention | None,
        pieces: Sequence[bytes],
        *,
        n_layer: int,
        status: str = "",
    ) -> None:
        # The worker sends the same object while nothing changed.
        same = att is self.att and list(pieces) == self.pieces
        head = self.head
        self.att = att
        self.pieces = list(pieces)
        self.n_layer = n_layer
        self.status = status
        if att is not None and (self._wanted_layer is None or att.layer == self._wanted_layer):
            # A layer asked for with [ or ] stays the one shown until its capture arrives, so
            # presses made meanwhile count on from it.
            self._wanted_layer = None
            self.att_layer = att.layer
            if self.head is not None and self.head >= att.n_head:
                self.head = None
        n = self.n_rows
        if self._follow or self.cursor >= n:
            self.cursor = max(n - 1, 0)
        self._recompute(clear=not (same and self.head == head))

    @property
    def n_rows(self) -> int:
        return len(self.att.positions) if self.att is not None else 0

    def row_weights(self, i: int) -> np.ndarray:
        """Query row ``i`` as drawn: the selected head's weights (or their mean) per key."""
        return self._drawn.weights(i)

    def ranked(self, k: int = TOP_K) -> Ranked:
        """(key index, piece, weight) the cursor token attends to most, highest first."""
        if not self.n_rows or not self.att or not self.att.captured[self.cursor]:
            return []
        got = self._ranked.get((self.cursor, k))
        if got is not None:
            return got
        row = self.row_weights(self.cursor)
        out = [
            (i, self._piece(i), w) for i, w in top_attended(row, k, upto=self.cursor + 1) if w > 0.0
        ]
        return self._ranked.put((self.cursor, k), out)

    def set_head(self, head: int | None) -> None:
        self.head = head
        self._recompute()
        self.post_message(self.SelectionChanged(self.att_layer, self.head))

    # -- actions ---------------------------------------------------------------------------------
    def action_cursor(self, delta: int) -> None:
        self.move_cursor(self.cursor + delta)

    def action_cursor_to(self, row: int) -> None:
        self.move_cursor(row if row >= 0 else self.n_rows - 1)

    def move_cursor(self, row: int) -> None:
        n = self.n_rows
        if not n:
            return
        self.cursor = min(max(row, 0), n - 1)
        self._follow = self.cursor == n - 1
        self._scroll_to_cursor()
        self._titles()
        self.refresh()

    def action_head(self, delta: int) -> None:
        if self.att is None:
            return
        order: list[int | None] = [None, *range(self.att.n_head)]
        i = order.index(self.head) if self.head in order else 0
        self.set_head(order[(i + delta) % len(order)])

    def action_mean(self) -> None:
        self.set_head(None)

    def action_layer(self, delta: int) -> None:
        if self.n_layer:
            layer = (self.att_layer + delta) % self.n_layer
            self.att_layer = self._wanted_layer = layer
            self._titles()
            self.refresh()
            self.post_message(self.LayerRequested(layer))
            self.post_message(self.SelectionChanged(layer, self.head))

    def action_scale(self) -> None:
        self.scale = "abs" if self.scale == "row" else "row"
        self._titles()
        self.refresh()

    def on_click(self, event: events.Click) -> None:
        row = self._row_at(event.y)
        if row is not None:
            self.move_cursor(row)

    # -- layout ----------------------------------------------------------------------------------
    # ``self.size`` walks the DOM each time: a frame reads it once (render_lines) and the
    # layout below is plain arithmetic on it.
    def _pane_size(self) -> Size:
        return self._frame_size or self.size

    @staticmethod
    def _footer_h_for(height: int) -> int:
        return TOP_K + 1 if height >= HEADER_H + TOP_K + 4 else 1

    @property
    def footer_h(self) -> int:
        return self._footer_h_for(self._pane_size().height)

    @property
    def body_h(self) -> int:
        h = self._pane_size().height
        return max(h - HEADER_H - self._footer_h_for(h), 0)

    @property
    def grid_w(self) -> int:
        return max(self._pane_size().width - LABEL_W - 1, 1)

    def _cells(self, width: int | None = None) -> tuple[int, int]:
        """(cell width in characters, keys per cell). Keys per cell > 1 means aggregated."""
        return cell_layout(self.n_rows, self._pane_size().width if width is None else width)

    def _recompute(self, clear: bool = True) -> None:
        drawn = self._drawn
        if clear or drawn.att is not self.att or drawn.head != self.head:
            drawn.reset(self.att, self.head)
            self._strips.clear()
            self._ranked.clear()
        self.virtual_size = Size(self.size.width, self.n_rows + HEADER_H + self.footer_h)
        self._titles()
        self.refresh()
        if self._follow:
            self.call_after_refresh(self._scroll_to_cursor)

    def on_resize(self) -> None:
        self._recompute()

    def _scroll_to_cursor(self) -> None:
        top, h = int(self.scroll_offset.y), self.body_h
        if h <= 0:
            return
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, immediate=True)
        elif self.cursor >= top + h:
            self.scroll_to(y=self.cursor - h + 1, animate=False, immediate=True)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        self._titles()

    def _row_at(self, y: int) -> int | None:
        if HEADER_H <= y < HEADER_H + self.body_h:
            row = int(self.scroll_offset.y) + y - HEADER_H
            return row if row < self.n_rows else None
        return None

    def _titles(self) -> None:
        status, layer = self.status, self.att_layer
        wanted = self._wanted_layer
        if wanted is not None and self.att is not None and self.att.layer != wanted:
            layer = self.att.layer  # the title names the layer drawn
            status = f"layer {wanted} asked for: capturing it, this is still layer {layer}"
        self.border_title, self.border_subtitle = titles(
            self.att,
            layer=layer,
            n_layer=self.n_layer,
            head=self.head,
            keys_per_cell=self._cells()[1] if self.att is not None else 1,
            scale=self.scale,
            rows=(int(self.scroll_offset.y), self.body_h),
            status=status,
        )

    # -- drawing ---------------------------------------------------------------------------------
    def _piece(self, i: int) -> bytes:
        if self.att is not None and i < len(self.pieces):
            return self.pieces[i]
        return b""

    def render_lines(self, crop: Region) -> list[Strip]:
        self._frame_size, self._frame_style = self.size, self.rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._frame_size = self._frame_style = None

    def render_line(self, y: int) -> Strip:
        size = self._pane_size()
        width, height = size.width, size.height
        footer_h = self._footer_h_for(height)
        body_h = max(height - HEADER_H - footer_h, 0)
        style = self._frame_style or self.rich_style
        if self.att is None:
            segs = (
                [Segment(self.status or "no attention captured yet", NOT_CAPTURED)]
                if y == 0
                else []
            )
        elif y < HEADER_H:
            segs = header_line(y, self.n_rows, self._cells(width), self._piece)
        elif y < HEADER_H + body_h:
            row = int(self.scroll_offset.y) + y - HEADER_H
            if row < self.n_rows:
                cells = self._cells(width)
                key = (row, row == self.cursor, self.scale, width, cells, style)
                strip = self._strips.get(key)
                if strip is None:
                    segs = self._row_line(row, cells, style)
                    strip = Strip(segs).crop(0, width).extend_cell_length(width, style)
                    self._strips.put(key, strip)
                return strip
            segs = []
        else:
            segs = self._footer_line(y - HEADER_H - body_h, footer_h)
        strip = Strip(segs).crop(0, width).extend_cell_length(width)
        return strip.apply_style(style)

    def _row_line(self, row: int, cells: tuple[int, int], base: Style) -> list[Segment]:
        """One body line, its styles already combined with the pane's ``base`` style (what
        ``Strip.apply_style(base)`` would do, without a second pass over the segments)."""
        assert self.att is not None
        pal = self._palette.get(base) or self._palette.put(base, Palette(base))
        pos = self.att.positions[row]
        lab = f"{pos:>4} {label(self._piece(row), LABEL_W - 6):<{LABEL_W - 6}} "
        is_cursor = row == self.cursor
        segs = [Segment(lab, pal.label_cursor if is_cursor else pal.label)]
        if not self.att.captured[row]:
            text = " not captured (attention was off for this token)"
            segs.append(Segment(text, pal.not_captured))
            return segs
        f = cells[1]
        n_cells = math.ceil(self.n_rows / f)
        ranks = {i: r for r, (i, _, _) in enumerate(self.ranked(TOP_K), 1)} if is_cursor else {}
        top = int(self.scroll_offset.y)
        on_screen = range(top, min(top + self.body_h, self.n_rows))
        runs = self._drawn.runs(row, f, self.scale, on_screen)
        return segs + row_cells(runs, ranks, cells, n_cells, pal)

    def _footer_line(self, i: int, footer_h: int) -> list[Segment]:
        if self.att is None or not self.n_rows:
            return []
        c = self.cursor
        return footer_line(i, footer_h, self.att, c, self._piece(c), self.ranked(TOP_K))
