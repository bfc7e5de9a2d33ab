"""Playback: where the reply is, and whether the worker steps it on its own, as one small machine.

Two things the panes show, each changed only by a transition named after what happened:

- ``activity``: ``idle`` (no reply yet: send a message), ``generating`` (a reply is open: a step
  decodes its next token), ``done`` (the loop stopped: an end-of-generation token or a full
  context; a rewind, a jump or a fork opens it again).
- ``mode``: ``autoplay`` (the worker steps while its queue is empty) or ``step`` (one → is one
  ``llama_decode``). Rewinding, forcing, forking, jumping and every error go to step mode: autoplay
  would resample at once, or repeat the same failure in a loop.

``busy`` is the slow command under way (a re-prefill, verify), said before it starts.
The worker thread plays while ``playing``: autoplay and a reply open.
"""

from __future__ import annotations

MODES = ("autoplay", "step")
ACTIVITIES = ("idle", "generating", "done")


class Playback:
    """One chat's playback: mode, activity, the slow command under way."""

    def __init__(self, mode: str = "autoplay") -> None:
        if mode not in MODES:
            raise ValueError(mode)
        self._mode = mode
        self._activity = "idle"
        self._busy: str | None = None
        self._reason: str | None = None

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def activity(self) -> str:
        return self._activity

    @property
    def busy(self) -> str | None:
        return self._busy

    @property
    def reason(self) -> str | None:
        """Why the reply ended (the engine's stop reason; None while it is open)."""
        return self._reason

    @property
    def playing(self) -> bool:
        return self._mode == "autoplay" and self._activity == "generating"

    # -- the reply ---------------------------------------------------------------------------
    def start_reply(self) -> None:
        """A message was sent (or a session resumed with its reply open): a reply is open."""
        self._activity, self._reason = "generating", None

    def reopen(self) -> None:
        """A rewind, a jump to a path not taken, or a fork: the reply goes on from there."""
        self._activity, self._reason = "generating", None

    def end(self, reason: str | None) -> None:
        """The loop stopped: an end-of-generation token, a full context, every sequence."""
        self._activity, self._reason = "done", reason

    def idle(self) -> None:
        """No reply open (a resumed session that ended on the user's message)."""
        self._activity, self._reason = "idle", None

    # -- the mode ----------------------------------------------------------------------------
    def pause(self) -> None:
        """Step mode: each → is one decode."""
        self._mode = "step"

    def play(self) -> None:
        """Autoplay: the worker steps on its own while no command waits."""
        self._mode = "autoplay"

    # -- a slow command ----------------------------------------------------------------------
    def begin(self, what: str) -> None:
        self._busy = what

    def finish(self) -> None:
        self._busy = None
