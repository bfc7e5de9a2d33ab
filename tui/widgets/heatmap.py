"""The attention heatmap's drawing pieces: colours, labels, cell sums and colour runs.

Pure functions of the weights (no widget state), used by
:class:`~tui.widgets.attention.AttentionPane`. A cell's colour is one of :data:`LEVELS`
steps of a dark-blue-to-pale ramp; a drawn row is a few runs of equal colour, so it costs a
segment per run, not one per key.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from rich.color import Color
from rich.segment import Segment
from rich.style import Style

from ..engine.model.tokens import display_bytes

LABEL_W = 13  # "1234 piece…  "
HEADER_H = 3  # key labels, written downwards
MASKED = Style(color="#3a3a3a", bgcolor="#141414")
NOT_CAPTURED = Style(color="grey42", italic=True)
LABEL = Style(color="grey62")
LABEL_CURSOR = Style(color="black", bgcolor="bright_yellow", bold=True)
RANK = Style(color="black", bold=True)
RANK_ON_DARK = Style(color="bright_white", bold=True)
DIM = Style(color="grey50")
# Dark blue -> teal -> yellow -> pale: weight 0 .. 1 (after scaling).
_STOPS = [(0.0, (16, 24, 40)), (0.25, (29, 78, 137)), (0.5, (42, 157, 143)),
          (0.75, (233, 196, 106)), (1.0, (255, 243, 176))]  # fmt: skip
LEVELS = 32

Runs = tuple[list[int], list[int]]  # (colour level per cell, cells where a new level starts)


def ramp(v: float) -> tuple[int, int, int]:
    """The colour of weight ``v`` (0..1) on the ramp."""
    v = min(max(v, 0.0), 1.0)
    for (a, ca), (b, cb) in zip(_STOPS, _STOPS[1:], strict=False):
        if v <= b:
            t = (v - a) / (b - a)
            r, g, bl = (round(x + (y - x) * t) for x, y in zip(ca, cb, strict=True))
            return r, g, bl
    return _STOPS[-1][1]


CELL_STYLES = [Style(bgcolor=Color.from_rgb(*ramp(i / (LEVELS - 1)))) for i in range(LEVELS)]


class Palette:
    """The pane's styles combined with its base style once, not once per segment."""

    def __init__(self, base: Style) -> None:
        self.base = base
        self.cells = [base + s for s in CELL_STYLES]
        self.label = base + LABEL
        self.label_cursor = base + LABEL_CURSOR
        self.not_captured = base + NOT_CAPTURED
        self.masked = base + MASKED


def label(piece: bytes, width: int) -> str:
    """A piece as a short label: visible whitespace, control bytes escaped, cut to width."""
    s = display_bytes(piece).replace("\n", "↵").replace("\t", "⇥").replace(" ", "␣")
    s = "".join(c if c.isprintable() else "?" for c in s)
    return s[:width]


def key_label(piece: bytes) -> str:
    """Column labels are only 3 rows tall: drop the leading space so the word shows."""
    s = display_bytes(piece)
    stripped = s.lstrip(" ")
    return label(stripped.encode() if stripped else piece, HEADER_H)


def header_line(
    y: int, n: int, cells: tuple[int, int], piece: Callable[[int], bytes]
) -> list[Segment]:
    """Line ``y`` of the key labels over ``n`` keys drawn as ``cells`` (cell width, keys per
    cell): the pieces written downwards, or key-index ticks when keys are aggregated."""
    cw, f = cells
    segs = [Segment(" " * LABEL_W)]
    if f == 1:
        chars = []
        for i in range(n):
            lab = key_label(piece(i))
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


def cell_layout(n: int, width: int) -> tuple[int, int]:
    """(cell width in characters, keys per cell) for ``n`` keys in a pane ``width`` wide.
    Keys per cell > 1 means aggregated: one cell sums several neighbouring keys."""
    n = max(n, 1)
    w = max(width - LABEL_W - 1, 1)
    for cw in (3, 2, 1):
        if n * cw <= w:
            return cw, 1
    return 1, math.ceil(n / w)


def cell_sums(w: np.ndarray, f: int) -> np.ndarray:
    """A row of weights summed over each run of ``f`` keys (one cell each)."""
    return np.add.reduceat(w, np.arange(0, len(w), f)) if f > 1 else w


def level_runs(sums: np.ndarray, rows: list[int], f: int, scale: str) -> list[Runs]:
    """For query rows ``rows`` with cell sums ``sums`` (rows, cells), float32: the colour
    level of each cell up to the row's last visible key, and where a new level starts. All the
    rows in one NumPy pass, not one each. ``scale`` is "row" (the row's largest visible cell
    is the top colour) or "abs" (weight 1 is)."""
    seen = (np.array(rows) + f) // f  # ceil((row + 1) / f)
    inside = np.arange(sums.shape[1])[None, :] < seen[:, None]
    if scale == "row":  # the row's largest visible cell is the top colour
        top = np.max(np.where(inside, np.nan_to_num(sums, nan=-np.inf), -np.inf), axis=1)
        top = top.astype(np.float64)
        top[~(top > 0)] = 1.0
    else:
        top = np.ones(len(rows))
    # Colour level per cell, in float64 as float(cell) / top gives it.
    v = np.nan_to_num(sums.astype(np.float64)) / top[:, None]
    levels = np.minimum((v * (LEVELS - 1) + 0.5).astype(np.int64), LEVELS - 1)
    change = (levels[:, 1:] != levels[:, :-1]) & inside[:, 1:]
    which, at = np.nonzero(change)
    split = np.searchsorted(which, np.arange(len(rows) + 1)).tolist()
    at_list = (at + 1).tolist()
    return [
        (levels[j, : seen[j]].tolist(), at_list[split[j] : split[j + 1]]) for j in range(len(rows))
    ]


def row_cells(
    runs: Runs,
    ranks: dict[int, int],
    cells: tuple[int, int],
    n_cells: int,
    pal: Palette,
) -> list[Segment]:
    """A row's cells as segments: one per run of equal colour, a ranked key (``ranks``: key ->
    rank, only when keys are not aggregated) as a cell of its own with its rank in it, and
    ``·`` for the cells in the query's future (masked)."""
    lv, cuts = runs
    cw, f = cells
    seen = len(lv)  # cells holding at least one visible key
    if ranks and f == 1:  # a ranked cell is a run of its own
        more = set(cuts)
        for k in ranks:
            if k < seen:
                more.update((k, k + 1))
        cuts = sorted(c for c in more if 0 < c < seen)
    bounds = [0, *cuts, seen]
    blank = " " * cw
    segs = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        level = lv[a]
        rank = ranks.get(a) if f == 1 and b == a + 1 else None
        if rank is not None:
            style = CELL_STYLES[level] + (RANK if level >= LEVELS // 2 else RANK_ON_DARK)
            segs.append(Segment(str(rank).center(cw), pal.base + style))
        else:
            segs.append(Segment(blank * (b - a), pal.cells[level]))
    if seen < n_cells:  # every key from here on is in the future of this query
        segs.append(Segment("·".center(cw) * (n_cells - seen), pal.masked))
    return segs
