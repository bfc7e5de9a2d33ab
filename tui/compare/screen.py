"""The compare screen: a finished ``tokenstep compare`` run, drawn from its records.

From the top: the title (both sides' labels), the one-glance sentence (B's KV cache against
A's, how often the top-1 differs) and the run's figures, the token strip coloured by KL with
its legend, and what the cursor opens at its position: both top-K lists side by side. A
free-running run adds a second view (t): both texts, where they part, and both candidate
lists there. The keys are one table (:mod:`.screen_keys`) feeding the bindings, the key bar and
the help. Nothing is computed here: every figure is a field of the
:class:`~tui.compare.records.Result`, formatted.

The cursor moves over the compared positions. Position ``i`` predicts token ``i + 1``, so the
strip colours that token (the one the two distributions were about) and the cursor marks it.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

from ..widgets.common import literal
from .candidates import detail
from .help import CompareHelp
from .records import Position, Result
from .screen_keys import CompareKeyBar, bindings
from .strip import TokenStrip, legend
from .summary import DIMMED, LABEL, figures, glance, side_line, title

SIDES_FROM = 36  # rows from which each side's flags get a line under the figures
STRIP_ROWS = 5  # the strip's least height: three lines of text and its border
KEYBAR_ROWS = 2
DETAIL_HEAD_ROWS = 5  # the two head lines (one may wrap), the lists' titles and headers
MIN_LIST_ROWS = 3


class CompareApp(App[int]):
    """One finished comparison. ``result`` is never changed; the cursor is an index into
    ``result.positions``."""

    TITLE = "tokenstep compare"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = bindings()
    CSS = """
    Screen { layout: vertical; }
    #title, #glance, #legend { height: auto; padding: 0 1; }
    #figures, #sides { height: auto; padding: 0 1; }
    #strip { height: 1fr; min-height: 3; border: round $primary-darken-1; }
    #detail { height: auto; max-height: 16; padding: 0 1; }
    #free { height: 1fr; padding: 0 1; border: round $primary-darken-1; }
    #free-body { height: auto; }
    """

    def __init__(self, result: Result) -> None:
        super().__init__()
        self.result = result
        s = result.summary
        self.free_mode = s.mode == "free"
        self.showing_free = False
        self.cursor = 0
        self.flips = tuple(i for i, p in enumerate(result.positions) if not p.same_top)
        index = {p.position: i for i, p in enumerate(result.positions)}
        self.by_kl = tuple(index[pos] for pos in s.by_kl if pos in index)
        self._kl_rank = -1  # where k is in by_kl (-1: the next k goes to the highest)

    # -- layout -------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        s = self.result.summary
        yield Static(title(s), id="title")
        yield Static(glance(s), id="glance")
        yield Static(figures(s), id="figures")
        yield Static(
            Text("\n".join(side_line(x, s.mode == "free") for x in (s.a, s.b)), DIMMED), id="sides"
        )
        with Vertical(id="forced"):
            yield Static(legend(s.kl_is_bound), id="legend")
            yield TokenStrip(id="strip")
        with VerticalScroll(id="free", can_focus=False):
            yield Static(id="free-body")
        yield Static(id="detail")
        yield CompareKeyBar(free=self.free_mode, id="keybar")

    def on_mount(self) -> None:
        r = self.result
        n = len(r.pieces)
        kl: list[float | None] = [None] * n
        flips = [False] * n
        for p in r.positions:
            if 0 <= p.position + 1 < n:
                kl[p.position + 1] = p.kl
                flips[p.position + 1] = not p.same_top
        strip = self.query_one(TokenStrip)
        if r.summary.mode == "free":  # after the parting each side was fed its own picks
            strip.border_title = "A's text" + (
                f" (B was fed its own picks after position {r.summary.parted_at})"
                if r.summary.parted_at is not None
                else " (B's picks were the same)"
            )
        else:
            strip.border_title = "the text both sides were fed"
        strip.border_subtitle = "each token coloured by the KL of its prediction"
        strip.cursor = self.token_index
        strip.set_tokens(r.pieces, kl, flips)
        self.query_one("#free").display = False
        if self.free_mode and r.summary.parted_at is not None:
            self.go(self._index_of(r.summary.parted_at))
        self.draw()

    def on_resize(self) -> None:
        self.query_one("#sides").display = self.size.height >= SIDES_FROM
        self.call_after_refresh(self.draw)  # the lines above may wrap anew: fit the lists again

    def list_rows(self) -> int:
        """How many rows of each top-K list fit: the strip keeps STRIP_ROWS (its border
        included), the lines above and the key bar take what they take at this width."""
        above = sum(
            w.outer_size.height
            for w in self.query("#title, #glance, #figures, #sides, #legend").results(Static)
            if w.display
        )
        room = self.size.height - above - STRIP_ROWS - KEYBAR_ROWS - DETAIL_HEAD_ROWS
        return max(MIN_LIST_ROWS, room)

    # -- what is shown ------------------------------------------------------------------------
    @property
    def position(self) -> Position | None:
        ps = self.result.positions
        return ps[self.cursor] if ps else None

    @property
    def token_index(self) -> int:
        p = self.position
        return p.position + 1 if p is not None else -1

    def _index_of(self, position: int) -> int:
        for i, p in enumerate(self.result.positions):
            if p.position == position:
                return i
        return self.cursor

    def draw(self) -> None:
        s = self.result.summary
        self.query_one("#detail", Static).update(
            detail(self.position, s.a, s.b, s.kl_is_bound, self.list_rows())
        )
        self.query_one("#forced").display = not self.showing_free
        self.query_one("#free").display = self.showing_free
        if self.showing_free:
            self.query_one("#free-body", Static).update(self.free_text())

    def free_text(self) -> RenderableType:
        """Both texts of a free-running run side by side, the shared start dim and each
        side's own continuation bright, under where they part."""
        s = self.result.summary
        head = Text()
        if s.parted_at is None:
            head.append("The two texts never part: every pick was the same.", LABEL)
        else:
            head.append(f"The texts part at position {s.parted_at}", LABEL)
            head.append(" (both candidate lists there are below).", DIMMED)
        shared = 0
        for x, y in zip(s.text_a, s.text_b, strict=False):
            if x != y:
                break
            shared += 1
        grid = Table.grid(expand=True, padding=(0, 2))
        cells = []
        for label, text, colour in (
            (s.a.label, s.text_a, "bright_green"),
            (s.b.label, s.text_b, "bright_magenta"),
        ):
            grid.add_column(ratio=1)
            t = Text()
            t.append(f"{literal(label)}\n", LABEL)
            t.append(literal(text[:shared], keep_newlines=True), DIMMED)
            t.append(literal(text[shared:], keep_newlines=True), colour)
            cells.append(t)
        grid.add_row(*cells)
        return Group(head, grid)

    # -- keys ---------------------------------------------------------------------------------
    def go(self, i: int) -> None:
        n = len(self.result.positions)
        if not n:
            return
        self.cursor = max(0, min(n - 1, i))
        self.query_one(TokenStrip).set_cursor(self.token_index)
        self.draw()

    def action_move(self, step: int) -> None:
        self._kl_rank = -1
        self.go(self.cursor + step)

    def action_edge(self, end: int) -> None:
        self._kl_rank = -1
        self.go(len(self.result.positions) - 1 if end > 0 else 0)

    def action_flip(self, step: int) -> None:
        """The next (or previous) position whose top-1s differ; none: a word in the detail."""
        self._kl_rank = -1
        ahead = [i for i in self.flips if (i > self.cursor if step > 0 else i < self.cursor)]
        if ahead:
            self.go(ahead[0] if step > 0 else ahead[-1])
        else:
            self.notify(
                "No top-1 flip " + ("after" if step > 0 else "before") + " this position.",
                timeout=2,
            )

    def action_worst(self) -> None:
        """The highest-KL position, then each next one down the run's ranking."""
        if not self.by_kl:
            return
        at = self._kl_rank
        rank = at + 1 if 0 <= at < len(self.by_kl) - 1 and self.by_kl[at] == self.cursor else 0
        self._kl_rank = rank
        self.go(self.by_kl[rank])

    def action_toggle_mode(self) -> None:
        if not self.free_mode:
            self.notify("This run was teacher-forced: it has no free-running texts.", timeout=2)
            return
        self.showing_free = not self.showing_free
        if self.showing_free and self.result.summary.parted_at is not None:
            self.go(self._index_of(self.result.summary.parted_at))
        self.draw()

    def action_help(self) -> None:
        if isinstance(self.screen, CompareHelp):
            self.screen.dismiss(None)
            return
        s = self.result.summary
        self.push_screen(CompareHelp(bound=s.kl_is_bound, free=self.free_mode))

    async def action_quit(self) -> None:
        self.exit(0)


def run_screen(result: Result) -> int:
    """Open the screen on a finished comparison; the exit code when it closes."""
    app = CompareApp(result)
    code = app.run()
    return code if isinstance(code, int) else 0
