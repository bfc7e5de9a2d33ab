"""Observation off the critical path: a step's views computed while the next decode runs.

The pick needs only the sampler chain. The rest of what a record shows about its row (the top
candidates, the entropy, the pick's p, the run record's ``Pick``) is arithmetic on a NumPy
copy of the row, so one worker thread does it while ``llama_decode`` runs (ctypes releases
the GIL), as vLLM's async output processing (PR #7049) overlaps output with the next forward
pass. The worker touches copied arrays only, never the llama context.

Inline (the default), a job runs at once on the caller's thread. Threaded, jobs run in order
through a bounded queue (back-pressure), and the decoder settles them before it notes the next
decode, so the run record stays in order and no record is read half-observed. Both modes give
equal records, bit for bit (``tests/engine/run/test_overlap.py``).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sized

from ..model.errors import TokenstepError

QUEUE_MAX = 8  # jobs waiting at most: a step gives one, so the decoder is never far ahead


class Overlap:
    """The observation jobs of one engine: inline, or on one worker thread."""

    def __init__(self) -> None:
        self._q: queue.Queue[Callable[[], object] | None] | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._deferred: list[Callable[[], object]] = []  # rows decoded, not yet given to the worker

    @property
    def threaded(self) -> bool:
        return self._thread is not None

    def start(self, observers: Sized = ()) -> None:
        """From now on, run jobs on a worker thread. Not with decode observers: their extras
        belong to the decode that just ran, and a record read after the next one would not
        find them as they were (trace --lens reads its capture at each record)."""
        if len(observers):
            raise TokenstepError("observation stays on the decode thread with decode observers.")
        if self._thread is None:
            self._q = queue.Queue(maxsize=QUEUE_MAX)
            self._thread = threading.Thread(target=self._run, name="observe", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Run what is left, then go back to inline (a stopped thread leaves nothing behind)."""
        if self._thread is None or self._q is None:
            return
        self.settle()
        self._q.put(None)
        self._thread.join()
        self._thread, self._q = None, None

    def defer(self, job: Callable[[], object]) -> None:
        """A job that may wait for the next :meth:`submit` or :meth:`settle` (a decoded row's
        views: the pick that follows goes first, so the next decode starts sooner)."""
        if self._thread is None:
            job()
        else:
            self._deferred.append(job)

    def submit(self, job: Callable[[], object]) -> None:
        """Run ``job`` after every job given before it: now when inline, else on the worker."""
        if self._thread is None or self._q is None:
            job()
            return
        for earlier in self._take_deferred():
            self._q.put(earlier)
        self._q.put(job)

    def _take_deferred(self) -> list[Callable[[], object]]:
        jobs, self._deferred = self._deferred, []
        return jobs

    def settle(self) -> None:
        """Wait until every job given so far has run; a job's error is raised here."""
        if self._q is not None:
            for job in self._take_deferred():
                self._q.put(job)
            self._q.join()
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _run(self) -> None:
        q = self._q
        assert q is not None
        while True:
            job = q.get()
            try:
                if job is None:
                    return
                if self._error is None:  # after an error the rest are skipped until settled
                    job()
            except BaseException as exc:  # handed to the decode thread at the next settle
                self._error = exc
            finally:
                q.task_done()
