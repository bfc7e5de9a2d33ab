"""Tab 5 (key 5), causal mask: which KV cells each token may attend to.

One row per token (a query), one column per KV cell (a key), in cache order. A row sees a cell
when the cell belongs to the row's sequence and its position is not after the row's: the lower
triangle for one sequence. After a fork the mask is per sequence, as llama.cpp builds it for a
batch: a token of seq 1 sees the shared prefix and its own cells, never seq 0's newer ones, so
the part after the fork becomes a checkerboard of the two sequences (rows coloured by sequence).

Each character cell holds two query rows (upper and lower half block), so the triangle keeps its
shape on a terminal. The rows the last ``llama_decode`` computed are lit: a block for a prefill,
one row per sequence for a decode step. When the context is wider than the pane, the mask is
down-sampled (one cell stands for f keys by f queries) and the title says so; when it is taller,
it scrolls."""

from __future__ import annotations

import numpy as np
from rich.color import Color, blend_rgb
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from .common import SEQ_COLORS, LinePane

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
MASKED, PARTIAL, VISIBLE, NONE = 0, 1, 2, 3  # pixel state codes
_NAMES = ("masked", "partial", "visible")
SHARED = -1  # row class of tokens several sequences see (the prefix before a fork)
MIXED = -2  # a down-sampled block of rows from different classes


def _seq_color(seq: int, partial: bool) -> Color:
    rgb = Color.parse(SEQ_COLORS[seq % len(SEQ_COLORS)]).get_truecolor()
    if partial:
        rgb = blend_rgb(rgb, Color.parse("#2e2e2e").get_truecolor(), 0.5)
    return Color.from_triplet(rgb)


_ROW_COLORS: dict[tuple[int, str], Color | None] = {}


def row_color(cls: int, state: str) -> Color | None:
    """The colour of a pixel: lit and masked states as in the one-sequence mask; a visible
    pixel in the colour of the row's sequence (shared-prefix rows keep the plain green)."""
    got = _ROW_COLORS.get((cls, state), False)
    if got is not False:
        return got  # type: ignore[return-value]
    if state in ("none", "masked") or state.endswith("_lit") or cls < 0:
        color = COLORS[state]
    else:
        color = _seq_color(cls, state == "partial")
    _ROW_COLORS[(cls, state)] = color
    return color


_STYLES: dict[tuple[Color | None, Color | None], Style] = {}  # (upper, lower) -> Style, made once


def _style(up: Color | None, down: Color | None) -> Style:
    return _STYLES.get((up, down)) or _STYLES.setdefault((up, down), Style(color=up, bgcolor=down))


def seq_mask_blocks(
    pos: np.ndarray, bits: np.ndarray, row_starts: np.ndarray, col_starts: np.ndarray
) -> np.ndarray:
    """The per-sequence causal mask of ``n`` cells, gathered into blocks.

    Cell i holds position ``pos[i]`` and the sequences of bitmask ``bits[i]``; row r (cell r as
    a query) sees cell c when ``bits[r] & bits[c]`` and ``pos[c] <= pos[r]``. Blocks of rows
    and of columns start at ``row_starts`` / ``col_starts``. Returns each block's state:
    MASKED (no pair visible), VISIBLE (all) or PARTIAL (some).

    Cost O(n · blocks · log), never the n×n matrix: for each column block and each row class,
    a sorted list of the block's visible positions answers every row by bisection."""
    n = len(pos)
    col_ends = np.append(col_starts[1:], n)
    seen = np.zeros((n, len(col_starts)), dtype=np.int32)  # visible cells of block k for row r
    sizes = col_ends - col_starts
    one = np.flatnonzero(sizes == 1)  # one-cell columns: the mask itself, in one NumPy step
    c = col_starts[one]
    seen[:, one] = ((bits[:, None] & bits[c][None, :]) != 0) & (pos[c][None, :] <= pos[:, None])
    classes = {int(m): np.flatnonzero(bits == m) for m in np.unique(bits)}
    for k in np.flatnonzero(sizes > 1).tolist():
        k0, k1 = int(col_starts[k]), int(col_ends[k])
        kp, kb = pos[k0:k1], bits[k0:k1]
        for m, rows in classes.items():
            sp = np.sort(kp[(kb & m) != 0])
            if sp.size:
                seen[rows, k] = np.searchsorted(sp, pos[rows], side="right")
    if len(row_starts) == n:  # one row a block
        lo = hi = seen
    else:
        lo = np.minimum.reduceat(seen, row_starts, axis=0)
        hi = np.maximum.reduceat(seen, row_starts, axis=0)
    state = np.full(lo.shape, PARTIAL, dtype=np.int8)
    state[hi == 0] = MASKED
    state[lo == sizes[None, :]] = VISIBLE
    return state


def seq_mask_grid(pos: np.ndarray, bits: np.ndarray, f: int) -> np.ndarray:
    """The per-sequence mask down-sampled by ``f`` both ways (f keys by f queries a block)."""
    starts = np.arange(0, len(pos), f)
    return seq_mask_blocks(pos, bits, starts, starts)


def _class_of(lo: int, hi: int) -> int:
    if lo != hi:
        return MIXED
    if lo & (lo - 1):
        return SHARED
    return lo.bit_length() - 1


class CausalMaskPane(LinePane):
    NEEDS = "kv_cells"

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.factor = 1
        # After a fork: the state of every down-sampled block, and each block row's class.
        self.grid: np.ndarray | None = None
        self.row_class: list[int] = []
        self._k0 = self._k1 = np.zeros(0, dtype=np.int64)  # each column block's first/last key
        self.n_cols = 0  # pixel columns
        self.older = 0  # after a fork, when wider than the pane: cells in the first column

    @property
    def per_seq(self) -> bool:
        """Several sequences hold cells: the mask must be computed per sequence."""
        return bool(self.view and self.view.text.seqs)

    @property
    def n_rows(self) -> int:
        """Query rows in the mask: one per token in the context (per cell after a fork)."""
        if self.view is None:
            return 0
        return self.view.kv.kv_used if self.per_seq else self.view.text.n_past

    def relayout(self) -> None:
        n = self.n_rows
        avail = max(self.size.width - LABEL_W - 1, 4)
        self.factor = max(1, -(-n // avail))
        self.grid, self.row_class, self.older = None, [], 0
        k0 = np.arange(0, n, self.factor)
        self._k0, self._k1 = k0, np.minimum(k0 + self.factor, n) - 1
        self.n_cols = len(k0)
        if self.per_seq and n and self.view is not None and self.missing() is None:
            # One pixel per (query, key): down-sampling would blend the sequences' alternating
            # cells into one grey. When the cells are more than the pane is wide, the newest
            # keep a column each and the first column stands for all the older ones.
            self.factor = 1
            self.older = n - avail + 1 if n > avail else 0
            cols = np.concatenate(([0], np.arange(self.older, n))) if self.older else np.arange(n)
            self.n_cols = len(cols)
            cells = self.view.kv.kv_cells
            pos = np.fromiter((c[1] for c in cells), dtype=np.int64, count=n)
            bits = np.fromiter((sum(1 << s for s in c[2]) for c in cells), dtype=np.int64, count=n)
            self.grid = seq_mask_blocks(pos, bits, np.arange(n), cols)
            self.row_class = [_class_of(b, b) for b in bits.tolist()]
        super().relayout()
        self._titles()

    def _blocks(self) -> int:
        """Blocks of query rows (one per row when not down-sampled)."""
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
        a, b = v.batch.new_cells
        if self.per_seq:
            seqs = " ".join(
                f"[{SEQ_COLORS[sv.seq_id % len(SEQ_COLORS)]}]■[/] seq {sv.seq_id}" for sv in v.text.seqs
            )
            self.border_title = (
                f"causal mask per sequence · {n}×{n} · query ↓ key (KV cell) → · rows: {seqs}"
                " · unmarked: shared prefix"
            )
        else:
            self.border_title = f"causal mask · {n}×{n} · query ↓ key → · lit = last llama_decode"
        how = (
            "1 cell = 1 key × 2 queries"
            if self.factor == 1
            else f"down-sampled: 1 cell = {self.factor} keys × {2 * self.factor} queries"
        )
        if self.per_seq:
            how = "a row sees its own sequence's cells only · " + how
            if self.older:
                how += f" · first column: the {self.older:,} oldest cells"
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
        if self.grid is not None:
            state = _NAMES[self.grid[block_row, block_col]]
        else:
            k0, k1 = block_col * f, min(block_col * f + f, n) - 1
            if k1 <= q0:
                state = "visible"
            elif k0 > q1:
                state = "masked"
            else:
                state = "partial"
        a, b = self.view.batch.new_cells if self.view else (0, 0)
        if q0 < b and a <= q1:
            state += "_lit"
        return state

    def _class(self, block_row: int) -> int:
        return self.row_class[block_row] if block_row < len(self.row_class) else SHARED

    def _marker(self, block_row: int) -> Color | None:
        """The legend colour of a row: its sequence's; none for the shared prefix."""
        cls = self._class(block_row) if block_row < self._blocks() else SHARED
        return None if cls < 0 else row_color(cls, "visible")

    def _label(self, row: int, q0: int, lit: bool) -> list[Segment]:
        if not self.per_seq:
            return [Segment(f"{q0:>{LABEL_W - 1}} ", LABEL_LIT if lit else LABEL)]
        # The legend: a half-block per query row, in the colour of the row's sequence.
        top, bottom = 2 * row, 2 * row + 1
        up, down = self._marker(top), self._marker(bottom)
        return [
            Segment(f"{q0:>{LABEL_W - 2}}", LABEL_LIT if lit else LABEL),
            Segment("▀", _style(up, down)),
            Segment(" "),
        ]

    def _states(self, block_row: int) -> np.ndarray:
        """The state code of every pixel of one block row (NONE past the last query)."""
        f, n = self.factor, self.n_rows
        q0 = block_row * f
        if q0 >= n:
            return np.full(self.n_cols, NONE, dtype=np.int8)
        if self.grid is not None:
            return self.grid[block_row]
        q1 = min(q0 + f, n) - 1
        return np.where(self._k1 <= q0, VISIBLE, np.where(self._k0 > q1, MASKED, PARTIAL))

    def _color(self, code: int, cls: int, lit: bool) -> Color | None:
        if code == NONE:
            return None
        state = _NAMES[code] + ("_lit" if lit else "")
        return COLORS[state] if self.grid is None else row_color(cls, state)

    def _lit(self, block_row: int) -> bool:
        a, b = self.view.batch.new_cells if self.view else (0, 0)
        q0 = block_row * self.factor
        q1 = min(q0 + self.factor, self.n_rows) - 1
        return q0 < b and a <= q1

    def render_line(self, y: int) -> Strip:
        """After a fork a line alternates between the sequences' colours: ~one Segment per
        cell. Its styles then come already combined with the pane's (a few per line), so the
        strip needs no per-Segment ``apply_style`` pass."""
        if self.grid is None:
            return super().render_line(y)
        width = self.size.width
        row = y + int(self.scroll_offset.y)
        base = self.rich_style
        if self.view is None or row >= self.count_rows():
            return Strip.blank(width, base)
        segs = self.build_row(row, width, base)
        used = sum(len(seg.text) for seg in segs[:3]) + self.n_cols  # one cell a character
        if used < width:
            segs.append(Segment(" " * (width - used), base))
        strip = Strip(segs, max(used, width))
        return strip.crop(0, width) if used > width else strip

    def build_row(self, row: int, width: int, base: Style | None = None) -> list[Segment]:
        """One line: two block rows. Their pixels change state only near the diagonal (and,
        after a fork, where the sequences alternate), so the line is a few runs, found with
        NumPy; each run is one Segment. ``base``: the pane's style, folded into each."""
        v = self.view
        assert v is not None
        f, n = self.factor, self.n_rows
        top, bottom = 2 * row, 2 * row + 1
        a, b = v.batch.new_cells
        q0 = top * f
        q_last = min((bottom + 1) * f, n) - 1
        segs = self._label(row, q0, q0 < b and a <= q_last)
        if base is not None:
            segs = [Segment(seg.text, base + seg.style if seg.style else base) for seg in segs]
        up_s, down_s = self._states(top), self._states(bottom)
        if not len(up_s):
            return segs
        key = up_s.astype(np.int16) * 4 + down_s
        starts = np.concatenate(([0], np.flatnonzero(key[1:] != key[:-1]) + 1))
        lengths = np.diff(np.append(starts, len(key))).tolist()
        keys = key[starts].tolist()
        up_cls, down_cls = self._class(top), self._class(bottom)
        up_lit, down_lit = self._lit(top), self._lit(bottom)
        looks: dict[int, tuple[str, Style]] = {}  # a few distinct pixels a line, styled once
        for k in set(keys):
            up = self._color(k // 4, up_cls, up_lit)
            down = self._color(k % 4, down_cls, down_lit)
            st = _style(up, down)
            looks[k] = ("▀" if up is not None else " ", base + st if base is not None else st)
        segs += [Segment(looks[k][0] * n, looks[k][1]) for k, n in zip(keys, lengths, strict=True)]
        return segs
