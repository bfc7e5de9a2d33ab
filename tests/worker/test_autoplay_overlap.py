"""Autoplay on the overlap design (tui/worker/autoplay.py): the same run as with every step's
views on the decode thread, record for record and logits bit for bit, and between two of its
decodes the decode thread builds no view and computes no top candidates and no pick's p."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from typing import Any

from tui.engine import SamplerSettings
from tui.engine.record.run_record import Decode, Turn
from tui.worker import Worker, autoplay

PROMPT = "The old lighthouse keeper looked at the sea and"
# Python functions that only feed the panes: the view, a row's top candidates and entropy,
# a pick's p and its Pick in the run record, the logits pane's last pick. Named by file and
# function, so a module moved to another folder is still found.
PANES_ONLY = {
    ("build.py", "build"),
    ("logits.py", "top_candidates"),
    ("sequences.py", "note_pick"),
    ("autoplay.py", "pick_probabilities"),
}


class Calls:
    """Every call of a watched function on the worker's threads, in order, with the decode
    calls among them (``run_decode``: one ``llama_decode``, with its token count)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, int]] = []  # (thread, function, n_tokens of a decode)
        self._labels: dict[Any, tuple[str, str] | None] = {}

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        label = self._labels.get(code, ())
        if label == ():
            key = (os.path.basename(code.co_filename), code.co_name)
            label = self._labels[code] = (
                key if key in PANES_ONLY or key == ("decode.py", "run_decode") else None
            )
        if label is not None:
            n = frame.f_locals["call"].n_tokens if label[1] == "run_decode" else 0
            self.seen.append((threading.current_thread().name, label[1], n))

    def between_steps(self) -> list[str]:
        """What the decode thread ran between its first and last one-token decode."""
        on_decode = [(f, n) for t, f, n in self.seen if t == "tokenstep-decode"]
        steps = [i for i, (f, n) in enumerate(on_decode) if f == "run_decode" and n == 1]
        assert len(steps) > 8, "the reply should run for a while"
        return [f for f, _ in on_decode[steps[0] : steps[-1]] if f != "run_decode"]


def _run(make_engine, monkeypatch, *, off: bool) -> tuple[Worker, Calls, list[str]]:
    if not off:  # the old design: every step's views on the decode thread
        monkeypatch.setattr(autoplay, "eligible", lambda w: False)
    settings = SamplerSettings(temp=0.9, top_k=40, top_p=0.95, min_p=0.02, seed=7)
    eng = make_engine(settings, n_ctx=64)  # the reply ends when the context is full
    rows: list[bytes] = []  # every logits row the run kept, as its bytes
    keep = eng.set_seq_logits

    def set_seq_logits(seq: int, logits: Any, record: int) -> None:
        rows.append(logits.tobytes())
        keep(seq, logits, record)

    eng.set_seq_logits = set_seq_logits  # type: ignore[method-assign]
    w = Worker(eng, raw=True, autoplay=True, autosave_dir=None, close_engine=False)
    builders: list[str] = []

    def on_view(v: Any) -> None:  # as the app: each view is taken, so the next is built
        builders.append(threading.current_thread().name)
        w.take()

    w.on_view = on_view
    calls = Calls()
    threading.setprofile(calls)  # the worker's threads start below
    try:
        w.start()
        w.send(PROMPT)
        t0 = time.monotonic()
        while not (
            w.state.activity == "done"
            and w.queue_empty()
            and w.latest is not None
            and w.latest.activity == "done"
        ):
            assert time.monotonic() - t0 < 600, "the reply did not end"
            time.sleep(0.02)
        assert w.stop()
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
        monkeypatch.undo()
    assert w.error is None, w.error
    assert w.engine.local is not None and not w.engine.local.overlap.threaded
    return w, calls, rows + builders


def _record(rec: Any) -> tuple[Any, ...]:
    """Everything a record holds but the wall time of its decode."""
    return (
        rec.index,
        rec.phase,
        [t.id for t in rec.call.tokens],
        [(c.id, c.piece, c.logit, c.p) for c in rec.top],  # floats compared exactly
        rec.entropy,
        rec.sampled,
        rec.eog,
        rec.n_ctx_tokens,
        rec.kv_problems,
        None if rec.chain is None else [(s.name, s.survivors.tolist()) for s in rec.chain.stages],
    )


def _event(ev: Any) -> Any:
    """A run record's event without wall times."""
    if isinstance(ev, Decode):
        return dataclasses.replace(ev, ms=0.0)
    return dataclasses.replace(ev, prefill_ms=0.0) if isinstance(ev, Turn) else ev


def test_autoplay_off_the_decode_thread_is_the_same_run_and_leaves_it_only_the_pick(
    make_engine, monkeypatch
):
    old, old_calls, old_out = _run(make_engine, monkeypatch, off=False)
    new, new_calls, new_out = _run(make_engine, monkeypatch, off=True)
    a, b = old.engine.local, new.engine.local
    assert a is not None and b is not None
    assert a.stop_reason == b.stop_reason == "context full"
    assert a.tokens == b.tokens
    assert [_record(r) for r in a.records] == [_record(r) for r in b.records]
    assert [_event(e) for e in a.run.recent()] == [_event(e) for e in b.run.recent()]
    rows_a = [x for x in old_out if isinstance(x, bytes)]
    rows_b = [x for x in new_out if isinstance(x, bytes)]
    assert len(rows_a) == len(a.records) and rows_a == rows_b  # logits, bit for bit
    assert old.state.last_pick == new.state.last_pick  # p, p' and all: the pane's last pick
    assert new.latest is not None and new.latest.text.last_pick == new.state.last_pick

    # Before: views, top candidates and p sat between two decodes on the decode thread.
    before = old_calls.between_steps()
    assert {"build", "top_candidates", "note_pick"} <= set(before), sorted(set(before))
    # Now none of them does; they ran on the observation thread and on the key lane's.
    assert new_calls.between_steps() == []
    off_thread = {(t, f) for t, f, _ in new_calls.seen if f != "run_decode"}
    assert ("observe", "top_candidates") in off_thread and ("observe", "note_pick") in off_thread
    assert ("tokenstep-keys", "build") in off_thread  # a view built beside a decode
    assert "tokenstep-keys" in new_out  # and handed over from there
