"""Ctrl-C never lost: recorded where raising it would be dropped, raised at the next safe point.

Python runs its SIGINT handler at the main thread's next bytecode. llama.cpp calls its log
back through ctypes (``llama_log``) 1,190 times while SmolLM2 loads and 1,143 while a context
is made, and the eval callback per graph node (``observe.graph_tap``); a ``KeyboardInterrupt``
raised in such a callback is printed by ctypes ("Exception ignored") and dropped. And a
SIGINT handed to a ggml thread may not wake the main thread at all on Python 3.11; the C
handler still writes to the wakeup fd. So :func:`guard` (``tui.cli.main`` holds one) sets a
handler that raises outside a callback and records inside one (:func:`called_from_c`), plus
a wakeup fd; :func:`check` raises either, and the engine checks after each model load and
context creation and before each ``llama_decode``. :func:`hand_over` checks once more and
gives the handlers back before an event loop with its own takes over. Main thread only.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import CodeType, FrameType
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_from_c: set[CodeType] = set()


def called_from_c(fn: F) -> F:
    """Register ``fn`` as a function C code calls back through ctypes (a raise there is
    dropped); returns it unchanged."""
    _from_c.add(fn.__code__)
    return fn


def in_callback(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside a function llama.cpp called back."""
    while frame is not None:
        if frame.f_code in _from_c:
            return True
        frame = frame.f_back
    return False


class Guard:
    """The SIGINT handler and wakeup fd of one :func:`guard` block."""

    def __init__(self) -> None:
        self.r = self.w = -1
        self.old_fd = -1
        self.old_handler: Any = None
        self.hit = False

    def handler(self, _signum: int, frame: FrameType | None) -> None:
        self.hit = True
        if not in_callback(frame):
            raise KeyboardInterrupt

    def install(self) -> bool:
        main = threading.current_thread() is threading.main_thread()
        if not main or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return False
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        os.set_blocking(self.w, False)
        self.old_fd = signal.set_wakeup_fd(self.w, warn_on_full_buffer=False)
        self.old_handler = signal.signal(signal.SIGINT, self.handler)
        return True

    def check(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # a KeyboardInterrupt belongs to the main thread
        if self.r >= 0 and not self.hit:
            try:
                self.hit = signal.SIGINT in os.read(self.r, 4096)
            except BlockingIOError:
                pass
        if self.hit:
            raise KeyboardInterrupt

    def close(self) -> None:
        if self.r >= 0:
            signal.signal(signal.SIGINT, self.old_handler)
            signal.set_wakeup_fd(self.old_fd)
            os.close(self.r)
            os.close(self.w)
            self.r = self.w = -1


_active: list[Guard] = []  # the one guard in force, if any


@contextmanager
def guard() -> Iterator[None]:
    """Ctrl-C recorded and checked for the block; inside another guard, that one serves."""
    if _active:
        yield
        return
    g = Guard()
    if not g.install():
        yield
        return
    _active.append(g)
    try:
        yield
    finally:
        if _active and _active[0] is g:
            _active.clear()
        g.close()


def check() -> None:
    """Raise ``KeyboardInterrupt`` if a Ctrl-C came since the guard began (main thread)."""
    if _active:
        _active[0].check()


def hand_over() -> None:
    """:func:`check` once more, then give the handlers back: an event loop with its own
    takes Ctrl-C from here on."""
    if _active:
        g = _active[0]
        g.check()
        _active.clear()
        g.close()
