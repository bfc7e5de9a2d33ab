"""What a terminal sees while ``tokenstep compare`` runs: one progress line on stderr, and no
echo of the keys typed meanwhile.

A run can take minutes (1,229 positions with B at ``-ub 1``: 3.5 on two cores) and prints only
at the end, so :class:`Progress` writes "compare: 340 of 1,229 positions, 12 s" to a terminal's
stderr, overwritten with ``\\r`` at most every ``every`` seconds and erased at the end (nothing
where stderr is not a terminal). The terminal is in cooked mode meanwhile, so a typed key
echoes raw (``^[[6~``) and waits for whatever reads next: :func:`quiet_keys` turns echo off
for the run, throws the typed bytes away and always restores the settings; Ctrl-C still
interrupts (``ISIG`` stays), and :mod:`tui.engine.model.interrupt` makes sure a Ctrl-C at any
moment ends the run.
"""

from __future__ import annotations

import termios
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO


class Progress:
    """Counts compared positions against the total the run announces with :meth:`start`.

    Positions arrive a window at a time (both sides decode ``-b`` tokens, then the window's
    rows are compared), and with B at ``-ub 1`` one window can take a minute; with ``tick`` a
    thread of its own redraws the line every ``tick`` seconds meanwhile, so the seconds run on.
    It only writes the line: no llama.cpp context is touched off the run's thread."""

    def __init__(
        self,
        stream: TextIO,
        clock: Callable[[], float] = time.monotonic,
        every: float = 0.1,
        tick: float | None = None,
    ) -> None:
        self.stream = stream
        self.clock = clock
        self.every = every
        self.tick = tick
        self.t0 = clock()
        self.total: int | None = None
        self.done = 0
        self.last = -float("inf")
        self.shown = False
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.ticker: threading.Thread | None = None

    def start(self, total: int) -> None:
        with self.lock:
            self.total, self.done = total, 0
            self.show(force=True)
        if self.tick is not None and self.ticker is None:
            self.ticker = threading.Thread(target=self._tick, name="compare-progress", daemon=True)
            self.ticker.start()

    def _tick(self) -> None:
        assert self.tick is not None
        while not self.stopped.wait(self.tick):
            with self.lock:
                self.show(force=True)

    def step(self, _position: Any = None) -> None:
        with self.lock:
            self.done += 1
            self.show(force=self.done == self.total)

    def line(self, now: float) -> str:
        return f"compare: {self.done:,} of {self.total or 0:,} positions, {now - self.t0:.0f} s"

    def show(self, *, force: bool = False) -> None:
        now = self.clock()
        if self.total is None or (not force and now - self.last < self.every):
            return
        self.last = now
        self.stream.write("\r" + self.line(now) + "\x1b[K")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        """Stop the ticker and erase the line (the cursor back at its start), if one was
        written."""
        self.stopped.set()
        if self.ticker is not None:
            self.ticker.join()
        with self.lock:
            if self.shown:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
                self.shown = False


def is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, OSError, ValueError):  # closed, or not a file at all
        return False


@contextmanager
def quiet_keys(stream: Any) -> Iterator[None]:
    """Echo off on ``stream``'s terminal for the block (nothing when it is not a terminal);
    the keys typed meanwhile are dropped and the settings restored, whatever ends the block."""
    if not is_tty(stream):
        yield
        return
    fd = stream.fileno()
    saved = termios.tcgetattr(fd)
    quiet = termios.tcgetattr(fd)
    quiet[3] &= ~termios.ECHO  # lflag; ICANON and ISIG stay: Ctrl-C still interrupts
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcflush(fd, termios.TCIFLUSH)  # what was typed meanwhile was for no one
        termios.tcsetattr(fd, termios.TCSANOW, saved)
