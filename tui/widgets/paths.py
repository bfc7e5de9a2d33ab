"""The paths not taken (key ``w``): the branches of the current turn as a tree under the live
reply. Each rewind, force and fork leaves one; a row gives where it leaves its parent (@ the
reply's token index), its first token there with p and p′, and whether llama.cpp still holds
its cells (a parked sequence) or a jump would decode it again.

Keys when focused: ↑/↓ move the cursor, Enter jumps to the branch under it; the pane's
last line says how the jump put the path back (from the cache or recomputed).
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.widget import Widget

from ..worker.paths import PathRow, PathsView
from ..worker.views import View
from .common import DIM, fmt_p, literal
from .keys import pane_bindings

LIVE = Style(color="bright_green", bold=True)
CURSOR = Style(bgcolor="grey23")
HOW = {"rewind": "rewound", "force": "not forced", "fork": "fork", "jump": "left"}
TAIL = 48  # characters of a branch's text shown


def _text(pieces: tuple[bytes, ...]) -> str:
    s = literal(b"".join(pieces).decode("utf-8", "replace"))
    return s if len(s) <= TAIL else s[: TAIL - 1] + "…"


class PathsPane(Widget, can_focus=True):
    DEFAULT_CSS = """
    PathsPane { height: 1fr; }
    """
    BINDINGS = [Binding(k, a, d, show=False) for k, a, d in pane_bindings("paths")]

    class Jump(Message):
        def __init__(self, branch: int) -> None:
            super().__init__()
            self.branch = branch

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.paths: PathsView | None = None
        self.cursor = 0

    def show(self, view: View) -> None:
        self.show_paths(view.paths)

    def show_paths(self, pv: PathsView) -> None:
        self.paths = pv
        self.cursor = max(0, min(self.cursor, len(pv.rows) - 1))
        self.refresh()

    @property
    def highlighted(self) -> PathRow | None:
        pv = self.paths
        return pv.rows[self.cursor] if pv is not None and pv.rows else None

    def action_cursor(self, delta: int) -> None:
        if self.paths is not None and self.paths.rows:
            self.cursor = max(0, min(self.cursor + delta, len(self.paths.rows) - 1))
            self.refresh()

    def action_jump(self) -> None:
        row = self.highlighted
        if row is not None and row.id:
            self.post_message(self.Jump(row.id))

    def render(self) -> Text:
        pv = self.paths
        t = Text(no_wrap=True, overflow="ellipsis")
        if pv is None or not pv.rows:
            t.append("No reply yet: the paths not taken of a turn appear here.", DIM)
            return t
        n = len(pv.rows) - 1
        t.append(f"{n} branch(es)", Style(bold=True))
        if pv.shown:
            t.append(f" · rewinds park cells · {pv.free_seqs} seq_id(s) free (-np)", DIM)
        t.append("\n")
        depth = {0: 0}
        for i, r in enumerate(pv.rows):
            depth[r.id] = 0 if r.id == 0 else depth.get(r.parent, 0) + 1
            line = Text(no_wrap=True, overflow="ellipsis")
            if r.id == 0:
                line.append("● live ", LIVE)
                line.append(f"{r.n_tokens} token(s) ", DIM)
                line.append(_text(r.pieces))
            else:
                line.append("  " * depth[r.id] + "└ ", DIM)
                line.append(f"#{r.id} ", Style(bold=True))
                line.append(f"@{r.at} ", DIM)
                line.append(f"{HOW.get(r.how, r.how)} ", DIM)
                p = "p —" if r.p is None else f"p {fmt_p(r.p)}"
                # p′ 0: the chain cut that token (a forced one, or one a setting cut since)
                pf = (
                    ""
                    if r.p_final is None
                    else (" cut by the chain" if r.p_final == 0 else f" p′ {fmt_p(r.p_final)}")
                )
                line.append(f"{p}{pf} ", Style(color="bright_cyan"))
                if r.cached:
                    line.append(f"[cached: seq {r.seq}] ", Style(color="green3"))
                else:
                    line.append("[recompute] ", Style(color="yellow3"))
                line.append(_text(r.pieces))
            if i == self.cursor and self.has_focus:
                line.stylize(CURSOR)
            line.truncate(max(self.size.width, 20), overflow="ellipsis")
            t.append_text(line)
            t.append("\n")
        if pv.note:
            t.append(f"last jump: {pv.note}", Style(color="grey85"))
        else:
            t.append("↑/↓ choose a branch, Enter jumps to its end.", DIM)
        return t
