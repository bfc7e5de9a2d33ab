"""The views handed to the UI: the latest one, whether the UI took it, and the pacing.

A view is built only when the UI has taken the previous one (or when forced: a command's
answer), at most 30 times a second during autoplay, so a slow screen never slows the decode
loop. A failure while building a view never ends the thread that builds it: the last view is
handed over again with the failure as its notice.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable

from .views import View

MIN_VIEW_INTERVAL = 1 / 30  # during autoplay, views are built at most 30 times a second
# A slow command's progress (the observer's replay, the lens's head read) goes out in a view at
# most this often: ten a second is smooth to read and costs a view build (2 to 9 ms) per tenth.
PROGRESS_INTERVAL = 0.1
# The last figure (N of N) waits at most this long for the UI to take its view before the
# command goes on, so the view after it (the weights) does not replace it unseen.
LAST_PROGRESS_WAIT = 1.0


class Publisher:
    """Owns the latest view. ``build`` makes a view of the state now; ``with_notice`` makes
    the last view again with an error notice (None without one); ``failed`` is told the
    notice and the traceback of a failure."""

    def __init__(
        self,
        build: Callable[[], View],
        with_notice: Callable[[View | None, str], View | None],
        failed: Callable[[str, str], None],
        on_view: Callable[[View], None] | None = None,
    ) -> None:
        self._build, self._with_notice, self._failed = build, with_notice, failed
        self.on_view = on_view  # called on the building thread: it must only hand the view over
        self._lock = threading.Lock()
        self._latest: View | None = None
        self._taken = True  # the UI has taken the latest view
        self._taken_event = threading.Event()  # set with _taken, for wait_taken
        self._taken_event.set()
        self.dirty = False  # a view was skipped: one is owed when the worker goes idle
        self._built_at = 0.0
        self._progress_at = 0.0  # when the last progress view went out
        self._building = False  # a view is being built (a view never builds another)

    @property
    def latest(self) -> View | None:
        return self._latest

    def take(self) -> View | None:
        """The latest view (called by the UI thread; marks it as taken)."""
        with self._lock:
            self._taken = True
            self._taken_event.set()
            return self._latest

    def wait_taken(self, timeout: float) -> bool:
        """Wait until the UI has taken the latest view, at most ``timeout`` seconds."""
        return self._taken_event.wait(timeout)

    def publish(self, *, force: bool) -> None:
        """Build and hand over a view, unless the UI is still busy with the previous one (or
        the last was built less than ``MIN_VIEW_INTERVAL`` ago) and ``force`` is not set."""
        with self._lock:
            too_soon = time.monotonic() - self._built_at < MIN_VIEW_INTERVAL
            if not force and (not self._taken or too_soon):
                self.dirty = True
                return
        self._built_at = time.monotonic()
        self._building = True
        try:
            view: View | None = self._build()
        except Exception as exc:  # the worker goes on; the screen says what went wrong
            view = self.failure(f"Internal error while building the view: {_said(exc)}")
        finally:
            self._building = False
        self._hand_over(view)

    def progress(self, *, last: bool) -> None:
        """A slow command moved on: a view at most every :data:`PROGRESS_INTERVAL`; the
        ``last`` figure always, and then the UI (if any) gets up to
        :data:`LAST_PROGRESS_WAIT` to take it. Work a view's build does itself (a pane's
        replay) sends none: that view is still being made."""
        now = time.monotonic()
        if self._building or (not last and now - self._progress_at < PROGRESS_INTERVAL):
            return
        self._progress_at = now
        self.publish(force=True)
        if last and self.on_view is not None:
            self.wait_taken(LAST_PROGRESS_WAIT)

    def report(self, exc: BaseException) -> None:
        """Hand over the last view with ``exc`` as its notice (a failure outside a command)."""
        try:
            self._hand_over(self.failure(f"Internal error: {_said(exc)}"))
        except Exception:  # the hand-over itself failed: the traceback is kept by ``failed``
            pass

    def failure(self, text: str) -> View | None:
        """Tell ``failed`` (with the traceback being handled); the last view, saying ``text``."""
        self._failed(text, traceback.format_exc())
        return self._with_notice(self._latest, text)

    def _hand_over(self, view: View | None) -> None:
        if view is None:
            return
        with self._lock:
            self._latest = view
            self._taken = False
            self._taken_event.clear()
            self.dirty = False
        if self.on_view is not None:
            self.on_view(view)


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
