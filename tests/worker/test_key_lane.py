"""The key lane: a sampler key is answered while llama_decode runs, in the order it was pressed,
and never while an observer runs Python inside the graph."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.serve_server import wait_for
from tests.support.worker import gate_decodes, playing_worker, wait
from tui.worker import Worker
from tui.worker.commands import Adjust, RewindTokens


def test_a_sampler_key_is_answered_while_the_decode_is_in_flight(make_engine):
    w = playing_worker(make_engine)
    lent = w.lane.decoding
    seen: dict[str, object] = {}

    @contextmanager
    def gate() -> Iterator[None]:
        with lent():  # the state lock is lent: the decode thread is at llama_decode
            if "temp" not in seen:
                seen["temp"] = w.latest.settings.temp  # type: ignore[union-attr]
                w.adjust("temp", 1)
                # The decode thread waits here, before llama_decode, for the key's view.
                seen["answered"] = wait_for(
                    lambda: w.latest is not None and w.latest.settings.temp != seen["temp"],
                    "the key's view while the decode is held",
                    timeout=60,
                )
                seen["thread"] = threading.current_thread().name
                seen["mid"] = w.latest
            yield

    try:
        gate_decodes(w, gate)
        n0 = len(w.latest.text.tokens)  # type: ignore[union-attr]
        w.step()
        v = wait(w, lambda v: len(v.text.tokens) == n0 + 1, "the step, after the key")
        assert seen["answered"] and seen["thread"] == "tokenstep-decode"
        assert v.settings.temp > seen["temp"]  # type: ignore[operator]
        # Mid-decode the shown row already gave the token in flight: no pick is promised
        # from it, and the notice says the change takes effect at the next pick.
        mid = seen["mid"]
        assert mid.logits.next_pick is None  # type: ignore[attr-defined]
        assert "the next pick uses it" in mid.notice  # type: ignore[attr-defined]
        after = wait(w, lambda v: v.logits.next_pick is not None, "the new row's preview")
        assert after.settings.temp == v.settings.temp
    finally:
        assert w.stop()
    assert w.error is None, w.error


def test_the_lane_takes_only_a_sampler_key_at_the_head_of_the_queue(make_engine):
    w = Worker(make_engine(), autoplay=False)  # not started: nothing takes from the queue
    w.commands_queue.put(RewindTokens(1))
    w.commands_queue.put(Adjust("temp", 1))
    assert w.lane._take() is None  # a key pressed after a rewind waits for the rewind
    assert w.commands_queue.get() == RewindTokens(1)
    assert w.lane._take() == Adjust("temp", 1)
    assert w.commands_queue.empty()


def test_no_lending_while_an_observer_runs_in_the_graph(make_engine):
    eng = make_engine()
    opened: list[bool] = []

    @contextmanager
    def gate() -> Iterator[None]:
        opened.append(True)
        yield

    class Watcher:  # any observer: its eval callback would run Python inside llama_decode
        def configure(self, params: object) -> None: ...
        def before_decode(self, engine: object, call: object) -> None: ...
        def after_decode(self, engine: object, call: object, extras: dict) -> None: ...

    eng.gate_decodes(gate)
    eng.prefill(eng.vocab.tokenize("Hello", add_special=True))
    assert opened == [True]
    eng.observers.append(Watcher())
    eng.feed(eng.sample().token)
    assert opened == [True]  # not opened again
