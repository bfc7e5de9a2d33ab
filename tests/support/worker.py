"""A started worker on the shared model and a wait for its views."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest

from tui.engine import SamplerSettings
from tui.worker import View, Worker


def wait(c: Worker, pred: Callable[[View], bool], what: str, timeout: float = 120) -> View:
    """Poll like the app does: ``take`` marks each view as drawn, so the worker keeps
    publishing during autoplay."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = c.take()
        if v is not None and pred(v):
            return v
        time.sleep(0.01)
    raise AssertionError(
        f"timed out waiting for {what}; last notice: {c.latest and c.latest.notice}"
    )


def gate_decodes(w: Worker, gate: Callable[[], AbstractContextManager[object]]) -> None:
    """Enter ``gate`` around each llama_decode of ``w``'s local session, in place of the key
    lane's (a test's gate wraps ``w.lane.decoding`` to act while the decode is held)."""
    local = w.engine.local
    assert local is not None, "a server decodes in its own process: no decode to gate"
    local.gate_decodes(gate)


@pytest.fixture
def make_worker(make_engine, tmp_path):
    made: list[Worker] = []

    def make(autoplay: bool = False, settings: SamplerSettings | None = None, **config) -> Worker:
        c = Worker(
            make_engine(settings, **config),
            autoplay=autoplay,
            autosave_dir=tmp_path / "autosave",
            close_engine=False,
        )
        c.start()
        made.append(c)
        return c

    yield make
    for c in made:
        assert c.stop()
        assert c.error is None, c.error


def playing_worker(make_engine) -> Worker:
    w = Worker(make_engine(SamplerSettings(temp=0.8, seed=5)), autoplay=False)
    w.start()
    w.send("Tell me about the sea.")
    wait(w, lambda v: v.activity == "generating" and v.logits.candidates != (), "the prefill")
    return w
