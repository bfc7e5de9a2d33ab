"""The text pane (above the tabs): the conversation as the model sees it in its context, joined
from the token pieces' bytes (a character split over two tokens appears once both have arrived).
The newest token is marked; ``b`` draws the token boundaries.

After a context shift a marked gap stands where the forgotten tokens were. After a fork the
shared context is drawn once, then one column per sequence with what it generated since."""

from __future__ import annotations

import codecs
import re

from rich.console import Group, RenderableType
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text

from ..worker.views import SeqView, View
from .common import DIM, GAP, HEX_STYLE, ROLE_NAMES, ROLE_STYLES, SEQ_COLORS, literal
from .flow import Atom, FlowPane, changed_from
from .surprise import legend, token_style
from .text_flow import STEP_HINT, TextFlow, conversation_parts, gap_words, plain_of, spec_tail

NEWEST = Style(reverse=True, bold=True)
BOUNDARY_STYLES = (Style(bgcolor="#20304a"), Style(bgcolor="#3a2a4a"))
FORGOTTEN = Style(color="grey50", strike=True)
FORK = Style(color="grey62", italic=True)
MARK = Style(underline=True, bold=True, color="bright_yellow")
ACCEPTED = Style(underline=True, color="bright_green")  # drafted, verified, accepted


def span_text(
    pieces: tuple[bytes, ...],
    start: int,
    end: int,
    style: Style,
    *,
    boundaries: bool,
    newest: int | None,
    styles: tuple[Style | None, ...] = (),
) -> tuple[Text, bytes]:
    """The text of tokens [start, end): bytes joined with an incremental UTF-8 decoder so a
    character split across pieces is drawn once, complete. Returns the text and any trailing
    bytes still waiting for the rest of their character."""
    dec = codecs.getincrementaldecoder("utf-8")(errors="tokenstep-hex")
    t = Text()
    for i in range(start, end):
        chunk = dec.decode(pieces[i], final=False)
        st = style
        if boundaries:
            st = st + BOUNDARY_STYLES[(i - start) % 2]
        extra = styles[i] if i < len(styles) else None
        if extra is not None:
            st = st + extra
        if i == newest:
            st = st + NEWEST
        chunk = literal(chunk, keep_newlines=True)
        if boundaries and chunk:
            chunk = chunk.replace("\n", "↵\n")
        if "<0x" in chunk:
            _append_with_hex(t, chunk, st)
        else:
            t.append(chunk, st)
    pending, _ = dec.getstate()
    return t, pending


def _append_with_hex(t: Text, chunk: str, style: Style) -> None:
    for part in re.split(r"(<0x[0-9A-F]{2}>)", chunk):
        if part:
            t.append(part, style + HEX_STYLE if part.startswith("<0x") else style)


class ConversationPane(FlowPane):
    """The text drawn line by line. Outside a fork its atoms come from :class:`TextFlow`,
    which rebuilds only what changed; after a fork (and for the empty-context hint) the Rich
    builder below lays out the columns and its lines are drawn as they are."""

    DEFAULT_CSS = """
    ConversationPane { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.boundaries = False
        self.columns: dict[int, str] = {}  # after a fork: each sequence's column, as drawn
        self._pending = b""  # bytes of a character the shared text leaves to the columns
        self._shared = 0  # after a fork: tokens every sequence still shares
        self._text = TextFlow()
        self._atoms: list[Atom] = []
        self._plain: str | None = None  # set by the Rich builder; else derived from atoms
        self.mark: int | None = None  # the run chart's cursor token (key c), None: none
        self._styles: tuple[Style | None, ...] = ()  # per token: surprise map and mark
        self._styles_key: tuple[object, ...] | None = None

    @property
    def plain(self) -> str:
        """The text as drawn, for tests and screen readers."""
        if self._plain is None:
            self._plain = plain_of(self._atoms)
        return self._plain

    @plain.setter
    def plain(self, value: str) -> None:
        self._plain = value

    def token_styles(self, view: View) -> tuple[Style | None, ...]:
        """The surprise map's background per token (key u), and the chart's cursor."""
        sv, sp = view.text.surprise, view.text.spec
        key = (sv.scale, id(sv.values), self.mark, sp)
        if key != self._styles_key:
            self._styles_key = key
            if sv.scale == "off" and self.mark is None and sp is None:
                self._styles = ()
            else:
                out = [token_style(v, sv.scale) for v in sv.values]
                if sp is not None:  # --spec-type: the drafted tokens the last round accepted
                    out += [None] * max(0, sp.end - len(out))
                    for i in range(sp.start, sp.end):
                        out[i] = (out[i] or Style()) + ACCEPTED
                if self.mark is not None and self.mark < len(out):
                    out[self.mark] = (out[self.mark] or Style()) + MARK
                self._styles = tuple(out)
            self.border_subtitle = legend(sv) if sv.scale != "off" else None
        return self._styles

    def set_mark(self, index: int | None) -> None:
        """Mark one token (the run chart's cursor); None clears it."""
        self.mark = index
        if self.view is not None:
            self.show(self.view)

    def show(self, view: View) -> None:
        self.view = view
        styles = self.token_styles(view)
        width = self.wrap_width
        if view.text.seqs or not view.text.tokens:
            self._text.reset()
            renderable = self.render_view(view, self.build(view))  # sets self.plain
            console = self.app.console
            options = console.options.update(width=width, height=None, highlight=False)
            lines = console.render_lines(renderable, options, pad=False)
            atoms = [Atom(tuple(line), Segment.get_line_length(line), True) for line in lines]
            k = 0
        else:
            self.columns = {}
            atoms = self._text.atoms(
                view,
                boundaries=self.boundaries,
                newest_style=NEWEST,
                boundary_styles=BOUNDARY_STYLES,
                token_styles=styles,
            )
            self._plain = None
            k = changed_from(tuple(self._atoms), tuple(atoms))
        self._atoms = atoms
        self.flow.update(atoms, k, width)
        self.relayout()

    def on_resize(self) -> None:
        if self.view is not None:
            self.show(self.view)
        super().on_resize()

    def toggle_boundaries(self) -> None:
        self.boundaries = not self.boundaries
        if self.view is not None:
            self.show(self.view)

    def render_view(self, v: View, text: Text) -> RenderableType:
        """The shared text, and after a fork one column per live sequence beside each other."""
        self.columns = {}
        self.plain = text.plain
        if not v.text.seqs or not v.text.tokens:
            return text
        table = Table.grid(expand=True, padding=(0, 2))
        heads, bodies = [], []
        for sv in v.text.seqs:
            table.add_column(ratio=1)
            head, col = self.column(v, sv)
            heads.append(head)
            bodies.append(col)
            self.columns[sv.seq_id] = col.plain
            self.plain += f"\n{head.plain}\n{col.plain}"
        table.add_row(*heads)
        table.add_row(*bodies)
        return Group(text, table)

    def column(self, v: View, sv: SeqView) -> tuple[Text, Text]:
        """One sequence's continuation since the fork. A character split across the fork
        point is completed here: the bytes the shared text left pending lead each column."""
        colour = SEQ_COLORS[sv.seq_id % len(SEQ_COLORS)]
        state = sv.stop_reason or "generating"
        head = Text(
            f"seq {sv.seq_id} · KV {sv.n_tokens:,} · {state}", Style(color=colour, bold=True)
        )
        pieces = sv.pieces
        if pieces and self._pending:
            pieces = (self._pending + pieces[0], *pieces[1:])
        live = v.activity == "generating" and sv.stop_reason is None
        style = ROLE_STYLES["generated" if v.raw else "reply"]
        # A shift after the fork may have cut into the column: its first tokens are then no
        # longer in the cache (the sequence holds the shared cells plus fewer of its own).
        gone = max(0, len(pieces) - (sv.n_tokens - self._shared))
        body = Text()
        if gone:
            lost, _ = span_text(pieces, 0, gone, FORGOTTEN, boundaries=False, newest=None)
            body.append_text(lost)
            body.append(f" ⟪{gone:,} forgotten⟫ ", GAP)
        rest, pending = span_text(
            pieces,
            gone,
            len(pieces),
            style,
            boundaries=self.boundaries,
            newest=len(pieces) - 1 if live and pieces else None,
        )
        body.append_text(rest)
        if pending:
            body.append(f"⋯({len(pending)} byte(s) of a character still to come)", DIM)
        if not pieces:
            body.append("(nothing yet: → steps every sequence)", DIM)
        return head, body

    def build(self, v: View) -> Text:
        t = Text()
        self._pending = b""
        # The token just generated is marked while the reply is still being generated.
        newest = v.text.n_past - 1 if v.text.reply_tokens and v.activity == "generating" else None
        if not v.text.tokens:
            hint = (
                "Type a prompt below and press Enter; the model continues the text."
                if v.raw
                else "Type a message below and press Enter to chat with the model."
            )
            t.append(hint, DIM)
            return t
        end = shared_count(v) if v.text.seqs else len(v.text.pieces)
        self._shared = end
        for part in conversation_parts(v, end):
            if part.kind == "gap":
                t.append_text(gap_marker(v))
                continue
            style = ROLE_STYLES.get(part.role, Style())
            if part.kind == "head":
                if t:
                    t.append("\n")
                t.append(f"{ROLE_NAMES.get(part.role, part.role)} ▸ ", style + Style(bold=True))
                continue
            a, b = part.start, part.end
            body, pending = span_text(
                v.text.pieces,
                a,
                b,
                style,
                boundaries=self.boundaries,
                newest=newest,
                styles=self._styles,
            )
            t.append_text(body)
            if pending and (part.cut or (v.text.seqs and b == end)):
                # Cut by the shift, or completed in the fork's columns (they start with
                # these bytes).
                self._pending = pending if b == end else b""
                t.append("⋯", DIM)
            elif pending:
                t.append("⋯", DIM)
                t.append(f"({len(pending)} byte(s) of a character still to come)", DIM)
        if v.text.seqs:
            ids = ", ".join(str(sv.seq_id) for sv in v.text.seqs)
            t.append(
                f"\n── forked here: the {end:,} tokens above are KV cells shared by "
                f"sequences {ids}; each continues in its own column",
                FORK,
            )
            return t
        for atom in spec_tail(v):  # --spec-type: the rejected draft token, the waiting pick
            for seg in atom.segments:
                t.append(seg.text, seg.style)
        if not v.raw and v.text.reply_start is not None and not v.text.reply_tokens:
            t.append("\nmodel ▸ ", ROLE_STYLES["reply"] + Style(bold=True))
        if v.activity == "generating" and v.mode == "step":
            t.append("▌", Style(color="bright_yellow", blink=False))
            if not v.text.reply_tokens:  # sent in step mode: nothing plays until a key says so
                t.append(f"  {STEP_HINT}", DIM)
        elif v.activity == "done" and v.stop_reason:
            t.append(f"  [{v.stop_reason}]", DIM)
        return t


def shared_count(v: View) -> int:
    """Tokens of sequence 0 that every live sequence still sees: the KV cells tagged with all
    of their seq_ids. They come first in sequence 0's cell order (they were there before it
    forked), so they are the first tokens of ``v.text.tokens``."""
    live = [sv.seq_id for sv in v.text.seqs]
    return sum(1 for _, _, seqs in v.kv.kv_cells if all(s in seqs for s in live))


def gap_marker(v: View) -> Text:
    return Text(gap_words(v), GAP)
