"""Observation off the decode's critical path (tui/engine/run/overlap.py): the same run with a
step's views computed on the decode thread and on the worker thread leaves the same records,
bit for bit, and the same run record in the same order."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from tui.engine import SamplerSettings, TokenstepError
from tui.engine.record.run_record import Decode
from tui.engine.run import loop
from tui.engine.run.overlap import QUEUE_MAX, Overlap

PROMPT = "The old lighthouse keeper looked at the sea and"


def _run(make_engine, *, off: bool, n: int = 24):
    eng = make_engine(SamplerSettings(temp=0.9, top_k=40, top_p=0.95, min_p=0.02, seed=7))
    eng.observe_off_thread(off)
    recs = list(loop.generate(eng, n, eng.vocab.tokenize(PROMPT, add_special=True)))
    assert eng.overlap.threaded is off
    eng.rewind(3)  # an engine call after the run settles the views first
    recs += [r for r in (eng.step() for _ in range(4)) if r is not None]
    eng.overlap.settle()
    return eng, recs


def _record(rec):
    """Everything a record holds but the wall time of its decode."""
    return (
        rec.index,
        rec.phase,
        [t.id for t in rec.call.tokens],
        [(c.id, c.piece, c.logit, c.p) for c in rec.top],  # floats compared exactly
        rec.entropy,
        rec.sampled,
        rec.forced,
        rec.eog,
        rec.n_ctx_tokens,
        rec.kv_used,
        rec.kv_problems,
        None if rec.chain is None else [(s.name, s.survivors.tolist()) for s in rec.chain.stages],
        None if rec.chain is None else (rec.chain.final_ids.tolist(), rec.chain.final_p.tolist()),
    )


def _event(ev):
    return dataclasses.replace(ev, ms=0.0) if isinstance(ev, Decode) else ev


def test_the_record_is_the_same_on_the_decode_thread_and_off_it(make_engine):
    inline, a = _run(make_engine, off=False)
    off, b = _run(make_engine, off=True)
    assert len(a) == len(b) > 24
    assert all(r.top and r.entropy > 0 for r in b if r.has_logits)  # complete when read
    assert [_record(r) for r in a] == [_record(r) for r in b]
    assert [_event(e) for e in inline.run.recent()] == [_event(e) for e in off.run.recent()]
    n = inline.n_past
    assert [inline.surprise.get(i, t) for i, t in enumerate(inline.tokens)] == [
        off.surprise.get(i, t) for i, t in enumerate(off.tokens)
    ] and n == off.n_past
    picks = [e for e in off.run.recent() if type(e).__name__ == "Pick"]
    assert len(picks) == 24 + 4 and all(0.0 < p.p <= 1.0 for p in picks)


def test_a_job_runs_in_order_and_its_error_reaches_the_decode_thread():
    ov = Overlap()
    ov.start()
    seen: list[int] = []
    threads: set[str] = set()

    def job(i: int) -> None:
        seen.append(i)
        threads.add(threading.current_thread().name)

    ov.defer(lambda: job(0))  # waits for the next submit, and goes first
    assert seen == []
    for i in range(1, 3 * QUEUE_MAX):  # more than the queue holds: submit waits its turn
        ov.submit(lambda i=i: job(i))
    ov.settle()
    assert seen == list(range(3 * QUEUE_MAX)) and threads == {"observe"}

    def fails() -> None:
        raise ValueError("a view failed")

    ov.submit(fails)
    ov.submit(lambda: job(-1))  # skipped: the run's views stop at the first error
    with pytest.raises(ValueError, match="a view failed"):
        ov.settle()
    assert -1 not in seen
    ov.stop()
    assert not ov.threaded
    ov.submit(lambda: job(99))  # inline again: at once, on this thread
    assert seen[-1] == 99


def test_decode_observers_keep_observation_on_the_decode_thread():
    with pytest.raises(TokenstepError, match="decode observers"):
        Overlap().start([object()])
