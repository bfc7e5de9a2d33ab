"""The logits pane (left), logits and sampler: the top candidates for the next token, what each
sampler stage kept or cut, and which token the next step will pick (a preview on the same
logits, using a clone of the seeded RNG, so it is exactly the token the step takes).

Columns: p is the softmax of the raw logits over the whole vocabulary (temperature 1);
logit′ (shown when logit bias, penalties or DRY moved a logit) is the logit those stages handed
on, read off llama.cpp's own samplers: the value top-k, top-p and min-p cut by, so a row above
the ★ can be "cut by top-k" (--repeat-penalty 1.3 takes ' The' from 32.97 to 25.36); p′ is the
probability after the chain, the one the pick draws from."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.message import Message

from ..worker.views import CandidateRow, View
from .common import DIM, Pane, fmt_p, is_special, piece_text
from .logits_lines import chain_lines, did_lines, settings_lines
from .lru import LRU

CURSOR = Style(bgcolor="grey30")
MARKER = Style(color="bright_yellow", bold=True)
NEXT = Style(color="bright_green", bold=True)
CUT = Style(color="red")
BAR = Style(color="bright_green")
BAR_RAW = Style(color="grey42")
MOVED = Style(color="bright_yellow")  # a logit a stage moved


class LogitsPane(Pane):
    can_focus = True

    class Clicked(Message):
        """A candidate row was clicked: the app forces it, as ``f`` on the cursor does."""

        def __init__(self, row: int) -> None:
            super().__init__()
            self.row = row

    DEFAULT_CSS = """
    LogitsPane { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.cursor = 0
        # %: the two p columns show the distribution top-p saw (p|k, softmax over top-k's
        # survivors) and its running sum, so each top-p cut can be checked on screen.
        self.seen = False
        self._pieces: LRU[list[Segment]] = LRU(512)

    def toggle_seen(self) -> None:
        self.seen = not self.seen
        self._subtitle()
        self.refresh()

    def _p_cells(self, rows: tuple[CandidateRow, ...]) -> list[tuple[str, str]]:
        """The two p columns of each row: p and p′, or p|k and its running sum Σ."""
        if not self.seen:
            return [(fmt_p(c.p), fmt_p(c.p_final) if not c.cut_by else "–") for c in rows]
        out, total = [], 0.0
        for c in rows:
            if c.p_seen is None:
                out.append(("–", "–"))
                continue
            total += c.p_seen
            out.append((fmt_p(c.p_seen), fmt_p(total)))
        return out

    def show(self, view: View) -> None:
        old = self.view
        fresh = old is None or (old.text.n_past, old.header.n_records) != (
            view.text.n_past,
            view.header.n_records,
        )
        super().show(view)
        if fresh:
            self.cursor = 0  # new logits: back to the top candidate
        if view.logits.candidates:
            self.cursor = min(self.cursor, len(view.logits.candidates) - 1)
        seqs = [sv.seq_id for sv in view.text.seqs]
        self.border_title = (
            view.logits.spec_row  # a row of the last verify batch (--spec-type, < >)
            or (
                f"logits → sampler · seq 0's row (of seqs {', '.join(map(str, seqs))})"
                if view.text.fork_at is not None and len(seqs) > 1
                else "logits → sampler"
            )
        )
        self._subtitle()

    def _subtitle(self) -> None:
        view = self.view
        rv = view.logits.remote if view is not None else None
        if view is None or view.logits.entropy is None:
            self.border_subtitle = ""
        elif rv is not None:  # only the top K are known: the entropy is an upper bound
            self.border_subtitle = (
                f"entropy ≤ {view.logits.entropy:.2f} bits · {rv.top_of} · ★ next pick"
            )
        elif self.seen:
            self.border_subtitle = (
                f"p|k: what top-p saw (softmax of top-k's survivors) · top-p keeps rows until "
                f"Σ ≥ {view.settings.top_p:.2f} · % back"
            )
        else:
            self.border_subtitle = (
                f"entropy {view.logits.entropy:.2f} bits · ★ next pick · ▶ cursor · % p|k"
            )

    def on_click(self, event: events.Click) -> None:
        at = event.get_content_offset(self)
        if at is None or self.view is None:
            return
        # under the settings, the chain, what its stages did and the column titles
        row = at.y - len(self.info_lines(self.view, self.size.width or 50)) - 1
        if 0 <= row < len(self.view.logits.candidates):
            self.cursor = row
            self.refresh()
            self.post_message(self.Clicked(row))

    def move(self, delta: int) -> None:
        if self.view is None or not self.view.logits.candidates:
            return
        self.cursor = (self.cursor + delta) % len(self.view.logits.candidates)
        self.refresh()

    @property
    def highlighted(self) -> CandidateRow | None:
        if self.view is None or not self.view.logits.candidates:
            return None
        return self.view.logits.candidates[self.cursor]

    def info_lines(self, v: View, width: int) -> list[Text]:
        """The settings, the chain and what its stages did (each up to two lines)."""
        height = self.size.height or 20
        most = 2 if height >= 20 else 1  # a short pane keeps its rows
        return [
            *settings_lines(v, width, most),
            *chain_lines(v, width, _picked(v)),
            *did_lines(v, width, most + (height >= 30)),
        ]

    def _rows_room(self, v: View, n_info: int) -> int:
        """Candidate rows that fit under the info lines and the column titles, above the two
        pick lines (and the two lines of what crossed HTTP)."""
        return max((self.size.height or 20) - n_info - 3 - 2 * (v.logits.remote is not None), 3)

    def render(self) -> Text:
        v = self.view
        t = Text(no_wrap=True, overflow="ellipsis")
        if v is None:
            return t
        width = self.size.width or 50
        if not v.logits.candidates:
            for line in settings_lines(v, width):
                t.append_text(line)
                t.append("\n")
            hint = (
                "No logits yet. Send a message: its prefill ends in one score per "
                "vocabulary entry, and the top candidates appear here with what each "
                "sampler stage keeps or cuts."
            )
            t.append("\n")
            for words in textwrap.wrap(hint, max(width - 1, 20)):
                t.append(words + "\n", DIM)
            return t
        info = self.info_lines(v, width)
        for line in info:
            t.append_text(line)
            t.append("\n")
        cols = self._columns(width, v)
        t.append_text(self._head(width, v))
        t.append("\n")
        rows_room = self._rows_room(v, len(info))
        cells = self._p_cells(v.logits.candidates)
        for i in _shown(v, rows_room):
            c = v.logits.candidates[i]
            row = Text(no_wrap=True)
            is_next = c.id == v.logits.next_pick
            row.append("▶" if i == self.cursor else " ", MARKER)
            row.append("★" if is_next else " ", NEXT)
            pt = _piece_cell(c, cols.piece_w, is_next)
            row.append_text(pt)
            row.append(" " * (cols.piece_w - pt.cell_len))
            for text, style in _row_cells(c, cells[i], cols, is_next):
                row.append(text, style or Style())
            if i == self.cursor and self.has_focus:
                row.stylize(CURSOR)
            t.append_text(row)
            t.append("\n")
        t.append_text(self.pick_lines(v))
        return t

    def render_rows(self, width: int) -> list[list[Segment]] | None:
        """The same rows as :meth:`render`, built as segments: this pane redraws ten times a
        second while a reply plays, and a row of Rich text costs several times more."""
        v = self.view
        if v is None or not v.logits.candidates or width <= 0:
            return None  # the hint wraps: let Rich lay it out
        console = self.app.console

        def line(t: Text) -> list[Segment]:
            t.truncate(width, overflow="ellipsis")
            return [s for s in t.render(console) if s.text != "\n"]

        pane_w = self.size.width or 50
        info = self.info_lines(v, pane_w)
        rows = [line(t) for t in info]
        cols = self._columns(pane_w, v)
        rows.append(line(self._head(pane_w, v)))
        rows_room = self._rows_room(v, len(info))
        cells = self._p_cells(v.logits.candidates)
        for i in _shown(v, rows_room):
            c = v.logits.candidates[i]
            is_next = c.id == v.logits.next_pick
            segs = [
                Segment("▶" if i == self.cursor else " ", MARKER),
                Segment("★" if is_next else " ", NEXT),
            ]
            segs += self._piece_segments(c, cols.piece_w, is_next)
            segs += [Segment(text, style) for text, style in _row_cells(c, cells[i], cols, is_next)]
            if i == self.cursor and self.has_focus:
                segs = list(Segment.apply_style(segs, post_style=CURSOR))
            rows.append(segs)
        rows += [line(t) for t in self.pick_lines(v).split("\n")]
        return rows

    def _piece_segments(self, c: CandidateRow, piece_w: int, is_next: bool) -> list[Segment]:
        """A candidate's piece cell, padded to its column, as segments. Cached: the same
        tokens come back step after step, and a sampler key redraws every row at once (the
        pieces were a third of the pane's frame)."""
        key = (c.piece, bool(c.cut_by), piece_w, is_next)
        got = self._pieces.get(key)
        if got is None:
            pt = _piece_cell(c, piece_w, is_next)
            segs = [s for s in pt.render(self.app.console) if s.text != "\n"]
            got = self._pieces.put(key, [*segs, Segment(" " * (piece_w - pt.cell_len))])
        return got

    def _head(self, width: int, v: View | None = None) -> Text:
        """The column titles over the candidates. Over llama-server the scores are logprobs:
        the logits up to a constant, which is never shown as if it were the raw logit."""
        score = "log p" if v is not None and v.logits.remote is not None else "logit"
        cols = self._columns(width, v)
        head = Text(no_wrap=True)
        head.append(f"  {'piece':<{cols.piece_w}}", DIM)
        if cols.show_id:
            head.append(f"{'id':>6}", DIM)
        if cols.show_logit:
            head.append(f"{score:>7}", DIM)
        if cols.show_moved:
            head.append(f"{score + '′':>7}", DIM)  # over llama-server: log p moved
        a, b = ("p|k", "Σp|k") if self.seen else ("p", "p′")
        head.append(f"{a:>{cols.p_w}}{b:>{cols.p_w}} ", DIM)
        cut = " cut by" if width - head.cell_len - cols.bar_w >= 7 else " cut"
        head.append(f"{'':<{cols.bar_w}}{cut}", DIM)
        return head

    def _columns(self, width: int, v: View | None = None) -> Columns:
        """Which columns fit: id, logit, the logit handed on (when a stage moved logits), the
        piece's width, the bar's, and the cut-by column (as wide as its longest stage name,
        never cut short)."""
        rows = v.logits.candidates if v is not None else ()
        moved = any(c.logit_moved is not None for c in rows)
        cut_w = max([len(c.cut_by) + 1 for c in rows if c.cut_by] + [6])
        piece_w, p_w = (12, 7) if width >= 50 else (9, 6)
        room = width - (2 + piece_w + 2 * p_w + 1 + cut_w) - 1  # the bar keeps a cell at least
        show_moved = moved and room >= 7
        room -= 7 * show_moved
        show_logit = width >= 52 and room >= 7
        room -= 7 * show_logit
        show_id = width >= 44 and room >= 6
        room -= 6 * show_id
        return Columns(show_id, show_logit, show_moved, piece_w, max(1, min(12, 1 + room)), p_w)

    def pick_lines(self, v: View) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        if v.logits.next_pick is not None and v.activity == "generating":
            piece = v.logits.next_piece
            if piece is None:
                nxt = next((c for c in v.logits.candidates if c.id == v.logits.next_pick), None)
                piece = nxt.piece if nxt else b""
            t.append("next ", DIM)
            t.append_text(piece_text(piece, NEXT))
            s = v.settings
            picker = f"mirostat {s.mirostat}" if s.mirostat else "dist"
            how = "greedy" if s.is_greedy else f"{picker} seed {s.seed}"
            if v.logits.remote is not None and v.logits.remote.pick == "server":
                how = "the server's pick"
            t.append(f" ← the next step picks this ({how})", DIM)
        pk = v.text.last_pick
        if pk is not None:
            t.append("\nlast ", DIM)
            t.append_text(piece_text(pk.piece, Style(bold=True)))
            t.append(f" id {pk.id} p {fmt_p(pk.p)} p′ {fmt_p(pk.p_final)}", DIM)
            if pk.forced:
                t.append(" forced", Style(color="bright_magenta", bold=True))
            if pk.eog:
                t.append(" end of generation", Style(color="bright_red", bold=True))
        rv = v.logits.remote
        if rv is not None:  # what crossed HTTP, and how exact the pick is
            first, second = rv.lines()
            t.append("\n" + first, DIM)
            t.append("\n")
            t.append(second, DIM if rv.pick_note is None else Style(color="bright_yellow"))
        return t


@dataclass(frozen=True)
class Columns:
    show_id: bool
    show_logit: bool
    show_moved: bool  # the logit past bias, penalties and DRY
    piece_w: int
    bar_w: int
    p_w: int = 7  # each p column


def _row_cells(
    c: CandidateRow, p_cells: tuple[str, str], cols: Columns, is_next: bool
) -> list[tuple[str, Style | None]]:
    """A candidate's cells after its piece: id, logit, logit′, p, p′, the bar, cut by."""
    out: list[tuple[str, Style | None]] = []
    if cols.show_id:
        out.append((f"{c.id:>6}", DIM))
    if cols.show_logit:
        out.append((f"{c.logit:>7.2f}", None))
    if cols.show_moved:
        moved = c.logit_moved
        changed = moved is not None and moved != c.logit
        out.append(
            (f"{moved:>7.2f}" if moved is not None else f"{'':>7}", MOVED if changed else DIM)
        )
    out.append((f"{p_cells[0]:>{cols.p_w}}", None))
    out.append((f"{p_cells[1]:>{cols.p_w}} ", NEXT if is_next else None))
    filled = round(c.p_final * cols.bar_w)
    raw = round(c.p * cols.bar_w)
    out.append(("█" * filled, BAR))
    out.append(("░" * max(0, raw - filled), BAR_RAW))
    out.append((" " * max(0, cols.bar_w - max(filled, raw)), None))
    if c.cut_by:
        out.append((f" {c.cut_by}", CUT))
    return out


def _piece_cell(c: CandidateRow, piece_w: int, is_next: bool) -> Text:
    """A candidate's piece, cut to its column: the next pick bright, cut ones dim."""
    pt = piece_text(c.piece, special=is_special(c.piece))
    pt.truncate(piece_w - 1, overflow="ellipsis")
    if is_next:
        pt.stylize(NEXT)
    elif c.cut_by:
        pt.stylize(DIM)
    return pt


def _shown(v: View, rows_room: int) -> list[int]:
    """The rows that fit, the ★ among them: when the pick sits below the fold (a row the
    chain's survivors added at the end), it takes the last place shown."""
    rows = v.logits.candidates
    shown = list(range(min(rows_room, len(rows))))
    at = next((i for i, c in enumerate(rows) if c.id == v.logits.next_pick), None)
    if at is not None and shown and at > shown[-1]:
        shown[-1] = at
    return shown


def _picked(v: View) -> str | None:
    order = v.settings.samplers
    i = v.logits.chain_cursor
    return order[i] if 0 <= i < len(order) else None
