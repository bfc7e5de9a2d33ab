"""The token strip: the text both sides were fed, each token's background its KL(A‖B) in
nats, a top-1 flip underlined in red, the cursor reversed.

The bands are decades of nats: KL is a log-ratio, so a token at 0.001 and one at 0.01 differ
as much as one at 0.1 and one at 1. The lines are wrapped by the app's own
:class:`tui.widgets.flow.FlowLines` (a token never splits, a newline token breaks the line), and
only the visible rows are drawn, so a long text costs what a short one does per frame."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ..widgets.common import HEX_STYLE, literal
from ..widgets.flow import Atom, FlowLines
from .candidates import HEX

# (lower bound in nats, background, label), checked from the top
KL_BANDS: tuple[tuple[float, str, str], ...] = (
    (1.0, "#7a1010", "≥1"),
    (0.1, "#7a3a10", "≥0.1"),
    (0.01, "#6b5a12", "≥0.01"),
    (0.001, "#2f4a22", "≥0.001"),
    (0.0, "#1a2a1e", "<0.001"),
)
NO_KL = Style(color="grey50")  # a token with no KL: the first one, or one outside the run
FLIP = Style(underline=True, color="bright_red", bold=True)
CURSOR = Style(color="black", bgcolor="bright_white", bold=True)


def kl_band(kl: float) -> str:
    """The background of a KL in nats."""
    for lo, colour, _ in KL_BANDS:
        if kl >= lo:
            return colour
    return KL_BANDS[-1][1]


def kl_style(kl: float | None, flip: bool) -> Style:
    if kl is None:
        return NO_KL
    style = Style(bgcolor=kl_band(kl), color="grey93")
    return style + FLIP if flip else style


def legend(bound: bool = False) -> Text:
    """One line: what the colours mean, in nats (a bound where B sent its top K only)."""
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("KL(A‖B)" + (" bound" if bound else "") + ", nats: ", "bold")
    for _, colour, label in reversed(KL_BANDS):
        t.append(f" {label} ", Style(bgcolor=colour, color="grey93"))
        t.append(" ")
    t.append("flip", FLIP)
    t.append(" top-1 differs  ")
    t.append("cursor", CURSOR)
    return t


def token_atom(piece: str, style: Style) -> Atom:
    """One token as one unit of the flow: its text as typed (a newline is drawn ↵ and breaks
    the line), broken bytes as the records spell them (``<0xNN>``, in red)."""
    segs: list[Segment] = []
    for part in HEX.split(piece):
        if HEX.fullmatch(part):
            segs.append(Segment(part, style + HEX_STYLE))
        elif part:
            segs.append(Segment(literal(part.replace("\r\n", "↵").replace("\n", "↵")), style))
    if not segs:
        segs.append(Segment("∅", style))
    width = sum(s.cell_length for s in segs)
    return Atom(tuple(segs), width, brk=piece.endswith("\n"), trim=piece.startswith(" "))


class TokenStrip(ScrollView):
    """The strip; :meth:`set_tokens` once, then :meth:`set_cursor` at each move."""

    DEFAULT_CSS = """
    TokenStrip { height: 1fr; scrollbar-size-vertical: 1; overflow-x: hidden; }
    """
    can_focus = False  # its own Home/End/arrows would scroll it; the screen's keys move the cursor

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.pieces: tuple[str, ...] = ()
        self.styles_: list[Style] = []
        self.cursor = 0
        self.flow = FlowLines()
        self.atoms: list[Atom] = []

    def set_tokens(
        self, pieces: Sequence[str], kl: Sequence[float | None], flips: Sequence[bool]
    ) -> None:
        self.pieces = tuple(pieces)
        self.styles_ = [kl_style(k, f) for k, f in zip(kl, flips, strict=True)]
        self.atoms = [self._atom(i) for i in range(len(self.pieces))]
        self.flow = FlowLines()
        self._relayout(0)

    def _atom(self, i: int) -> Atom:
        style = self.styles_[i] + CURSOR if i == self.cursor else self.styles_[i]
        return token_atom(self.pieces[i], style)

    def set_cursor(self, i: int) -> None:
        old, self.cursor = self.cursor, i
        if not self.atoms:
            return
        for j in {old, i}:
            if 0 <= j < len(self.atoms):
                self.atoms[j] = self._atom(j)
        self._relayout(min(old, i))
        self.call_after_refresh(self.bring_cursor)

    @property
    def wrap_width(self) -> int:
        return max(self.size.width - self.styles.scrollbar_size_vertical, 1)

    def _relayout(self, changed: int) -> None:
        self.flow.update(list(self.atoms), changed, self.wrap_width)
        self.virtual_size = Size(self.wrap_width, len(self.flow.lines))
        self.refresh()

    def on_resize(self) -> None:
        if self.atoms:
            self._relayout(0)
            self.call_after_refresh(self.bring_cursor)

    def cursor_row(self) -> int:
        """The line that holds the cursor's token."""
        return max(0, bisect_right(self.flow.first_atom, self.cursor) - 1)

    def bring_cursor(self) -> None:
        row, h = self.cursor_row(), self.size.height
        top = int(self.scroll_offset.y)
        if h and not top <= row < top + h:
            self.scroll_to(y=max(0, row - h // 2), animate=False, immediate=True)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        row = y + int(self.scroll_offset.y)
        if row >= len(self.flow.lines):
            return Strip.blank(width, self.rich_style)
        return Strip(self.flow.lines[row]).extend_cell_length(width).apply_style(self.rich_style)

    @property
    def plain(self) -> str:
        """The drawn text, line by line (for tests)."""
        return "\n".join("".join(s.text for s in line) for line in self.flow.lines)
