"""Tab 4 (key 4), KV cache: one character per cell of the context (``n_ctx`` of them), in use or
free.

Used cells are coloured by the sequence they belong to; the cells the last ``llama_decode``
wrote are lit, so a prefill lights a block and a decode step one cell. After a context shift,
lines above the grid say what each shift forgot, and the seam is marked in the grid: the cell
right after the ``n_keep`` kept ones, where the forgotten tokens stood. Sizes come from the
engine: bytes per token from the model's layer shapes and the cache types, checked against
the size llama.cpp logged when it allocated the cache. Right after a draft-verify round
(``--spec-type``) the cells the verify wrote for the rejected rows, which
``llama_memory_seq_rm`` removed again, are marked ✕ after the kept ones, with a legend line."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual import events

from ..engine.model.tokens import display_bytes, escape_controls
from .common import GAP, SEQ_COLORS, LinePane, fmt_bytes

FREE = Style(color="grey30")
NEW = Style(color="bright_yellow", bold=True)
NEWEST = Style(color="bright_white", bold=True)
LABEL = Style(color="grey50")
LABEL_W = 6
GAP_TEXT = Style(color="grey50", strike=True)
CUT = Style(color="red", bold=True)  # written by a verify, then cut (llama_memory_seq_rm)
SHIFT_LINES = 3  # the newest shifts listed above the grid (a summary line counts them all)


_SEQ_STYLES: dict[int | None, Style] = {}


def _seq_style(seq: int | None) -> Style:
    """The colour of a sequence's cells (red for a cell no sequence owns), made once."""
    style = _SEQ_STYLES.get(seq)
    if style is None:
        style = Style(color=SEQ_COLORS[seq % len(SEQ_COLORS)] if seq is not None else "red")
        _SEQ_STYLES[seq] = style
    return style


def _seam_style(seq: int | None) -> Style:
    """A cell right after a shift's gap: its sequence's colour on the gap's orange."""
    key = -100 - (seq if seq is not None else 99)
    style = _SEQ_STYLES.get(key)
    if style is None:
        style = _seq_style(seq) + Style(bgcolor="orange1")
        _SEQ_STYLES[key] = style
    return style


class KVCachePane(LinePane):
    NEEDS = "kv_cells"

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.cols = 64

    @property
    def used(self) -> int:
        return self.view.kv.kv_used if self.view else 0

    @property
    def cut(self) -> tuple[int, int]:
        """[start, end) of the cells the last verify wrote and then cut (empty: none)."""
        return self.view.batch.cut_cells if self.view is not None else (0, 0)

    @property
    def shift_rows(self) -> int:
        """Legend lines for the shifts: a summary, then the newest few, one a line."""
        if self.view is None or not self.view.cache.shifts:
            return 0
        return 1 + min(len(self.view.cache.shifts), SHIFT_LINES)

    @property
    def legend_rows(self) -> int:
        """Lines above the grid: the shifts', then one for a verify's cut cells."""
        a, b = self.cut
        return self.shift_rows + (b > a)

    @property
    def seam(self) -> int | None:
        """The position right after the kept tokens: every shift cut there, so the cell that
        now holds it is where the forgotten tokens stood."""
        v = self.view
        return v.cache.shifts[-1].n_keep if v is not None and v.cache.shifts else None

    def relayout(self) -> None:
        width = max(self.size.width - LABEL_W - 1, 8)
        self.cols = max(8, width // 8 * 8)
        super().relayout()
        self._titles()

    def count_rows(self) -> int:
        if self.view is None:
            return 0
        return self.legend_rows + -(-self.view.text.n_ctx // self.cols)

    def follow_row(self) -> int | None:
        if self.view is None:
            return None
        return self.legend_rows + max(self.view.kv.kv_used - 1, 0) // self.cols

    def legend_row(self, row: int) -> list[Segment]:
        """What the shifts forgot: the total, then per shift the count and the text."""
        v = self.view
        assert v is not None
        if row == self.shift_rows:
            return self.cut_legend()
        shifts = v.cache.shifts
        if row == 0:
            total = sum(len(ev.forgotten) for ev in shifts)
            return [
                Segment("✂", GAP),
                Segment(
                    f" {total:,} tokens forgotten · {len(shifts)} shift"
                    f"{'s' if len(shifts) > 1 else ''} · ",
                    LABEL,
                ),
                Segment("▐", GAP),
                Segment(f" seam after the {self.seam} kept", LABEL),
            ]
        i = len(shifts) - min(len(shifts), SHIFT_LINES) + row - 1
        ev = shifts[i]
        pieces = v.cache.shift_pieces[i] if i < len(v.cache.shift_pieces) else ()
        text = escape_controls(display_bytes(b"".join(pieces))).replace("\n", "↵")
        others = "".join(
            f", seq {s}: {len(gone)}" for s, gone in sorted(ev.by_seq.items()) if s != 0
        )
        return [
            Segment(f"shift {ev.index + 1}", Style(color="yellow", bold=True)),
            Segment(f": forgot {len(ev.forgotten):,}{others} after cell {ev.n_keep} ", LABEL),
            Segment(text, GAP_TEXT),
        ]

    def cut_legend(self) -> list[Segment]:
        """The last round: the cells its verify wrote, the kept ones lit, the rejected cut."""
        v = self.view
        assert v is not None
        (a, b), (c, d) = v.batch.new_cells, self.cut
        return [
            Segment("█", NEW),
            Segment(f" verify wrote {b - a + d - c} cells: {b - a} kept · ", LABEL),
            Segment("✕", CUT),
            Segment(f" {d - c} rejected, cut by llama_memory_seq_rm", LABEL),
        ]

    def _titles(self) -> None:
        v = self.view
        if v is None:
            return
        if self.missing() is not None:  # no cells to count (the model runs on a server)
            self.border_title, self.border_subtitle = "KV cache", ""
            return
        self.border_title = (
            f"KV cache · {v.kv.kv_used:,}/{v.text.n_ctx:,} cells · {fmt_bytes(v.kv.kv_bytes)} of "
            f"{fmt_bytes(v.kv.kv_bytes_allocated)}"
        )
        # Most important first: a narrow pane cuts the end of the line.
        parts = []
        if v.kv.kv_problems:
            parts.append("MISMATCH: " + "; ".join(v.kv.kv_problems))
        rows = self.count_rows()
        if rows > self.size.height > 0:
            top = int(self.scroll_offset.y)
            parts.append(f"rows {top + 1}–{min(rows, top + self.size.height)}/{rows} ↕")
        parts.append(f"{v.kv.kv_bytes_per_token:,} B/token")
        if v.kv.kv_report is not None:
            r = v.kv.kv_report
            parts.append(f"llama.cpp logged {r.size_mib:.2f} MiB (K {r.type_k}, V {r.type_v})")
        sub = " · ".join(parts)
        self.border_subtitle = sub

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        self._titles()

    def build_row(self, row: int, width: int) -> list[Segment]:
        v = self.view
        assert v is not None
        if row < self.legend_rows:
            return self.legend_row(row)
        row -= self.legend_rows
        seam = self.seam
        start = row * self.cols
        segs = [Segment(f"{start:>{LABEL_W - 1}} ", LABEL)]
        a, b = v.batch.new_cells
        cut_a, cut_b = self.cut
        cells = v.kv.kv_cells
        # Neighbouring cells of one style become one Segment: a row is a few runs, not 100+.
        run: list[str] = []
        run_style: Style | None = None
        for i in range(start, min(start + self.cols, v.text.n_ctx)):
            if i < len(cells):
                seqs = cells[i][2]
                if i == b - 1 and b > a:
                    style = NEWEST
                elif a <= i < b:
                    style = NEW
                else:
                    style = _seq_style(seqs[0] if seqs else None)
                ch = "█" if len(seqs) <= 1 else "▓"
                if cells[i][1] == seam:  # the first token after the forgotten ones
                    ch, style = "▐", _seam_style(seqs[0] if seqs else None)
            elif cut_a <= i < cut_b:
                style, ch = CUT, "✕"
            else:
                style, ch = FREE, "·"
            if style is not run_style and run:
                segs.append(Segment("".join(run), run_style))
                run = []
            run_style = style
            run.append(ch)
        if run:
            segs.append(Segment("".join(run), run_style))
        return segs

    def on_mouse_move(self, event: events.MouseMove) -> None:
        v = self.view
        if v is None or self.missing() is not None:
            return
        col = event.x - LABEL_W
        row = event.y + int(self.scroll_offset.y) - self.legend_rows
        if not 0 <= col < self.cols:
            self.tooltip = None
            return
        i = row * self.cols + col
        if i < len(v.kv.kv_cells):
            token, pos, seqs = v.kv.kv_cells[i]
            self.tooltip = f"cell {i}: token {token}, pos {pos}, seq {','.join(map(str, seqs))}"
            if pos == self.seam:
                self.tooltip += " · the forgotten tokens were just before this one"
        elif i < v.text.n_ctx:
            a, b = self.cut
            cut = " · the last verify wrote a rejected row here, then cut it" if a <= i < b else ""
            self.tooltip = f"cell {i}: free{cut}"
