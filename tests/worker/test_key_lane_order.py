"""The key lane's three promises, each held at a gate the test controls (no sleeps): a key
runs after every command pressed before it, no view shows a message half sent, and a failure
while answering a key is said in the notice line while the next key is still answered."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.support.serve_server import wait_for
from tests.support.worker import gate_decodes, playing_worker, wait
from tui.engine import SamplerSettings
from tui.worker import Worker
from tui.worker.commands import Step
from tui.worker.views import View

MESSAGE = "Tell me about the sea."


def test_a_step_queued_before_a_key_picks_with_the_old_setting(make_engine):
    w = Worker(make_engine(SamplerSettings(temp=0.8, seed=5)), autoplay=False)
    q, lent = w.commands_queue, w.lane.decoding
    real_get = q.get
    took, go = threading.Event(), threading.Event()

    def get(block: bool = True, timeout: float | None = None) -> Any:
        cmd = real_get(block, timeout)
        if isinstance(cmd, Step):  # taken off the queue, not yet run: the key is pressed now
            took.set()
            go.wait()
        return cmd

    q.get = get  # type: ignore[method-assign]  # before the decode thread first waits on it
    w.start()
    w.send(MESSAGE)
    wait(w, lambda v: v.activity == "generating" and v.logits.candidates != (), "the prefill")

    at_pick: list[float] = []

    @contextmanager
    def gate() -> Iterator[None]:
        # The step's decode: its token was picked with the settings as they are now.
        at_pick.append(w.engine.settings.temp)
        with lent():
            yield

    try:
        gate_decodes(w, gate)
        temp0 = w.latest.settings.temp  # type: ignore[union-attr]
        n0 = len(w.latest.text.tokens)  # type: ignore[union-attr]
        w.step()
        assert took.wait(60)
        looked = getattr(w.lane, "wakes", 0)
        w.adjust("temp", 1)  # queued behind the step the decode thread holds
        wait_for(
            lambda: w.queue_empty() or getattr(w.lane, "wakes", 0) > looked,
            "the lane to look at the key",
            timeout=60,
        )
        go.set()
        v = wait(w, lambda v: len(v.text.tokens) == n0 + 1 and v.settings.temp > temp0, "both")
        assert at_pick == [temp0]  # the step picked before the key changed the temperature
        assert v.logits.next_pick is not None
    finally:
        go.set()
        assert w.stop()
    assert w.error is None, w.error


def whole(v: View) -> bool:
    """Before the message: nothing; after it: the message, its tokens and the reply's start."""
    sent = any(m.role == "user" and m.content == MESSAGE for m in v.text.messages)
    if not sent:
        return v.text.tokens == () and v.text.reply_start is None
    return v.text.reply_start == len(v.text.tokens) and v.activity == "generating"


def test_no_view_shows_a_message_half_sent(make_engine):
    views: list[View] = []
    eng = make_engine(SamplerSettings(temp=0.8, seed=5), n_batch=8, n_ubatch=8)
    w = Worker(eng, autoplay=False, on_view=views.append)
    lent = w.lane.decoding
    free: list[bool] = []  # per prefill chunk: could another thread take the state lock?

    @contextmanager
    def gate() -> Iterator[None]:
        with lent():
            got = w.lane.lock.acquire(blocking=False)
            if got:
                w.lane.lock.release()
            free.append(got)
            if len(free) == 1:
                w.adjust("temp", 1)  # pressed during the first chunk of the prefill
            yield

    try:
        w.start()
        wait(w, lambda v: True, "the first view")
        gate_decodes(w, gate)
        w.send(MESSAGE)
        v = wait(w, lambda v: v.settings.temp > 0.8 and v.logits.candidates != (), "the key")
        assert len(free) >= 2  # a multi-chunk prefill (n_batch 8)
        assert not any(free)  # the lock was never lent during it: nothing could publish
        assert whole(v) and all(whole(x) for x in views), [
            (x.text.reply_start, len(x.text.tokens)) for x in views if not whole(x)
        ]
        assert "the sampler chain re-ran on the same logits" in v.notice
    finally:
        assert w.stop()
    assert w.error is None, w.error


def test_a_failure_in_a_keys_view_is_said_and_the_next_key_answered(make_engine):
    w = playing_worker(make_engine)
    lent = w.lane.decoding
    run = w.engine.run
    real_timeline = run.timeline
    broke: list[str] = []

    def timeline() -> Any:  # the timeline pane's part of the view fails once, on the lane
        if threading.current_thread().name == "tokenstep-keys" and not broke:
            broke.append("once")
            raise RuntimeError("a pane's view broke")
        return real_timeline()

    seen: dict[str, object] = {}

    @contextmanager
    def gate() -> Iterator[None]:
        with lent():  # the decode is held here until both keys are answered
            if "said" not in seen:
                try:
                    w.adjust("temp", 1)
                    seen["said"] = wait_for(
                        lambda: "a pane's view broke" in w.latest.notice,  # type: ignore[union-attr]
                        "the failure in the notice line",
                        timeout=60,
                    )
                    seen["level"] = w.latest.notice_level  # type: ignore[union-attr]
                    w.adjust("temp", 1)
                    seen["next"] = wait_for(
                        lambda: w.latest.settings.temp >= 1.0,  # type: ignore[union-attr]
                        "the next key's view while the decode is held",
                        timeout=60,
                    )
                    seen["mid"] = w.latest
                except AssertionError as exc:
                    seen["failed"] = str(exc)
            yield

    try:
        run.timeline = timeline  # type: ignore[method-assign]
        gate_decodes(w, gate)
        n0 = len(w.latest.text.tokens)  # type: ignore[union-attr]
        assert w.latest.settings.temp == 0.8  # type: ignore[union-attr]
        w.step()
        wait(w, lambda v: len(v.text.tokens) == n0 + 1, "the step")
        assert "failed" not in seen, seen["failed"]
        assert seen["said"] and seen["next"] and seen["level"] == "error"
        assert "the next pick uses it" in seen["mid"].notice  # type: ignore[attr-defined]
    finally:
        assert w.stop()
    assert w.error is not None and "a pane's view broke" in w.error
