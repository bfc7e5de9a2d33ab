"""What a terminal sees while ``tokenstep compare`` runs: one progress line on stderr, and no
echo of the keys typed meanwhile.

A run can take minutes (1,229 positions with B at ``-ub 1``: 3.5 on two cores) and prints only
at the end, so :class:`Progress` writes "compare: 340 of 1,229 positions, 12 s" to a terminal's
stderr, overwritten with ``\\r`` at most every ``every`` seconds and erased at the end (nothing
where stderr is not a terminal). The terminal is in cooked mode meanwhile, so a typed key
echoes raw (``^[[6~``) and waits for whatever reads next: :func:`quiet_keys` turns echo off
for the run, throws the typed bytes away and always restores the settings; Ctrl-C still
interrupts (``ISIG`` stays), and :class:`CtrlC` makes sure a Ctrl-C at any moment ends the run.
"""

from __future__ import annotations

import os
import signal
import termios
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
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


# Modules whose functions llama.cpp calls back through ctypes: a raise there is dropped.
CALLBACK_MODULES = ("tui.engine.model.llama_log", "tui.engine.observe.graph_tap")


def in_callback(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside a function llama.cpp called back (its log)."""
    while frame is not None:
        if frame.f_globals.get("__name__") in CALLBACK_MODULES:
            return True
        frame = frame.f_back
    return False


class CtrlC:
    """Ctrl-C seen at the run's own checkpoints as well as where Python raises it.

    CPython's C-level handler marks SIGINT and leaves the Python handler to the main thread's
    next bytecode, and two things can lose it there. While a model loads, llama.cpp calls its
    log back through ctypes some 3,200 times; the next bytecode is often in that callback, and
    ctypes prints a ``KeyboardInterrupt`` raised there as "Exception ignored" with a traceback
    and drops it. So the handler set here records the Ctrl-C and raises only outside such a
    callback. And a SIGINT the kernel hands to another thread (a ggml OpenMP worker, the
    progress ticker) may, on Python 3.11, not wake the main thread's check at all; the C
    handler still writes the signal's number to the wakeup fd, whichever thread it runs on.
    :meth:`check` (called before the first position, at each one and after the run) raises
    what either recorded. Only on the main thread, and only over Python's default handler;
    elsewhere it does nothing."""

    def __init__(self) -> None:
        self.r = self.w = -1
        self.old_fd = -1
        self.old_handler: Any = None
        self.hit = False

    def handler(self, _signum: int, frame: FrameType | None) -> None:
        self.hit = True
        if not in_callback(frame):
            raise KeyboardInterrupt

    def __enter__(self) -> CtrlC:
        main = threading.current_thread() is threading.main_thread()
        if main and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self.r, self.w = os.pipe()
            os.set_blocking(self.r, False)
            os.set_blocking(self.w, False)
            self.old_fd = signal.set_wakeup_fd(self.w, warn_on_full_buffer=False)
            self.old_handler = signal.signal(signal.SIGINT, self.handler)
        return self

    def check(self) -> None:
        if self.r >= 0 and not self.hit:
            try:
                self.hit = signal.SIGINT in os.read(self.r, 4096)
            except BlockingIOError:
                pass
        if self.hit:
            raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        if self.r >= 0:
            signal.signal(signal.SIGINT, self.old_handler)
            signal.set_wakeup_fd(self.old_fd)
            os.close(self.r)
            os.close(self.w)
            self.r = self.w = -1
