"""The progress row of a slow command (a capture's re-prefill, verify, the autosave on quit).

It takes the notice row's place while the worker says it is busy, so the layout does not move:
an indeterminate Textual ``ProgressBar`` (llama.cpp's prefill gives no partial count) and what
is being done, with the keys that still work."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import ProgressBar, Static

from .common import literal


class BusyBar(Horizontal):
    DEFAULT_CSS = """
    BusyBar { height: 1; display: none; padding: 0 1; }
    BusyBar ProgressBar { width: 14; }
    BusyBar ProgressBar Bar { width: 12; }
    BusyBar #busy-what { width: 1fr; color: $text; }
    """

    what: str | None = None

    def compose(self) -> ComposeResult:
        yield ProgressBar(total=None, show_eta=False, show_percentage=False)
        yield Static(id="busy-what")

    def show(self, what: str | None, keys: str = "Ctrl+Q quits") -> None:
        """``what`` is under way (None: nothing is, and the notice row comes back)."""
        if what == self.what:
            return
        self.what = what
        self.display = what is not None
        if what is not None:
            text = Text(no_wrap=True, overflow="ellipsis")
            text.append(literal(what) + "…")
            text.append(f"  ({keys})", "dim")
            self.query_one("#busy-what", Static).update(text)
