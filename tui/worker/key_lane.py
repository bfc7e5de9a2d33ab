"""The key lane: a sampler key answered while a decode is in flight.

A sampler key (temperature, top-k, top-p, min-p, greedy, seed, the chain keys) only re-runs
the sampler chain on logits the session already holds: the settings, the chain's own
token-data buffer and a NumPy row, never the llama context. So it need not wait for the
``llama_decode`` in flight (13 ms a token on one decode thread here, the most of a key's
latency once measured). The decode thread holds the worker's state lock for everything it does
except the ``llama_decode`` call itself, where the engine's ``decode_gate`` lets the lock go
(and llama.cpp lets the GIL go). This lane's thread waits for that lock, takes the sampler
commands at the head of the queue (order with every other command is kept), runs them and
publishes their view, and gives the lock back. The context is still touched by one thread
only: the decode thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from .commands import Adjust, ChainEdit, Command, Greedy, Seed

if TYPE_CHECKING:
    from .thread import Worker

SAMPLER_KEYS = (Adjust, Greedy, Seed, ChainEdit)


class KeyLane:
    def __init__(self, w: Worker) -> None:
        self.w = w
        self.lock = threading.Lock()  # the session's state: held by whoever works on it
        self.held = False  # the decode thread holds ``lock`` (and may lend it for a decode)
        # Lent out for a decode: the logits the session holds already gave the token in flight,
        # so a view built now must not call its preview on them the next step's pick.
        self.in_decode = False
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
            self.held = True
            try:
                yield
            finally:
                self.held = False

    @contextmanager
    def decoding(self) -> Iterator[None]:
        """The engine's ``decode_gate``: the lock is lent out while llama_decode runs."""
        lend = self.held and threading.current_thread() is self.w.thread
        if lend:
            self.held, self.in_decode = False, True
            self.lock.release()
        try:
            yield
        finally:
            if lend:
                self.lock.acquire()
                self.held, self.in_decode = True, False

    def _take(self) -> Command | None:
        """The sampler command at the head of the queue, removed (None if the head is not
        one): a key pressed after a rewind must still run after it."""
        q = self.w.commands_queue
        with q.mutex:
            if q.queue and isinstance(q.queue[0], SAMPLER_KEYS):
                cmd = q.queue.popleft()
                return cmd
        return None

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stop:
                return
            with self.lock:
                while not self._stop and (cmd := self._take()) is not None:
                    self.w.run_now(cmd)
