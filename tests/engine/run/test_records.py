"""The record log keeps only the newest step records in memory and the rest on disk, and a
saved session still holds every record."""

from __future__ import annotations

import pytest

from tui.engine import SamplerSettings
from tui.engine.run.records import RecordLog
from tui.engine.run.trace import record_to_dict
from tui.worker import Worker
from tui.worker.commands import Save, Send, Step
from tui.worker.session_store import read_session

PROMPT = "The three primary colours are"


def _strip_times(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "decode_ms"}


def test_old_records_move_to_disk_and_come_back_identical(make_engine):
    settings = SamplerSettings(temp=0.9, top_k=40, top_p=0.95, seed=7)
    small = make_engine(settings)
    small.records = RecordLog(small._record_dict, window=4)
    full = make_engine(settings)  # the oracle: every record stays an object
    full.records = RecordLog(full._record_dict, window=10_000)
    for eng in (small, full):
        eng.prefill(eng.vocab.tokenize(PROMPT, add_special=True))
        eng.generate(30)
    assert small.tokens == full.tokens
    n = len(full.records)
    assert len(small.records) == n
    assert small.records.spilled >= n - 8  # at most 2 * window objects
    with pytest.raises(IndexError, match="no longer in memory"):
        small.records[0]
    assert small.records[-1].index == n - 1
    got = [_strip_times(d) for d in small.records.dicts()]
    want = [_strip_times(record_to_dict(full, r)) for r in full.records]
    assert got == want
    # Every pick was noted on its record before the record left memory.
    for a, b in zip(got[:-1], got[1:], strict=True):
        if b["phase"] == "decode":
            assert a["sampled"]["id"] == b["batch"][0]["id"]


def test_rewind_and_sampling_still_work_after_spilling(make_engine):
    eng = make_engine(SamplerSettings(temp=0.0))
    eng.records = RecordLog(eng._record_dict, window=3)
    eng.prefill(eng.vocab.tokenize(PROMPT, add_special=True))
    eng.generate(20)
    tokens = list(eng.tokens)
    eng.rewind(5)
    again = [eng.step() for _ in range(5)]
    assert all(r is not None for r in again)
    assert eng.tokens == tokens  # greedy: the same five tokens come back


def test_saved_session_has_every_record_after_spilling(make_engine, tmp_path):
    eng = make_engine(SamplerSettings(temp=0.0))
    eng.records = RecordLog(eng._record_dict, window=4)
    c = Worker(eng, raw=True, autoplay=False, autosave_dir=None, close_engine=False)
    c.handle(Send(PROMPT))
    for _ in range(25):
        c.handle(Step())
    target = tmp_path / "s.jsonl"
    c.handle(Save(str(target)))
    header, rows = read_session(target)
    assert eng.records.spilled > 0
    assert [r["step"] for r in rows] == list(range(len(eng.records)))
    assert header["n_records"] == len(rows)
    ids = [r["batch"][0]["id"] for r in rows[1:]]
    assert ids == eng.tokens[-len(ids) :]
