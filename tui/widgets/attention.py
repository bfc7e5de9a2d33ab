"""Attention pane: the model's own attention weights as a heatmap, and what one token looks at.

Rows are query tokens of the context (top to bottom, oldest first), columns are key tokens
(left to right), each labelled with its piece. A cell's colour is the weight the query gave to
that key in the selected layer and head (or the mean over heads), taken from the
``kq_soft_max`` node of llama.cpp's graph (see :mod:`tui.engine.attention_capture`). Future keys are
drawn as ``·``: the causal mask left exactly 0 there.

The cursor selects a query token; the footer ranks the keys it attends to most, with their
weights. Rows scroll; when the keys do not fit the width they are aggregated (one cell sums
the weight of several neighbouring keys) and the subtitle says so.

A frame costs what it draws: only the rows on screen (and the cursor's) are laid out over the
keys (``ContextAttention.row``), and those rows, their cell sums and their lines are kept until
the data, the head or the size changes.

API for the app (the pane never touches the engine):

- ``update_from(att, pieces, n_layer=..., status=...)``: ``att`` is a
  :class:`~tui.engine.attention_map.ContextAttention` (``context_attention(engine, layer)``, built
  on the decode thread) or None; ``pieces`` are the context's token pieces (bytes), one per
  row/column; ``status`` is an optional note (e.g. "attention off: press A").
- ``att_layer``, ``head`` (None = mean over heads), ``cursor`` (query row), ``scale`` ("row" or "abs"):
  plain attributes, also changed by the key bindings below. ``ranked(k)`` returns what the
  cursor token attends to most.
- Messages: ``AttentionPane.LayerRequested(layer)`` when the user asks for another layer
  (the app must capture it and call ``update_from`` again); ``AttentionPane.SelectionChanged
  (layer, head)`` whenever layer or head change (for the saved session).
- Keys when focused: ↑/↓ (k/j), PgUp/PgDn, Home/End move the cursor; ←/→ head (through
  "mean"); m mean; [ / ] layer; s colour scale (row max / absolute). Clicking a row selects it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.color import Color
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ..engine.attention_map import ContextAttention, top_attended
from ..engine.tokens import display_bytes

LABEL_W = 13  # "1234 piece…  "
HEADER_H = 3  # key labels, written downwards
TOP_K = 5
MASKED = Style(color="#3a3a3a", bgcolor="#141414")
NOT_CAPTURED = Style(color="grey42", italic=True)
LABEL = Style(color="grey62")
LABEL_CURSOR = Style(color="black", bgcolor="bright_yellow", bold=True)
RANK = Style(color="black", bold=True)
RANK_ON_DARK = Style(color="bright_white", bold=True)
TITLE = Style(color="bright_white", bold=True)
DIM = Style(color="grey50")
BAR = Style(color="#e9c46a")
# Dark blue -> teal -> yellow -> pale: weight 0 .. 1 (after scaling).
_STOPS = [(0.0, (16, 24, 40)), (0.25, (29, 78, 137)), (0.5, (42, 157, 143)),
          (0.75, (233, 196, 106)), (1.0, (255, 243, 176))]  # fmt: skip
_LEVELS = 32
_CACHED_ROWS = 256  # rows (weights, cell sums, drawn lines) kept between frames


def _ramp(v: float) -> tuple[int, int, int]:
    v = min(max(v, 0.0), 1.0)
    for (a, ca), (b, cb) in zip(_STOPS, _STOPS[1:], strict=False):
        if v <= b:
            t = (v - a) / (b - a)
            r, g, bl = (round(x + (y - x) * t) for x, y in zip(ca, cb, strict=True))
            return r, g, bl
    return _STOPS[-1][1]


_CELL_STYLES = [Style(bgcolor=Color.from_rgb(*_ramp(i / (_LEVELS - 1)))) for i in range(_LEVELS)]


class _Palette:
    """The pane's styles combined with its base style once, not once per segment."""

    def __init__(self, base: Style) -> None:
        self.base = base
        self.cells = [base + s for s in _CELL_STYLES]
        self.label = base + LABEL
        self.label_cursor = base + LABEL_CURSOR
        self.not_captured = base + NOT_CAPTURED
        self.masked = base + MASKED


def _label(piece: bytes, width: int) -> str:
    """A piece as a short label: visible whitespace, control bytes escaped, cut to width."""
    s = display_bytes(piece).replace("\n", "↵").replace("\t", "⇥").replace(" ", "␣")
    s = "".join(c if c.isprintable() else "?" for c in s)
    return s[:width]


def _key_label(piece: bytes) -> str:
    """Column labels are only 3 rows tall: drop the leading space so the word shows."""
    s = display_bytes(piece)
    stripped = s.lstrip(" ")
    return _label(stripped.encode() if stripped else piece, HEADER_H)


class AttentionPane(ScrollView, can_focus=True):
    """Heatmap of one layer's attention over the context, with a ranked list for the cursor."""

    DEFAULT_CSS = """
    AttentionPane { height: 1fr; scrollbar-size-vertical: 1; overflow-x: hidden; }
    """

    BINDINGS = [
        Binding("up,k", "cursor(-1)", "query ↑", show=False),
        Binding("down,j", "cursor(1)", "query ↓", show=False),
        Binding("pageup", "cursor(-10)", show=False),
        Binding("pagedown", "cursor(10)", show=False),
        Binding("home", "cursor_to(0)", show=False),
        Binding("end", "cursor_to(-1)", show=False),
        Binding("left", "head(-1)", "head"),
        Binding("right", "head(1)", "head", show=False),
        Binding("m", "mean", "mean of heads"),
        Binding("left_square_bracket", "layer(-1)", "layer"),
        Binding("right_square_bracket", "layer(1)", "layer", show=False),
        Binding("s", "scale", "colour scale"),
    ]

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
        self._follow = True  # the cursor stays on the newest token until moved by hand
        # Rows of the current (att, head) laid out over the keys, and their cell sums for the
        # current aggregation: built for the rows drawn, reused by the next frames.
        self._rows: dict[int, np.ndarray] = {}
        self._sums: dict[tuple[int, int], np.ndarray] = {}
        self._strips: dict[tuple[Any, ...], Strip] = {}  # body lines before the pane's style
        self._run_cache: dict[tuple[int, int, str], tuple[list[int], list[int]]] = {}
        self._frame_size: Size | None = None  # set while Textual renders a frame
        self._frame_style: Style | None = None
        self._palette: _Palette | None = None
        # ranked() for (cursor, k) on the current matrix: a frame asks for it once per line
        self._ranked: tuple[tuple[int, int], list[tuple[int, bytes, float]]] | None = None

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
        if att is not None:
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
        got = self._rows.get(i)
        if got is None:
            assert self.att is not None
            if len(self._rows) > _CACHED_ROWS:
                self._rows.clear()
            got = self._rows[i] = self.att.row(i, self.head)
        return got

    def ranked(self, k: int = TOP_K) -> list[tuple[int, bytes, float]]:
        """(key index, piece, weight) the cursor token attends to most, highest first."""
        if not self.n_rows or not self.att or not self.att.captured[self.cursor]:
            return []
        if self._ranked is not None and self._ranked[0] == (self.cursor, k):
            return self._ranked[1]
        row = self.row_weights(self.cursor)
        out = [
            (i, self._piece(i), w) for i, w in top_attended(row, k, upto=self.cursor + 1) if w > 0.0
        ]
        self._ranked = ((self.cursor, k), out)
        return out

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
        n = max(self.n_rows, 1)
        w = max((self._pane_size().width if width is None else width) - LABEL_W - 1, 1)
        for cw in (3, 2, 1):
            if n * cw <= w:
                return cw, 1
        return 1, math.ceil(n / w)

    def _recompute(self, clear: bool = True) -> None:
        if clear:
            self._rows.clear()
            self._sums.clear()
            self._strips.clear()
            self._run_cache.clear()
            self._ranked = None
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
        if self.att is None:
            self.border_title = f"attention · layer {self.att_layer}"
            self.border_subtitle = self.status
            return
        n, nh = self.n_rows, self.att.n_head
        head = f"head {self.head}/{nh}" if self.head is not None else f"mean of {nh} heads"
        self.border_title = (
            f"attention · layer {self.att_layer} of {self.n_layer} · {head} · {n}×{n} "
            "· query ↓ key →"
        )
        cw, f = self._cells()
        parts = [
            "keys 1:1" if f == 1 else f"keys aggregated: 1 cell = sum of {f} keys",
            "colour = weight / row max" if self.scale == "row" else "colour = weight (0–1)",
        ]
        top, h = int(self.scroll_offset.y), self.body_h
        if n > h > 0:
            parts.append(f"rows {top}–{min(n, top + h) - 1} of {n}, scrolls")
        if self.status:
            parts.append(self.status)
        self.border_subtitle = " · ".join(parts)

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
            segs = self._header_line(y, self._cells(width))
        elif y < HEADER_H + body_h:
            row = int(self.scroll_offset.y) + y - HEADER_H
            if row < self.n_rows:
                cells = self._cells(width)
                key = (row, row == self.cursor, self.scale, width, cells, style)
                strip = self._strips.get(key)
                if strip is None:
                    segs = self._row_line(row, cells, style)
                    strip = Strip(segs).crop(0, width).extend_cell_length(width, style)
                    if len(self._strips) > _CACHED_ROWS:
                        self._strips.clear()
                    self._strips[key] = strip
                return strip
            segs = []
        else:
            segs = self._footer_line(y - HEADER_H - body_h, footer_h)
        strip = Strip(segs).crop(0, width).extend_cell_length(width)
        return strip.apply_style(style)

    def _header_line(self, y: int, cells: tuple[int, int]) -> list[Segment]:
        cw, f = cells
        segs = [Segment(" " * LABEL_W)]
        n = self.n_rows
        if f == 1:
            chars = []
            for i in range(n):
                lab = _key_label(self._piece(i))
                chars.append((lab[y] if y < len(lab) else " ").ljust(cw))
            segs.append(Segment("".join(chars), LABEL))
        elif y == 0:  # aggregated: key index ticks every 10 cells
            ticks = [" "] * math.ceil(n / f)
            for c in range(0, len(ticks), 10):
                for j, ch in enumerate(str(c * f)):
                    if c + j < len(ticks):
                        ticks[c + j] = ch
            segs.append(Segment("".join(ticks), LABEL))
        elif y == 1:
            segs.append(Segment(f"↑ key index · {f} keys per cell", DIM))
        return segs

    def _row_line(self, row: int, cells: tuple[int, int], base: Style) -> list[Segment]:
        """One body line, its styles already combined with the pane's ``base`` style (what
        ``Strip.apply_style(base)`` would do, without a second pass over the segments)."""
        assert self.att is not None
        pal = self._palette_for(base)
        pos = self.att.positions[row]
        lab = f"{pos:>4} {_label(self._piece(row), LABEL_W - 6):<{LABEL_W - 6}} "
        is_cursor = row == self.cursor
        segs = [Segment(lab, pal.label_cursor if is_cursor else pal.label)]
        if not self.att.captured[row]:
            text = " not captured (attention was off for this token)"
            segs.append(Segment(text, pal.not_captured))
            return segs
        cw, f = cells
        n_cells = math.ceil(self.n_rows / f)
        ranks = {i: r for r, (i, _, _) in enumerate(self.ranked(TOP_K), 1)} if is_cursor else {}
        lv, cuts = self._runs(row, f)
        seen = len(lv)  # cells holding at least one visible key
        if ranks and f == 1:  # a ranked cell is a run of its own
            more = set(cuts)
            for k in ranks:
                if k < seen:
                    more.update((k, k + 1))
            cuts = sorted(c for c in more if 0 < c < seen)
        bounds = [0, *cuts, seen]
        blank = " " * cw
        for a, b in zip(bounds, bounds[1:], strict=False):
            level = lv[a]
            rank = ranks.get(a) if f == 1 and b == a + 1 else None
            if rank is not None:
                style = _CELL_STYLES[level] + (RANK if level >= _LEVELS // 2 else RANK_ON_DARK)
                segs.append(Segment(str(rank).center(cw), base + style))
            else:
                segs.append(Segment(blank * (b - a), pal.cells[level]))
        if seen < n_cells:  # every key from here on is in the future of this query
            segs.append(Segment("·".center(cw) * (n_cells - seen), pal.masked))
        return segs

    def _runs(self, row: int, f: int) -> tuple[list[int], list[int]]:
        """The colour level of each cell of ``row`` up to its last visible key, and where a
        new level starts: for all the rows on screen at once (one NumPy pass, not one each)."""
        key = (row, f, self.scale)
        got = self._run_cache.get(key)
        if got is not None:
            return got
        assert self.att is not None
        top_row, n = int(self.scroll_offset.y), self.n_rows
        rows = [row] + [
            r
            for r in range(top_row, min(top_row + self.body_h, n))
            if r != row and self.att.captured[r] and (r, f, self.scale) not in self._run_cache
        ]
        sums = np.stack([self._cell_sums(r, f) for r in rows])  # (rows, cells), float32
        seen = (np.array(rows) + f) // f  # ceil((row + 1) / f)
        inside = np.arange(sums.shape[1])[None, :] < seen[:, None]
        if self.scale == "row":  # the row's largest visible cell is the top colour
            top = np.max(np.where(inside, np.nan_to_num(sums, nan=-np.inf), -np.inf), axis=1)
            top = top.astype(np.float64)
            top[~(top > 0)] = 1.0
        else:
            top = np.ones(len(rows))
        # Colour level per cell, in float64 as float(cell) / top gives it.
        v = np.nan_to_num(sums.astype(np.float64)) / top[:, None]
        levels = np.minimum((v * (_LEVELS - 1) + 0.5).astype(np.int64), _LEVELS - 1)
        change = (levels[:, 1:] != levels[:, :-1]) & inside[:, 1:]
        which, at = np.nonzero(change)
        split = np.searchsorted(which, np.arange(len(rows) + 1)).tolist()
        at_list = (at + 1).tolist()
        if len(self._run_cache) > _CACHED_ROWS:
            self._run_cache.clear()
        for j, r in enumerate(rows):
            self._run_cache[(r, f, self.scale)] = (
                levels[j, : seen[j]].tolist(),
                at_list[split[j] : split[j + 1]],
            )
        return self._run_cache[key]

    def _palette_for(self, base: Style) -> _Palette:
        pal = self._palette
        if pal is None or pal.base != base:
            pal = self._palette = _Palette(base)
        return pal

    def _cell_sums(self, row: int, f: int) -> np.ndarray:
        """Row ``row`` summed over each run of ``f`` keys (one cell each), kept per frame."""
        got = self._sums.get((row, f))
        if got is None:
            w = self.row_weights(row)
            # A drawn row is a captured one: no NaN in it.
            got = np.add.reduceat(w, np.arange(0, len(w), f)) if f > 1 else w
            if len(self._sums) > _CACHED_ROWS:
                self._sums.clear()
            self._sums[(row, f)] = got
        return got

    def _footer_line(self, i: int, footer_h: int) -> list[Segment]:
        if self.att is None or not self.n_rows:
            return []
        c = self.cursor
        piece = _label(self._piece(c), 16)
        if i == 0:
            if not self.att.captured[c]:
                return [Segment(f"▶ {piece!r} (pos {self.att.positions[c]}): not captured", DIM)]
            ranked = self.ranked(TOP_K)
            head = [
                Segment(f"▶ {piece} ", TITLE),
                Segment(f"(pos {self.att.positions[c]}) → ", DIM),
            ]
            if footer_h == 1:  # no room for a list: one line
                items = "  ".join(f"{_label(p, 10)} {w:.3f}" for _, p, w in ranked)
                return [*head, Segment(items, LABEL)]
            return [*head, Segment("attends most to:", DIM)]
        ranked = self.ranked(TOP_K)
        if i - 1 >= len(ranked):
            return []
        k, p, w = ranked[i - 1]
        bar = "█" * max(1, round(w * 20))
        return [
            Segment(f"  {i}. {_label(p, 12):<12} ", LABEL),
            Segment(f"{w:6.3f} ", TITLE),
            Segment(f"pos {self.att.positions[k]:<5} ", DIM),
            Segment(bar, BAR),
        ]
