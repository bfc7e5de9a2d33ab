"""Key floods: a paste the terminal did not bracket arrives as one key press per character.

212 kB pasted that way is about 200,000 Key events: one by one they stall the screen for
minutes, grow memory to 1.4 GB and queue Ctrl+Q behind them. :class:`KeyGate` sits between the
terminal driver's parser and the app's queue (on the driver's input thread). Once
:data:`FLOOD` keys wait unhandled it gathers characters into one text, drops and counts other
keys, and the app pastes the text into the chat box in one go (:meth:`KeyGate.taken`). Quit
keys always pass. Each key typed into a box holding 200 kB costs Textual's Input a pass over
the value (over 100 ms on a loaded 2-core machine), so once a quit is asked for
(:meth:`KeyGate.quit`) the gate keeps no more keys and the app skips those still queued.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from textual import events
from textual.message import Message

FLOOD = 64  # keys waiting unhandled: far more than anyone types ahead
QUIT_KEYS = frozenset({"ctrl+q", "ctrl+c"})
_MARK = "_tokenstep_gated"  # set on the Key events the gate let through


@dataclass(frozen=True)
class Flood:
    """What the gate kept during one flood."""

    text: str  # the characters, line breaks as "\n"
    keys: int  # key presses kept (characters and dropped keys)
    dropped: int  # keys that are not text: ESC, arrows, function keys


class KeyGate:
    def __init__(self, limit: int = FLOOD) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._sent = 0  # keys let through ...
        self._taken = 0  # ... and keys of those the app has handled
        self._text: list[str] = []
        self._keys = 0
        self._dropped = 0
        self.quitting = False  # a quit was asked for: keys no longer matter

    def quit(self) -> None:
        """A quit is on its way (any thread): drop every key from now on."""
        self.quitting = True

    def admit(self, message: Message) -> bool:
        """On the driver's thread: True to send ``message`` on now, False when the gate keeps
        it (a key of a flood)."""
        if not isinstance(message, events.Key):
            return True
        if self.quitting:
            return False
        with self._lock:
            flooding = self._keys > 0 or self._sent - self._taken >= self.limit
            if not flooding or message.key in QUIT_KEYS:
                self._sent += 1
                setattr(message, _MARK, True)
                return True
            self._keys += 1
            if message.key == "enter":
                self._text.append("\n")
            elif message.key == "tab":
                self._text.append(" ")
            elif message.is_printable and message.character:
                self._text.append(message.character)
            else:
                self._dropped += 1
            return False

    def taken(self, event: events.Key) -> Flood | None:
        """On the app's thread, for every Key event it handles: once the keys the gate let
        through are all handled, what it kept meanwhile (None: nothing)."""
        if not getattr(event, _MARK, False):
            return None  # not from the driver (a test's pilot, a forwarded copy)
        with self._lock:
            self._taken += 1
            if self._sent > self._taken or not self._keys:
                return None
            flood = Flood("".join(self._text), self._keys, self._dropped)
            self._text, self._keys, self._dropped = [], 0, 0
            return flood


def describe(flood: Flood) -> str:
    chars = len(flood.text)
    dropped = f"; {flood.dropped:,} other keys (ESC, arrows) were dropped" if flood.dropped else ""
    return (
        f"{flood.keys:,} key presses came in faster than they could be handled (a paste "
        f"without bracketed paste?): {chars:,} characters went into the chat box as one "
        f"paste{dropped}."
    )


def gate_driver(driver: Any, on_quit: Callable[[], object] | None = None) -> KeyGate:
    """Put a gate between ``driver``'s parser and the app's queue, and (under textual's web
    driver, a served tab) let its quit packet tell the gate at once, on the input thread, before
    the ExitApp it posts waits behind the queued keys; ``on_quit`` runs there too (the app
    asks its decode thread to stop and autosave, without waiting for it: on a loaded machine
    the screen thread took over 7 s to reach the ExitApp, past the server's grace)."""
    gate = KeyGate()
    send = driver.process_message

    def gated(message: Message) -> None:  # the driver's input thread
        if gate.admit(message):
            send(message)

    driver.process_message = gated
    # The input thread hands every in-band packet to ``_on_meta`` as ("M", its JSON bytes),
    # which reads the JSON and calls ``on_meta`` with its type: "quit" is seen there. (Wrapped
    # at ``_on_meta`` and compared with "quit", the gate never heard of a quit: the keys queued
    # before it each still cost a pass over a 200 kB chat box, and a closed tab's quit reached
    # on_unmount 3.6 s after its packet on a loaded 2-core machine, 5 s after the close.)
    on_meta = getattr(driver, "on_meta", None)
    if on_meta is not None:

        def meta(packet_type: str, payload: dict[str, object]) -> None:  # the input thread
            if packet_type == "quit":
                gate.quit()
                if on_quit is not None:
                    on_quit()
            on_meta(packet_type, payload)

        driver.on_meta = meta
    return gate
