"""The worker's one observer context: what attention, the lens, its grid and the surprise map
ask of it, and when it must be made anew (worker thread only).

The panes never make the engine's context see more: they say what they want
(:class:`~tui.engine.observe.observer_context.Wants`) and read an
:class:`~tui.engine.observe.observer_context.ObserverContext` of its own, which replays the engine's
decode calls. Something new to capture over the history (a layer, attention at all, the grid,
the scored prompt) means a new observer context that replays everything since the last clear;
something dropped is dropped in place. A replay run by :meth:`Observers.fill` and the lens's
head read say how far they are (the replay's own counts, the bytes read) in views sent at most
every :data:`~tui.worker.publisher.PROGRESS_INTERVAL`, from this same thread. Nothing here imports
Textual or Rich.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING

from ..engine.model.errors import TokenstepError
from ..engine.observe.attention_capture import AttentionCapture
from ..engine.observe.lens_capture import LensCapture
from ..engine.observe.observer_context import ObserverContext, ReplayProgress, Wants

if TYPE_CHECKING:
    from ..engine.model.lens import LensHead
    from ..engine.run.session import Engine
    from .parts import WorkerParts


def mib_of(done: int, total: int) -> str:
    """``12.0 of 28.7 MiB``."""
    return f"{done / (1 << 20):.1f} of {total / (1 << 20):.1f} MiB"


class Observers:
    """Owns the observer context (None while nothing wants one)."""

    def __init__(self, worker: WorkerParts) -> None:
        self.w = worker
        self.ctx: ObserverContext | None = None
        self.wants = Wants()
        self._layers: set[int] = set()  # attention layers captured over the whole history
        # the lens's head, read once per run and kept (one head: n_vocab x n_embd float32)
        # while the lens is off, until the worker stops: its only holder (load_head keeps none)
        self._head: LensHead | None = None
        # The worker's thread once it runs: a view built on the key lane's thread (during the
        # run's llama_decode) reads the observer context as it is and never replays into it.
        self._owner: threading.Thread | None = None
        self._filling = False  # fill() is about to replay: its busy view must not do it first
        self.progress: ReplayProgress | None = None  # fill()'s replay under way: how far
        self.head_read: tuple[int, int] | None = None  # the head's read under way: bytes of all

    def owned_by(self, thread: threading.Thread) -> None:
        self._owner = thread

    def may_replay(self) -> bool:
        """Only the worker's thread touches the observer context (one thread per context),
        and a view built while :meth:`fill` starts or reports its progress reads it as it is
        (fill replays next, or is replaying)."""
        if self._filling or self.progress is not None:
            return False
        return self._owner is None or threading.current_thread() is self._owner

    @property
    def local(self) -> bool:
        """An observer context needs the model here (not over llama-server)."""
        return self.w.engine.capabilities.attention

    def missing(self) -> str | None:
        return self.w.engine.capabilities.missing("attention")

    def want(self, **changes: object) -> ObserverContext | None:
        """Change what the panes ask (fields of Wants); returns the context (None: none)."""
        new = dataclasses.replace(self.wants, **changes)  # type: ignore[arg-type]
        old, self.wants = self.wants, new
        if not new.any or not self.local:
            self.close(keep_head=True)  # the lens's head stays: a later 8 does not read it again
            return None
        again = (
            self.ctx is None
            or self.ctx.problem is not None
            or (bool(new.layers) and not old.layers)
            or not set(new.layers) <= self._layers
            or (new.grid and not old.grid)
            or (new.score and not old.score)
            or ((new.lens or new.census) and not isinstance(self.ctx.capture, LensCapture))
        )
        if again:
            self.rebuild()
        else:
            self._in_place()
        return self.ctx

    def rebuild(self, lens_from: int | None = None) -> None:
        """A new observer context: it replays everything since the engine's last clear."""
        self.close(keep_head=True)
        try:
            local = self.w.engine.local
            if local is None:  # attention, lens and scored prompts replay a local context
                raise TokenstepError(f"attention {self.w.engine.capabilities.missing('attention')}.")
            self.ctx = ObserverContext(local, self.wants, self._head, self._head_progress)
        except TokenstepError:
            self.wants = Wants()
            raise
        finally:
            self.head_read = None
        self.ctx.lens_from = lens_from
        self._layers = set(self.wants.layers)

    def _in_place(self) -> None:
        ctx = self.ctx
        assert ctx is not None
        ctx.wants = self.wants
        cap = ctx.capture
        if isinstance(cap, AttentionCapture):
            cap.set_layers(self.wants.layers)
            self._layers &= set(self.wants.layers)
        if cap is not None:
            cap.census_on = self.wants.census
        if isinstance(cap, LensCapture) and not (self.wants.lens or self.wants.grid):
            cap.set_grid(False)
            cap.set_lens(False)

    def ready(self) -> ObserverContext | None:
        """The context, caught up with the engine (its replays run here, on this thread)."""
        ctx = self.ctx
        if ctx is None:
            return None
        if self.may_replay():
            ctx.catch_up()  # not under busy(): that publishes a view, and views call this
        return ctx

    def fill(self, what: str) -> None:
        """Catch up now, showing ``what`` is being done (a command that made the context) and
        how far the replay is."""
        ctx = self.ctx
        if ctx is not None and ctx.pending() and self.may_replay():
            self._filling = True  # the view busy() publishes shows the replay under way
            try:
                with self.w.busy(
                    f"{what}: its own context replays the run's {ctx.pending()} operation(s)"
                ):
                    self._filling = False
                    ctx.catch_up(lambda p: self._replayed(what, p))
            finally:
                self._filling = False
                self.progress = None

    def _replayed(self, what: str, p: ReplayProgress) -> None:
        """The replay's counts so far: kept for the panes, and a view sent (paced)."""
        self.progress = p
        self.w.progress(f"{what}: its own context replays the run: {p.describe()}", last=p.done)

    def _head_progress(self, done: int, total: int) -> None:
        """The lens's head read so far (bytes of the matrix): kept for the pane, a view sent."""
        self.head_read = (done, total)
        self.w.progress(
            f"Loading the lens's output head from the GGUF: {mib_of(done, total)} read",
            last=done == total,
        )

    @property
    def head(self) -> LensHead | None:
        """The lens's head once read (kept while the observer context is made anew)."""
        return self._head

    @property
    def engine(self) -> Engine | None:
        return self.ctx.engine if self.ctx is not None else None

    def close(self, keep_head: bool = False) -> None:
        """Free the observer context (and, unless ``keep_head``, the lens's head: the worker
        keeps it while the observers are only off or made anew, and frees it when it stops)."""
        if self.ctx is not None:
            self._head = self.ctx.head or self._head
            self.ctx.close()
            self.ctx = None
        if not keep_head:  # the one holder of the head: nothing else keeps it alive
            self._head = None
        self._layers = set()
