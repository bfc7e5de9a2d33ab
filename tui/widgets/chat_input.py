"""The chat box: a one-line Input that keeps every line of a paste.

Textual's Input keeps only the first line of a pasted text and drops the rest without a word.
Here the line breaks become spaces, so a pasted text arrives whole, and the app is told how many
lines were joined (it says so in the notice line)."""

from __future__ import annotations

from textual import events
from textual.message import Message
from textual.widgets import Input


class ChatInput(Input):
    class PastedLines(Message):
        """A paste of more than one line was joined into the box."""

        def __init__(self, lines: int, chars: int) -> None:
            super().__init__()
            self.lines = lines
            self.chars = chars

    def _on_paste(self, event: events.Paste) -> None:
        text = event.text
        if text and ("\n" in text or "\r" in text):
            lines = text.splitlines()
            joined = " ".join(lines)
            if self.selection.is_empty:
                self.insert_text_at_cursor(joined)
            else:
                self.replace(joined, *self.selection)
            self.post_message(self.PastedLines(len(lines), len(joined)))
            event.stop()
            event.prevent_default()  # Input's own handler would insert the first line again
