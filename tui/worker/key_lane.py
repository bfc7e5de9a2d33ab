"""The key lane: a sampler key answered while a step's ``llama_decode`` is in flight.

A sampler key only re-runs the chain on logits the session holds, so it need not wait for the
decode (13 ms a token here, most of a key's latency when measured). It touches plain Python
state, llama.cpp's sampler objects (``llama_sampler_apply``/``clone``/``accept``/``reset``/
``free``, ``llama_sampler_init_*``; a preview runs on clones so the RNG does not advance) and
the read-only vocabulary, never the ``llama_context``, which only the decode thread touches.
The decode thread holds the state lock for every command (:meth:`KeyLane.working`) and lends
it only around a single-token step's ``llama_decode`` (:meth:`KeyLane.lendable`), never during
a prefill, a context shift or a re-decode. The lane runs only while the lock is lent, and only
the sampler keys at the head of the queue, so press order is kept; a failure is noted and the
lane waits for the next key.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .commands import Adjust, ChainEdit, Command, Greedy, Seed

SAMPLER_KEYS = (Adjust, Greedy, Seed, ChainEdit)


class KeyLane:
    """The state lock, its lending during a step's decode, and the thread that answers
    sampler keys meanwhile. ``answer`` handles one command and publishes its view (the
    caller holds the lock); ``failed`` is told of an exception ``answer`` let through."""

    def __init__(
        self,
        commands: queue.Queue[Command],
        answer: Callable[[Command], None],
        failed: Callable[[BaseException], None],
    ) -> None:
        self.commands = commands
        self._answer = answer
        self._failed = failed
        self.lock = threading.Lock()  # the session's state: held by whoever works on it
        self.held = False  # the decode thread holds ``lock`` (and may lend it for a decode)
        self._holder: threading.Thread | None = None
        self._window = False  # the holder is in a single-token step: its decode may be lent
        # Lent out for a decode: the logits the session holds already gave the token in flight,
        # so a view built now must not call its preview on them the next step's pick.
        self.in_decode = False
        self.wakes = 0  # wakes the lane has finished (a test waits for the lane to have looked)
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tokenstep-keys", daemon=True)
        self._thread.start()

    def offer(self, cmd: Command) -> None:
        """A command was queued: if it is a sampler key, wake the lane."""
        if isinstance(cmd, SAMPLER_KEYS):
            self._wake.set()

    def stop(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5.0)

    @contextmanager
    def working(self) -> Iterator[None]:
        """The decode thread's hold on the state for one command or one step."""
        with self.lock:
            self.held, self._holder = True, threading.current_thread()
            try:
                yield
            finally:
                self.held, self._holder = False, None

    @contextmanager
    def lendable(self) -> Iterator[None]:
        """Around the feed of one picked token: the state is whole, the decode may be lent."""
        was, self._window = self._window, True
        try:
            yield
        finally:
            self._window = was

    @contextmanager
    def decoding(self) -> Iterator[None]:
        """The engine's ``decode_gate``: the lock is lent out while llama_decode runs, if the
        decode thread holds it and is inside :meth:`lendable`."""
        lend = self._window and self.held and threading.current_thread() is self._holder
        if lend:
            self.held, self.in_decode = False, True
            self.lock.release()
            if self._key_first():  # pressed before the lend: answered now, not after the decode
                self._wake.set()
        try:
            yield
        finally:
            if lend:
                self.lock.acquire()
                self.held, self.in_decode = True, False

    def _key_first(self) -> bool:
        q = self.commands
        with q.mutex:
            return bool(q.queue) and isinstance(q.queue[0], SAMPLER_KEYS)

    def _take(self) -> Command | None:
        """The sampler command at the head of the queue, removed (None if the head is not
        one): a key pressed after a rewind must still run after it."""
        q = self.commands
        with q.mutex:
            if q.queue and isinstance(q.queue[0], SAMPLER_KEYS):
                cmd: Command = q.queue.popleft()
                return cmd
        return None

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stop:
                return
            with self.lock:
                # Not lent: the decode thread is between commands (or took one and waits for
                # the lock); it takes the keys itself, in their order.
                while not self._stop and self.in_decode and (cmd := self._take()) is not None:
                    try:
                        self._answer(cmd)
                    except Exception as exc:  # never die in silence: say it, take the next
                        self._failed(exc)
            self.wakes += 1
