"""The logits pane (left), logits and sampler: the top candidates for the next token, what each
sampler stage kept or cut, and which token the next step will pick (a preview on the same
logits, using a clone of the seeded RNG, so it is exactly the token the step takes).

Columns: p is the softmax of the raw logits over the whole vocabulary (temperature 1);
p' is the probability after the chain, the one the pick draws from."""

from __future__ import annotations

import textwrap

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.message import Message

from ..worker.views import CandidateRow, View
from .common import DIM, Pane, fmt_p, is_special, piece_text
from .lru import LRU

CURSOR = Style(bgcolor="grey30")
MARKER = Style(color="bright_yellow", bold=True)
NEXT = Style(color="bright_green", bold=True)
CUT = Style(color="red")
BAR = Style(color="bright_green")
BAR_RAW = Style(color="grey42")


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
            f"logits → sampler · seq 0's row (of seqs {', '.join(map(str, seqs))})"
            if view.text.fork_at is not None and len(seqs) > 1
            else "logits → sampler"
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
        row = at.y - 3  # under the settings, the chain and the column titles
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

    def settings_line(self, v: View) -> Text:
        s = v.settings
        t = Text(no_wrap=True, overflow="ellipsis")
        if s.is_greedy:
            t.append("greedy", NEXT)
            t.append(" (argmax)   ", DIM)
            t.append(
                f"temp {s.temp:.2f} · top-k {s.top_k} · top-p {s.top_p:.2f} · "
                f"min-p {s.min_p:.2f} unused",
                DIM,
            )
            return t
        parts = [
            ("temp", f"{s.temp:.2f}"),
            ("top-k", "off" if s.top_k == 0 else str(s.top_k)),
            ("top-p", f"{s.top_p:.2f}"),
            ("min-p", f"{s.min_p:.2f}"),
            ("seed", str(s.seed)),
        ]
        for i, (k, val) in enumerate(parts):
            if i:
                t.append("  ")
            t.append(f"{k} ", DIM)
            t.append(val, Style(bold=True, color="bright_cyan"))
        return t

    def chain_line(self, v: View) -> Text:
        """The stages row: every stage in order with the count after it; the picked stage
        (``[``/``]``) underlined, stages turned off (``x``) shown as off."""
        t = Text(no_wrap=True, overflow="ellipsis")
        if v.logits.chain is None:
            return t
        rv = v.logits.remote
        t.append(f"top {rv.n_top} of {v.text.n_vocab:,}" if rv else f"{v.text.n_vocab:,}")
        picked = _picked(v)
        for st in v.logits.chain.stages:
            mark = Style(underline=True) if st.key and st.key == picked else Style()
            t.append(f" →{st.name} ", DIM + mark)
            t.append(f"{st.n:,}", Style(bold=True) + mark)
        s = v.settings
        for name in s.off:
            t.append(f" ({name} off)", CUT + (Style(underline=True) if name == picked else Style()))
        if (
            picked
            and v.action == "settings"  # just after a chain key: say where the cursor is
            and picked not in s.off
            and not any(st.key == picked for st in v.logits.chain.stages)
        ):
            t.append(f" ({picked}: neutral)", DIM + Style(underline=True))
        return t

    def did_line(self, v: View) -> Text | None:
        """What each stage did, when one did something worth a word."""
        chain = v.logits.chain
        if chain is None:
            return None
        t = Text(no_wrap=True, overflow="ellipsis")
        for st in chain.stages:
            what = st.note
            if st.changed and not what:
                first = st.changed[0]
                why = st.why.get(first[0], "")
                what = f"{len(st.changed)} moved, e.g. {first[1]:.2f}→{first[2]:.2f} {why}".rstrip()
            if what:
                t.append(f"{st.name}: ", DIM)
                t.append(what + "  ")
        return t if t.plain else None

    def render(self) -> Text:
        v = self.view
        t = Text(no_wrap=True, overflow="ellipsis")
        if v is None:
            return t
        width = self.size.width or 50
        t.append_text(self.settings_line(v))
        t.append("\n")
        if not v.logits.candidates:
            hint = (
                "No logits yet. Send a message: its prefill ends in one score per "
                "vocabulary entry, and the top candidates appear here with what each "
                "sampler stage keeps or cuts."
            )
            t.append("\n")
            for line in textwrap.wrap(hint, max(width - 1, 20)):
                t.append(line + "\n", DIM)
            return t
        t.append_text(self.chain_line(v))
        t.append("\n")
        did = self.did_line(v)
        if did is not None:
            t.append_text(did)
            t.append("\n")
        show_id, show_logit, piece_w, bar_w = self._columns(width)
        t.append_text(self._head(width, v))
        t.append("\n")
        rows_room = max(
            (self.size.height or 20) - 5 - 2 * (v.logits.remote is not None) - (did is not None), 3
        )
        cells = self._p_cells(v.logits.candidates)
        for i, c in enumerate(v.logits.candidates[:rows_room]):
            row = Text(no_wrap=True)
            is_next = c.id == v.logits.next_pick
            marker = "▶" if i == self.cursor else " "
            row.append(marker, MARKER)
            row.append("★" if is_next else " ", NEXT)
            pt = _piece_cell(c, piece_w, is_next)
            row.append_text(pt)
            row.append(" " * (piece_w - pt.cell_len))
            if show_id:
                row.append(f"{c.id:>6}", DIM)
            if show_logit:
                row.append(f"{c.logit:>7.2f}")
            row.append(f"{cells[i][0]:>7}")
            row.append(f"{cells[i][1]:>7} ", NEXT if is_next else Style())
            filled = round(c.p_final * bar_w)
            raw = round(c.p * bar_w)
            row.append("█" * filled, BAR)
            row.append("░" * max(0, raw - filled), BAR_RAW)
            row.append(" " * max(0, bar_w - max(filled, raw)))
            row.append(f" {c.cut_by}" if c.cut_by else "", CUT)
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

        rows = [line(self.settings_line(v)), line(self.chain_line(v))]
        did = self.did_line(v)
        if did is not None:
            rows.append(line(did))
        show_id, show_logit, piece_w, bar_w = self._columns(self.size.width or 50)
        rows.append(line(self._head(self.size.width or 50, v)))
        rows_room = max(
            (self.size.height or 20) - 5 - 2 * (v.logits.remote is not None) - (did is not None), 3
        )
        cells = self._p_cells(v.logits.candidates)
        for i, c in enumerate(v.logits.candidates[:rows_room]):
            is_next = c.id == v.logits.next_pick
            segs = [
                Segment("▶" if i == self.cursor else " ", MARKER),
                Segment("★" if is_next else " ", NEXT),
            ]
            segs += self._piece_segments(c, piece_w, is_next)
            if show_id:
                segs.append(Segment(f"{c.id:>6}", DIM))
            if show_logit:
                segs.append(Segment(f"{c.logit:>7.2f}"))
            segs.append(Segment(f"{cells[i][0]:>7}"))
            segs.append(Segment(f"{cells[i][1]:>7} ", NEXT if is_next else None))
            filled = round(c.p_final * bar_w)
            raw = round(c.p * bar_w)
            segs.append(Segment("█" * filled, BAR))
            segs.append(Segment("░" * max(0, raw - filled), BAR_RAW))
            segs.append(Segment(" " * max(0, bar_w - max(filled, raw))))
            if c.cut_by:
                segs.append(Segment(f" {c.cut_by}", CUT))
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
        show_id, show_logit, piece_w, bar_w = self._columns(width)
        head = Text(no_wrap=True)
        head.append(f"  {'piece':<{piece_w}}", DIM)
        if show_id:
            head.append(f"{'id':>6}", DIM)
        if show_logit:
            head.append(f"{score:>7}", DIM)
        a, b = ("p|k", "Σp|k") if self.seen else ("p", "p′")
        head.append(f"{a:>7}{b:>7} ", DIM)
        head.append(f"{'':<{bar_w}} cut by", DIM)
        return head

    def _columns(self, width: int) -> tuple[bool, bool, int, int]:
        """Which columns fit: id, logit, the piece's width and the bar's."""
        show_id = width >= 44
        show_logit = width >= 52
        piece_w = 12 if width >= 50 else 9
        fixed = 2 + piece_w + 6 * show_id + 7 * show_logit + 14 + 1 + 7
        return show_id, show_logit, piece_w, max(3, min(12, width - fixed))

    def pick_lines(self, v: View) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        if v.logits.next_pick is not None and v.activity == "generating":
            nxt = next((c for c in v.logits.candidates if c.id == v.logits.next_pick), None)
            t.append("next ", DIM)
            t.append_text(piece_text(nxt.piece if nxt else b"", NEXT))
            how = "greedy" if v.settings.is_greedy else f"dist seed {v.settings.seed}"
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


def _piece_cell(c: CandidateRow, piece_w: int, is_next: bool) -> Text:
    """A candidate's piece, cut to its column: the next pick bright, cut ones dim."""
    pt = piece_text(c.piece, special=is_special(c.piece))
    pt.truncate(piece_w - 1, overflow="ellipsis")
    if is_next:
        pt.stylize(NEXT)
    elif c.cut_by:
        pt.stylize(DIM)
    return pt


def _picked(v: View) -> str | None:
    order = v.settings.samplers
    i = v.logits.chain_cursor
    return order[i] if 0 <= i < len(order) else None
