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
        self.dirty = False  # a view was skipped: one is owed when the worker goes idle
        self._built_at = 0.0

    @property
    def latest(self) -> View | None:
        return self._latest

    def owe(self) -> None:
        """The state changed; its view is built later (during autoplay: by the key lane's
        thread while the next decode runs, :mod:`.autoplay`)."""
        self.dirty = True

    def owed(self) -> bool:
        """A view is owed and :meth:`publish` would build it now."""
        with self._lock:
            return self.dirty and self._taken and not self._too_soon()

    def _too_soon(self) -> bool:
        return time.monotonic() - self._built_at < MIN_VIEW_INTERVAL

    def take(self) -> View | None:
        """The latest view (called by the UI thread; marks it as taken)."""
        with self._lock:
            self._taken = True
            return self._latest

    def publish(self, *, force: bool) -> None:
        """Build and hand over a view, unless the UI is still busy with the previous one (or
        the last was built less than ``MIN_VIEW_INTERVAL`` ago) and ``force`` is not set."""
        with self._lock:
            if not force and (not self._taken or self._too_soon()):
                self.dirty = True
                return
        self._built_at = time.monotonic()
        try:
            view: View | None = self._build()
        except Exception as exc:  # the worker goes on; the screen says what went wrong
            view = self.failure(f"Internal error while building the view: {_said(exc)}")
        self._hand_over(view)

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
            self.dirty = False
        if self.on_view is not None:
            self.on_view(view)


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
