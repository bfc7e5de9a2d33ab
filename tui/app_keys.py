"""Keys on their way in: the key gate's floods (:mod:`tui.widgets.key_flood`) and where a
typed character goes.

Textual sends a key into the focused widget's queue; one no binding takes bubbles up widget
by widget to the app, and keys typed meanwhile reach the controls first (typed fast on the
controls, "Hello there" becomes "Hllo"; a flood's paste overtakes keys still on their way).
So a character is told from a command when the app first takes the key, from what the
bindings would do (from the focused widget up, the stage keys, the attention pane's own): a
character goes straight to the chat box, the focus with it, and every character and every
flood's paste enter the chat box's one queue in the order they were typed.
"""

from __future__ import annotations

from textual import events
from textual.app import App
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Input

from .widgets.attention import AttentionPane
from .widgets.chat_input import ChatInput
from .widgets.key_flood import KeyGate, describe, gate_driver
from .widgets.keys import STAGE_KEY_NAMES

_ATTENTION_KEYS = frozenset(
    k.strip() for b in AttentionPane.BINDINGS if isinstance(b, Binding) for k in b.key.split(",")
)


class KeyRouting(App[int]):
    """The key gate and the route of a typed character; :class:`tui.app_actions.AppActions`
    adds the actions."""

    key_gate: KeyGate | None = None

    @property
    def main(self) -> Screen[object]:
        """The screen with the panes. ``App.query_one`` looks in the active screen, which is
        the help or save dialog while one is open; views keep arriving meanwhile."""
        return self.screen_stack[0]

    def _say(self, text: str, colour: str = "grey85") -> None:
        raise NotImplementedError  # the notice row: AppActions

    def _stop_now(self) -> None:
        raise NotImplementedError  # ask the decode thread to stop and autosave: AppActions

    def _gate_keys(self) -> None:
        """Put the key gate between the terminal driver's parser and the app's queue."""
        driver = self._driver
        if driver is None or self.key_gate is not None:
            return
        self.key_gate = gate_driver(driver, on_quit=self._stop_now)

    def _types(self, event: events.Key) -> bool:
        """A key just taken from the app's queue is a character for the chat box: printable,
        on the controls of the main screen, and no command there."""
        if event.is_forwarded or len(self.screen_stack) > 1 or isinstance(self.focused, Input):
            return False
        if not (event.is_printable and event.character) or event.key in STAGE_KEY_NAMES:
            return False
        if isinstance(self.focused, AttentionPane) and event.key in _ATTENTION_KEYS:
            return False
        chain = self.screen._modal_binding_chain
        return not any(event.key in bindings.key_to_bindings for _, bindings in chain)

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Paste) and self._paste_to_chat(event):
            return
        flood = None
        if isinstance(event, events.Key) and self.key_gate is not None:
            if self.key_gate.quitting:
                return  # queued before the quit: each could cost a pass over a huge chat box
            flood = self.key_gate.taken(event)
        if isinstance(event, events.Key) and self._types(event):
            chat = self.main.query_one("#chat", ChatInput)
            self.app_focus = True
            self.main.set_focus(chat)  # at once: the keys after this one are typed there too
            chat._forward_event(event)
        else:
            await super().on_event(event)
        if flood is not None and flood.keys:
            chat = self.main.query_one("#chat", ChatInput)
            if not chat.has_focus:
                self.main.set_focus(chat)  # at once, as above
            chat.post_message(events.Paste(flood.text))
            self._say(describe(flood), "bright_yellow")

    def _paste_to_chat(self, event: events.Paste) -> bool:
        """A paste always lands in the chat box, whatever has the focus: Textual hands it to
        the focused widget, and the controls (where the focus is while a reply plays) drop
        it, so 210 kB vanished and the Enter after it forced a token. A dialog's own box
        (save, chain) keeps its pastes."""
        if event.is_forwarded or len(self.screen_stack) > 1:
            return False
        if isinstance(self.focused, Input):
            return False  # the chat box itself, as usual
        chat = self.main.query_one("#chat", ChatInput)
        # Now, not at the next message: the keys after the paste (its Enter) go to the box.
        self.main.set_focus(chat)
        chat._forward_event(event)
        if event.text and "\n" not in event.text and "\r" not in event.text:
            self._say(
                f"Pasted {len(event.text):,} characters into the chat box (the focus was on "
                "the controls). Enter sends it; Esc goes back to the controls."
            )
        return True

    def on_key(self, event: events.Key) -> None:
        """A printable key with no meaning on the controls starts a message instead."""
        chat = self.main.query_one("#chat", Input)
        if chat.has_focus or len(self.screen_stack) > 1:
            return
        if isinstance(self.focused, AttentionPane) and event.key in _ATTENTION_KEYS:
            return  # the attention pane's own keys ([ and ] change the layer)
        if event.is_printable and event.character and event.key not in STAGE_KEY_NAMES:
            chat.focus()
            chat.insert_text_at_cursor(event.character)
            event.stop()
