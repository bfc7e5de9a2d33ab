"""The worker builds views incrementally (pieces, KV cells, timeline totals). After every
kind of change to the cache, the incremental view must equal one computed from scratch."""

from __future__ import annotations

from tui.engine import Engine, SamplerSettings
from tui.worker import View, Worker
from tui.worker.commands import ForkSeq, NewChat, RewindTokens, Send, Step


def _check(c: Worker) -> View:
    eng: Engine = c.engine
    v = c.build_view()
    assert v.text.tokens == tuple(eng.tokens)
    assert v.text.pieces == tuple(eng.vocab.piece(t) for t in eng.tokens)
    assert v.kv.kv_cells == tuple((x.token, x.pos, tuple(sorted(x.seqs))) for x in eng.kv.cells)
    rows = list(eng.records.dicts(c.state.records_from))
    pre = [r for r in rows if r["phase"] == "prefill"]
    dec = [r for r in rows if r["phase"] != "prefill"]
    tot = v.timeline.totals
    assert (tot.prefill_calls, tot.decode_calls) == (len(pre), len(dec))
    assert tot.prefill_tokens == sum(len(r["batch"]) for r in pre)
    assert tot.decode_tokens == sum(len(r["batch"]) for r in dec)
    assert v.timeline.older + len(v.timeline.calls) == len(rows)
    return v


def test_incremental_view_equals_fresh_view(make_engine):
    eng = make_engine(SamplerSettings(temp=0.0), n_ctx=64, context_full="shift")
    c = Worker(eng, raw=True, autoplay=False, autosave_dir=None, close_engine=False)
    c.handle(Send("Once upon a time, in a small village by the sea,"))
    _check(c)
    for _ in range(10):
        c.handle(Step())
        _check(c)
    c.handle(RewindTokens(3))  # the context shrinks at the end
    _check(c)
    for _ in range(60):  # past the end of the 64-token context: shifts move positions
        c.handle(Step())
    v = _check(c)
    assert eng.shifts, "the context should have shifted"
    assert v.kv.kv_used <= 64
    c.handle(ForkSeq())  # cells gain a second sequence in place
    _check(c)
    for _ in range(3):
        c.handle(Step())
        _check(c)
    c.handle(NewChat())
    v = _check(c)
    assert v.text.tokens == () and v.timeline.totals.decode_calls == 0
    c.handle(Send("A new chat starts here."))
    _check(c)
