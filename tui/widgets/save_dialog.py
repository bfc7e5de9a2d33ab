"""Ctrl+S: ask where to save the session (a path, pre-filled with a fresh name)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


def default_save_name() -> str:
    return time.strftime("tokenstep-session-%Y%m%d-%H%M%S.jsonl")


def default_save_path(folder: str | Path | None) -> str:
    """A fresh name in the autosave folder (where the sessions already are), not in whatever
    directory the app was started from; just the name when there is no folder."""
    return str(Path(folder) / default_save_name()) if folder else default_save_name()


class SaveScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "cancel", show=False)]
    DEFAULT_CSS = """
    SaveScreen { align: center middle; }
    SaveScreen > Vertical {
        width: 80; max-width: 100%; height: auto;
        border: round $accent; background: $surface; padding: 0 1;
    }
    SaveScreen Static { color: $text-muted; }
    """

    def __init__(self, suggestion: str) -> None:
        super().__init__()
        self.suggestion = suggestion

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Save the session"
            yield Static("Conversation, settings and every step record, as JSON Lines.")
            yield Input(self.suggestion, id="save-path")
            # A path is shown as plain text (a str would be parsed as markup).
            yield Static(
                Text(f"Enter saves (a relative path goes under {os.getcwd()}) · Esc cancels")
            )

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        path = event.value.strip()
        self.dismiss(path or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
