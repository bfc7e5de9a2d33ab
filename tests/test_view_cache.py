"""The controller builds views incrementally (pieces, KV cells, timeline totals). After every
kind of change to the cache, the incremental view must equal one computed from scratch."""

from __future__ import annotations

from tui.controller import Controller, View
from tui.engine import Engine, SamplerSettings


def _check(c: Controller) -> View:
    eng: Engine = c.engine
    v = c._build()
    assert v.tokens == tuple(eng.tokens)
    assert v.pieces == tuple(eng.vocab.piece(t) for t in eng.tokens)
    assert v.kv_cells == tuple((x.token, x.pos, tuple(sorted(x.seqs))) for x in eng.kv.cells)
    rows = list(eng.records.dicts(c.s.records_from))
    pre = [r for r in rows if r["phase"] == "prefill"]
    dec = [r for r in rows if r["phase"] != "prefill"]
    tot = v.timeline_totals
    assert (tot.prefill_calls, tot.decode_calls) == (len(pre), len(dec))
    assert tot.prefill_tokens == sum(len(r["batch"]) for r in pre)
    assert tot.decode_tokens == sum(len(r["batch"]) for r in dec)
    assert v.timeline_older + len(v.timeline) == len(rows)
    return v


def test_incremental_view_equals_fresh_view(make_engine):
    eng = make_engine(SamplerSettings(temp=0.0), n_ctx=64, context_full="shift")
    c = Controller(eng, raw=True, autoplay=False, autosave_dir=None, close_engine=False)
    c._do_send("Once upon a time, in a small village by the sea,")
    _check(c)
    for _ in range(10):
        c._do_step()
        _check(c)
    c._do_rewind(3)  # the context shrinks at the end
    _check(c)
    for _ in range(60):  # past the end of the 64-token context: shifts move positions
        c._do_step()
    v = _check(c)
    assert eng.shifts, "the context should have shifted"
    assert v.kv_used <= 64
    c._do_fork()  # cells gain a second sequence in place
    _check(c)
    for _ in range(3):
        c._do_step()
        _check(c)
    c._do_new_chat()
    v = _check(c)
    assert v.tokens == () and v.timeline_totals.decode_calls == 0
    c._do_send("A new chat starts here.")
    _check(c)
