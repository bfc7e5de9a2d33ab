"""The compare screen's keys, in one table: its bindings, its key bar and its help read it.

The rows are :class:`tui.widgets.keys.Key` as the app's are, and the key bar and the help are
the app's own widgets fed this table instead of the app's."""

from __future__ import annotations

from textual.binding import Binding, BindingType

from ..widgets.keybar import KeyBar, families
from ..widgets.keys import Key

KEYS: tuple[Key, ...] = (
    Key(
        "right",
        "move(1)",
        "←→",
        "move",
        "Move the cursor one position; both top-K lists follow it.",
        "step",
    ),
    Key("left", "move(-1)", "", "", "", "step"),
    Key("home", "edge(-1)", "Home/End", "ends", "The first or the last position.", "step"),
    Key("end", "edge(1)", "", "", "", "step"),
    Key(
        "n",
        "flip(1)",
        "n/N",
        "flip",
        "The next (N: previous) position where A's and B's top-1 differ.",
        "step",
    ),
    Key("N", "flip(-1)", "", "", "", "step"),
    Key(
        "k",
        "worst",
        "k",
        "next KL",
        "The highest-KL position, then the next highest at each press (after another "
        "move, the highest again).",
        "step",
    ),
    Key(
        "t",
        "toggle_mode",
        "t",
        "texts",
        "Free-running runs: switch between the positions (teacher-forced) and the two "
        "texts side by side with where they part.",
        "view",
    ),
    Key("question_mark,f1", "help", "?", "help", "This help.", "app"),
    Key("q,escape,ctrl+q,ctrl+c", "quit", "q", "quit", "Quit.", "app"),
)


def bindings() -> list[BindingType]:
    """The table as Textual bindings (none shown by Textual: the key bar shows them)."""
    return [Binding(k.keys, k.action, k.short or k.action, show=False) for k in KEYS]


class CompareKeyBar(KeyBar):
    """The app's key bar (its chips, colours, short labels and two-line fit) over this
    table; ``free`` says whether the run has a free-running part (its key gets a chip)."""

    def __init__(self, *, free: bool = False, id: str | None = None) -> None:
        super().__init__(id=id)
        self.chat_focused = False
        self.free = free

    def items(self) -> list[tuple[str, str, str | None, str]]:
        return [
            (k.label, k.short, f"app.{k.action}", k.group)
            for k, _, _ in families(KEYS)
            if k.bar and (self.free or k.action != "toggle_mode")
        ]
