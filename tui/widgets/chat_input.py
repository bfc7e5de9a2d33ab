"""The chat box: a one-line Input that keeps every line of a paste, and does not swallow a
control key pressed just before the app moved the focus into it.

Textual's Input keeps a paste's first line only; here line breaks become spaces and the app
says how many lines were joined. When the app moves the focus here (:meth:`ChatInput.take_focus`),
a key pressed before that moment, still queued, goes back to the controls and does what it
would have done (``0`` opens the cache tab). A reply's end does not move the focus (``k`` is
still top-k); ``i`` types; a paste moves it with plain ``set_focus``. A paste larger than the
context can hold (:mod:`~tui.engine.model.text_size`) is refused in one sentence.
"""

from __future__ import annotations

from textual import events
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Input

from ..engine.model import text_size


class ChatInput(Input):
    class PastedLines(Message):
        """A paste of more than one line was joined into the box."""

        def __init__(self, lines: int, chars: int) -> None:
            super().__init__()
            self.lines = lines
            self.chars = chars

    _from_app = False  # the next Focus event is the app's own move
    _focus_before: Widget | None = None  # where the focus was before that move
    moved_here_at: float | None = None  # when the app last moved the focus here

    def take_focus(self) -> None:
        """Focus the box now (``focus()`` waits for the next message), on the app's own
        initiative: keys pressed before this moment still go to the controls."""
        if self.has_focus:
            return
        self._from_app = True
        self._focus_before = self.screen.focused
        self.screen.set_focus(self)

    def on_focus(self, event: events.Focus) -> None:
        # Message.time is Textual's clock, the one every Key event is stamped with.
        self.moved_here_at = event.time if self._from_app else None
        self._from_app = False

    async def _on_key(self, event: events.Key) -> None:
        before = self._focus_before
        if self.moved_here_at is None or event.time >= self.moved_here_at or before is None:
            return  # typed as usual (Input's own handler runs next)
        if not before.is_attached or not before.focusable:
            return
        event.prevent_default()  # not typed: Input's handler must not run
        event.stop()
        self.moved_here_at = None
        self.screen.set_focus(before)  # the user was still on the controls
        before._forward_event(events.Key(event.key, event.character))

    def _on_paste(self, event: events.Paste) -> None:
        text = event.text
        view = getattr(self.app, "view", None)
        n_ctx = view.text.n_ctx if view is not None else 0
        if len(text) > text_size.max_bytes(n_ctx):  # more than the worker would tokenize
            event.stop()
            event.prevent_default()
            why = text_size.refusal("this paste", len(text), n_ctx, bound="at least ")
            self.notify(why[0].upper() + why[1:] + " Nothing was pasted.", severity="error")
            return
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
